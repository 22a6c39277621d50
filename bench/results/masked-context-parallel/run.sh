#!/usr/bin/env bash
# masked-context-parallel/run.sh — context parallelism under the document mask and a sliding
# window: d12 (RoPE, B 1, --recompute layer-but-attn, flash3) on real documents
# (scripts/prepare_long_documents.sh: Debian changelogs, mean ~2.8K tokens) at T = 128K and 1M,
# --mask document and --window 4096, on 1, 2 and 4 GPUs (scripts/launch.sh, --cp N): tokens/s,
# efficiency against one GPU, peak memory, the start line's load balance. With a baseline binary
# (BASELINE=path, e.g. built from f519d7f, whose masked ring passed every K/V block round) the
# cp 2 and 4 points run again with it, interleaved, for the straight sends' same-run gain.
# Needs 4 Hopper GPUs (80 GB), `make`; ~5 min (twice that with BASELINE).
#   bench/results/masked-context-parallel/run.sh [OUT_DIR]
set -euo pipefail
source "$(dirname "$0")/../../../scripts/results_lib.sh"
results_start masked-context-parallel "${1:-}" 4
data=${DATA:-runs/data/longdocs}
[ -f "$data/tokenizer.bin" ] || scripts/prepare_long_documents.sh "$data"
export NCCL_NVLS_ENABLE=0
raws=()
point() {  # schedule binary cp T mask window steps
  local log="$OUT/$1_$5_w$6_T$4_cp$3.log"
  # The point first: it names the row even if the run fails before its opening lines.
  echo "point: T $4, --mask $5, --window $6, --cp $3" > "$log"
  FLASHGPT=$2 scripts/launch.sh --gpus "$3" -- --train-pattern "$data/train_*.bin" \
    --tokenizer "$data/tokenizer.bin" --model d12 --pos rope --batch 1 \
    --recompute layer-but-attn --attn flash3 --warmup 2 --eval-every 0 --sample-every 0 \
    --seq-len "$4" --mask "$5" --window "$6" --steps "$7" --cp "$3" >> "$log" 2>&1 || true
  raws+=("$1=$log")
}
for T in 131072 1048576; do
  steps=8; [ "$T" = 1048576 ] && steps=5
  for cp in 1 2 4; do
    for mw in "document 0" "causal 4096"; do
      read -r mask window <<<"$mw"
      point straight build/flashgpt "$cp" "$T" "$mask" "$window" "$steps"
      [ -z "${BASELINE:-}" ] || [ "$cp" = 1 ] || point ring "$BASELINE" "$cp" "$T" "$mask" "$window" "$steps"
    done
  done
done
results_table "Context parallel under masks: straight sends" \
  "bench/results/masked-context-parallel/run.sh" "${raws[@]}"
