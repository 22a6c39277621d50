#!/usr/bin/env bash
# prepare_long_documents.sh — a corpus of long real documents, for the document mask's
# benchmarks (bench/results/document-masks): each Debian changelog installed here
# (/usr/share/doc/*/changelog.Debian.gz) is ONE document (its blank lines dropped, so `flashgpt
# prepare` does not split it into paragraphs), cut at CAP bytes (default 16384, about 4K
# tokens), prepared with a 4096-token vocabulary into DIR (default runs/data/longdocs), a tenth of
# the documents for validation (about 160K tokens: one 128K window).
# prepare's closing lines print the document lengths (count, mean, p50, p90, max).
#   scripts/prepare_long_documents.sh [DIR]     (FLASHGPT: another flashgpt binary)
# Container images often leave /usr/share/doc out: prepare DIR on a Debian machine and copy it.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-runs/data/longdocs}
cap=${CAP:-16384}
source scripts/debian_changelogs.sh
changelogs_start prepare_long_documents.sh "$dir"
[ ${#logs[@]} -ge 100 ] || {
  echo "prepare_long_documents.sh: only ${#logs[@]} Debian changelogs here; prepare $dir on a Debian machine with /usr/share/doc and copy it" >&2
  exit 1
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
i=0
for f in "${logs[@]}"; do
  gzip -dc "$f" | grep -v '^[[:space:]]*$' | head -c "$cap" > "$tmp/doc_$(printf %05d $i).txt" || true
  i=$((i + 1))
done
"$BIN" prepare --input "$tmp"/doc_*.txt --out "$dir" --vocab-size 4096 --val-fraction 0.1
