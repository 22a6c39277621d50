#!/usr/bin/env bash
# data-parallel/run.sh — data-parallel scaling of d12 training (scripts/bench_scaling.sh: `train
# --bench` through scripts/launch.sh on 1, 2 and 4 GPUs, those present): T 1024 with 32 sequences
# per GPU (the gradient all-reduce overlapped with the backward, and --no-overlap), and T 8192 with
# 4. Efficiency = tokens/s per GPU at N GPUs over one GPU's. Needs 2 or 4 GPUs, `make`; ~5 min.
#   bench/results/data-parallel/run.sh [OUT_DIR]   (default: a new runs/results/data-parallel-<time>)
set -euo pipefail
source "$(dirname "$0")/../../../scripts/results_lib.sh"
results_start data-parallel "${1:-}" 2
export RESULTS_DIR="$OUT" LOGS="$OUT/logs"
TAG=t1024 scripts/bench_scaling.sh > "$OUT/t1024.log" 2>&1
SEQ=8192 BATCH=4 TAG=t8192 scripts/bench_scaling.sh > "$OUT/t8192.log" 2>&1
TAG=t1024_no_overlap scripts/bench_scaling.sh --no-overlap > "$OUT/t1024_no_overlap.log" 2>&1
results_table "Data-parallel scaling" \
  "scripts/bench_scaling.sh (see run.sh)" \
  "$OUT"/scaling_*_t1024.csv "$OUT"/scaling_*_t8192.csv "$OUT"/scaling_*_t1024_no_overlap.csv
