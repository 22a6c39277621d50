#!/usr/bin/env bash
# step-breakdown/run.sh — where a d12 (GPT-2 124M) training step's GPU time goes, B 32 x T 1024,
# flash3: ncu's gpu__time_duration of every kernel of one warm-up and one timed step, grouped per
# kernel and per category by scripts/step_breakdown.py, next to the same step without ncu (its
# median ms/step, tokens/s and MFU). Builds build/flashgpt first (nothing to do when it is
# current). Needs a GPU, nvcc and ncu (Nsight Compute) on PATH; ~2 min after the build.
#   bench/results/step-breakdown/run.sh [OUT_DIR]   (default: a new runs/results/step-breakdown-<time>)
set -euo pipefail
source "$(dirname "$0")/../../../scripts/results_lib.sh"
command -v ncu > /dev/null || { echo "step-breakdown/run.sh: ncu (Nsight Compute) not found on PATH" >&2; exit 1; }
(cd "$(dirname "$0")/../../.." && make -j"$(nproc)" build/flashgpt > /dev/null)
results_start step-breakdown "${1:-}"
step=(build/flashgpt train --bench --device cuda --model d12 --batch 32 --seq-len 1024 --attn flash3
      --vocab-size 50257)
"${step[@]}" --bench-steps 20 > "$OUT/step.log" 2>&1
ncu --metrics gpu__time_duration.sum --csv --print-units base "${step[@]}" --bench-warmup 1 \
  --bench-steps 1 > "$OUT/ncu.csv" 2> "$OUT/ncu.err"
results_table "Where the d12 training step's time goes" \
  "ncu --metrics gpu__time_duration.sum --csv --print-units base ${step[*]} --bench-warmup 1 --bench-steps 1" \
  ncu="$OUT/ncu.csv" bench="$OUT/step.log"
