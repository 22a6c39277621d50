#!/usr/bin/env bash
# determinism/run.sh — what --deterministic costs: the backward of flash and flash3 with dQ's
# partials added in arrival order (default) and in a fixed order (--deterministic), HS 64 and
# 128, T 4K/16K/64K, causal bf16, in one binary on one GPU. Needs a Hopper GPU and `make`; ~1 min.
#   bench/results/determinism/run.sh [OUT_DIR]   (default: a new runs/results/determinism-<time>)
set -euo pipefail
source "$(dirname "$0")/../../../scripts/results_lib.sh"
results_start determinism "${1:-}"
bench=(build/flashgpt bench-attention --backends flash,flash3 --hs 64,128 --seq-lens 4096,16384,65536
       --iters 10 --warmup 3 --budget-ms 1500 --warmup-ms 500)
"${bench[@]}" --csv "$OUT/plain.csv" > "$OUT/plain.log" 2>&1
"${bench[@]}" --deterministic --csv "$OUT/deterministic.csv" > "$OUT/deterministic.log" 2>&1
results_table "The cost of --deterministic" \
  "${bench[*]} [--deterministic]" \
  "plain=$OUT/plain.csv" "deterministic=$OUT/deterministic.csv"
