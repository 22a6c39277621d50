#!/usr/bin/env bash
# long-context/run.sh — d12 (RoPE, B 1, vocabulary 50257) on one GPU at T = 128K and 1M with
# `flashgpt train --bench`: tokens/s, MFU, and the measured peak beside the memory plan the trainer
# prints. 128K: flash3 and flash with --recompute layer-but-attn, flash3 with layer; 1M: flash3 and
# flash with layer-but-attn (one timed step each, ~3.5 min each). Needs an 80 GB GPU and `make`.
#   bench/results/long-context/run.sh [OUT_DIR]   (default: a new runs/results/long-context-<time>)
set -euo pipefail
source "$(dirname "$0")/../../../scripts/results_lib.sh"
results_start long-context "${1:-}"
logs=()
for point in "131072 flash3 layer-but-attn 1 2" "131072 flash layer-but-attn 1 2" \
             "131072 flash3 layer 1 2" "1048576 flash3 layer-but-attn 0 1" \
             "1048576 flash layer-but-attn 0 1"; do
  read -r T attn rec warm steps <<<"$point"
  log="$OUT/T${T}_${attn}_${rec}.log"
  build/flashgpt train --bench --model d12 --vocab-size 50257 --pos rope --seq-len "$T" --batch 1 \
    --attn "$attn" --recompute "$rec" --bench-warmup "$warm" --bench-steps "$steps" > "$log" 2>&1 || true
  logs+=("$log")
done
results_table "Long context on one GPU" \
  "flashgpt train --bench --model d12 --vocab-size 50257 --pos rope --batch 1 --seq-len T --attn A --recompute R" \
  "${logs[@]}"
