#!/usr/bin/env bash
# profile-sweep/run.sh — `flashgpt profile`: d12 (RoPE, --recompute none) trained at T = 1K..128K
# with 16384 tokens per step, for flash3, flash, naive and flash1: measured peak memory against the
# memory plan, tokens/s, attention time against its roofline and the measured GEMM ceiling; the
# plots (memory_vs_T.png, tokens_per_s_vs_T.png, predicted_vs_measured.png) go to OUT/profile.
# Needs an 80 GB GPU, `make`, python3-matplotlib for the plots; ~6 min.
#   bench/results/profile-sweep/run.sh [OUT_DIR]   (default: a new runs/results/profile-sweep-<time>)
set -euo pipefail
source "$(dirname "$0")/../../../scripts/results_lib.sh"
results_start profile-sweep "${1:-}"
cmd=(build/flashgpt profile --model d12 --attn flash3,flash,naive,flash1 --max-step-seconds 20)
"${cmd[@]}" --out "$OUT/profile" > "$OUT/profile.log" 2>&1
results_table "Context-length sweep" \
  "${cmd[*]}" "$OUT/profile/profile.csv"
