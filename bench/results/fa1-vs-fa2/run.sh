#!/usr/bin/env bash
# fa1-vs-fa2/run.sh — FlashAttention-1's loop order (flash1) against FlashAttention-2's (flash) and
# the naive attention, same tensor-core code, causal bf16 forward+backward, HS 64 and 128, T 1K/4K/16K
# (`flashgpt bench-attention`). Needs a Hopper GPU and `make`; ~1 min.
#   bench/results/fa1-vs-fa2/run.sh [OUT_DIR]   (default: a new runs/results/fa1-vs-fa2-<time>)
set -euo pipefail
source "$(dirname "$0")/../../../scripts/results_lib.sh"
results_start fa1-vs-fa2 "${1:-}"
bench=(build/flashgpt bench-attention --backends naive,flash,flash1 --hs 64,128
       --seq-lens 1024,4096,16384 --causal 1)
"${bench[@]}" --csv "$OUT/backends.csv" > "$OUT/backends.log" 2>&1
results_table "FlashAttention-1 against FlashAttention-2 loop order" \
  "${bench[*]}" "$OUT/backends.csv"
