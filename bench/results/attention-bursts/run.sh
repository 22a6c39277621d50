#!/usr/bin/env bash
# attention-bursts/run.sh — flash3 and PyTorch's cuDNN attention timed two ways on one GPU, in
# one run: in bursts from an idle GPU (--idle-ms 2000 --warmup-ms 0: one untimed call, the median
# of 10, as cudnn-frontend's and FlashAttention's published tables are timed), and after 500 ms of
# sustained load (this project's way: the clocks a training run sees). Causal bf16 at the shape of
# cudnn-frontend's Llama 3.1 tables (HS 128, 64 query heads, 8 kv heads, B 2, T 16K and 32K) and
# at this project's (HS 128, 16 heads, and HS 64, 12 heads; B 1, T 16K; HS 128 also at 32K).
# ROUNDS (default 2) rounds, burst then sustained in each; nvidia-smi samples the SM clock and
# the power every 50 ms beside each run. Needs a Hopper GPU, `make`, python3 with torch; ~5 min.
#   bench/results/attention-bursts/run.sh [OUT_DIR]   (default: a new runs/results/attention-bursts-<time>)
set -euo pipefail
source "$(dirname "$0")/../../../scripts/results_lib.sh"
results_start attention-bursts "${1:-}"
base=(python3 scripts/bench_attention.py --binary build/flashgpt --backends flash3
      --torch-backends cudnn --causal 1 --warmup 1 --iters 10 --budget-ms 100000)
# name, then the shape's flags
shapes=("llama16k --hs 128 --heads 64 --kv-heads 8 --seq-lens 16384 --tokens 32768"
        "llama32k --hs 128 --heads 64 --kv-heads 8 --seq-lens 32768 --tokens 65536"
        "hs128 --hs 128 --seq-lens 16384,32768 --tokens 16384"
        "hs64 --hs 64 --seq-lens 16384 --tokens 16384")
raws=()
for r in $(seq "${ROUNDS:-2}"); do
  for protocol in burst sustained; do
    for shape in "${shapes[@]}"; do
      read -r name flags <<< "$shape"
      csv="$OUT/${protocol}_${r}_$name.csv"
      nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader,nounits -lms 50 \
        > "$csv.clocks" &
      smi=$!
      if [ "$protocol" = burst ]; then warm=(--idle-ms 2000 --warmup-ms 0)
      else warm=(--idle-ms 0 --warmup-ms 500); fi
      # shellcheck disable=SC2086  # the shape's flags split into words
      "${base[@]}" $flags "${warm[@]}" --out-dir "$OUT" --csv "$csv" \
        > "$OUT/${protocol}_${r}_$name.log" 2>&1
      kill "$smi"
      wait "$smi" 2>/dev/null || true
      raws+=("$protocol.$r=$csv")
    done
  done
done
results_table "Attention in bursts and under sustained load" \
  "${base[*]} SHAPE (--idle-ms 2000 --warmup-ms 0 | --idle-ms 0 --warmup-ms 500)" "${raws[@]}"
