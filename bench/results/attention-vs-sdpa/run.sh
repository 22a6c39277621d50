#!/usr/bin/env bash
# attention-vs-sdpa/run.sh — flash3 and flash against PyTorch SDPA (FlashAttention-2 and cuDNN) in
# one process on one GPU: causal bf16, 16384 tokens per batch, HS 64 (12 heads) and HS 128 (16),
# T 4K/16K/64K; ROUNDS (default 4) rounds of scripts/bench_attention.py in a row, each cell timed
# after 500 ms of sustained load. Needs a Hopper GPU, `make`, python3 with torch; ~2 min a round.
#   bench/results/attention-vs-sdpa/run.sh [OUT_DIR]   (default: a new runs/results/attention-vs-sdpa-<time>)
set -euo pipefail
source "$(dirname "$0")/../../../scripts/results_lib.sh"
results_start attention-vs-sdpa "${1:-}"
cmd=(python3 scripts/bench_attention.py --binary build/flashgpt --backends flash,flash3
     --torch-backends flash,cudnn --hs 64,128 --seq-lens 4096,16384,65536 --causal 1 --iters 10
     --warmup 3 --budget-ms 1500 --warmup-ms 500)
rounds=()
for r in $(seq "${ROUNDS:-4}"); do
  "${cmd[@]}" --out-dir "$OUT" --csv "$OUT/round_$r.csv" > "$OUT/round_$r.log" 2>&1
  rounds+=("$OUT/round_$r.csv")
done
results_table "Attention against PyTorch SDPA" \
  "${cmd[*]}" "${rounds[@]}"
