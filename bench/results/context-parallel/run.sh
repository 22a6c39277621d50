#!/usr/bin/env bash
# context-parallel/run.sh — one sequence over 2 GPUs: d12 (RoPE, B 1, --recompute layer-but-attn,
# --attn flash3) with --cp 2 against one GPU, at T = 128K, 256K, 512K and 1M, each T's two points
# one after the other (scripts/bench_cp.sh; 128K and 256K with a warm-up step, 512K and 1M one
# timed step). Needs 2 GPUs of one node (80 GB each), `make`; ~15 min.
#   bench/results/context-parallel/run.sh [OUT_DIR]   (default: a new runs/results/context-parallel-<time>)
set -euo pipefail
source "$(dirname "$0")/../../../scripts/results_lib.sh"
results_start context-parallel "${1:-}" 2
BENCH_CP_OUT="$OUT/bench_cp" ATTN=flash3 TS="131072 262144" WARMUP=1 STEPS=2 scripts/bench_cp.sh \
  > "$OUT/bench_cp_short.log" 2>&1
BENCH_CP_OUT="$OUT/bench_cp" ATTN=flash3 TS="524288 1048576" CP1_MAX_T=1048576 WARMUP=0 STEPS=1 \
  scripts/bench_cp.sh > "$OUT/bench_cp_long.log" 2>&1
results_table "Context parallel: cp 2 against one GPU" \
  "ATTN=flash3 scripts/bench_cp.sh (see run.sh)" "flash3=$OUT/bench_cp/runs.csv"
