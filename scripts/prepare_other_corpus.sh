#!/usr/bin/env bash
# prepare_other_corpus.sh — a second corpus for the checks that must hold on any text
# (scripts/gpu_stress.sh, scripts/test_multigpu.sh: DATA=DIR): the Debian changelogs of the
# packages installed here (/usr/share/doc/*/changelog.Debian.gz: release notes with versions,
# bug numbers, names and dates; nothing like the default fortunes corpus, and never used to tune
# anything), concatenated in package-name order, the first MB megabytes (default 4), prepared
# with `flashgpt prepare` (vocabulary 4096; entries split on blank lines) into DIR (default
# runs/data/other). DIR/SOURCE.txt records what went in (packages, bytes, sha256 of the text).
#   scripts/prepare_other_corpus.sh [DIR]      (FLASHGPT: another flashgpt binary than build/flashgpt)
# Container images often leave /usr/share/doc out: then prepare DIR on a Debian machine that
# has it and copy DIR over (it holds tokenizer.bin and the shards; a few MB).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-runs/data/other}
mb=${MB:-4}
if [ -f "$dir/SOURCE.txt" ] && [ -f "$dir/tokenizer.bin" ]; then
  echo "prepare_other_corpus.sh: $dir is already prepared: $(head -n 1 "$dir/SOURCE.txt")"
  exit 0
fi
source scripts/debian_changelogs.sh
changelogs_start prepare_other_corpus.sh "$dir"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
text="$tmp/debian_changelogs.txt"
if [ ${#logs[@]} -gt 0 ]; then
  for f in "${logs[@]}"; do gzip -dc "$f"; echo; done | head -c $((mb * 1048576)) > "$text" || true
fi
bytes=$(stat -c %s "$text" 2>/dev/null || echo 0)
if [ "$bytes" -lt $((mb * 1048576)) ]; then
  echo "prepare_other_corpus.sh: only $bytes bytes of Debian changelogs here (${#logs[@]} packages), $mb MB wanted;" \
    "prepare $dir on a Debian machine that has /usr/share/doc and copy it over (or set MB lower)" >&2
  exit 1
fi
"$BIN" prepare --input "$text" --out "$dir" --vocab-size 4096
{
  echo "Debian changelogs: the first $mb MB ($bytes bytes) of the changelogs of the ${#logs[@]} installed packages in package-name order, sha256 $(sha256sum < "$text" | cut -d' ' -f1)"
  echo "made by scripts/prepare_other_corpus.sh on $(date -u +%Y-%m-%d) from /usr/share/doc/*/changelog.Debian.gz"
} > "$dir/SOURCE.txt"
echo "prepare_other_corpus.sh: $(head -n 1 "$dir/SOURCE.txt")"
