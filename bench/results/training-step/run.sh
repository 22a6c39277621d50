#!/usr/bin/env bash
# training-step/run.sh — a d12 (GPT-2 124M) training step against PyTorch on one GPU, same process
# settings: B 32 x T 1024 (flash3 also with --tune-matmul and with --no-cuda-graphs) against
# eager and torch.compile with SDPA cuDNN (default and reduce-overhead modes), torch.compile's
# max-autotune mode in a process of its own (its GEMM tuning compiles for ~5 min on 16 cores),
# and B 1 at T 32K and 128K against eager SDPA FlashAttention-2 (which runs out of memory at 128K
# on 80 GB). Needs a GPU, `make`, python3 with torch; ~10 min.
#   bench/results/training-step/run.sh [OUT_DIR]   (default: a new runs/results/training-step-<time>)
set -euo pipefail
source "$(dirname "$0")/../../../scripts/results_lib.sh"
results_start training-step "${1:-}"
python3 scripts/bench_train.py --ours flash3,flash3+tuned,flash3+eager,flash \
  --torch compile-cudnn,compile-graphs-cudnn,cudnn --out "$OUT/t1024" \
  > "$OUT/t1024.log" 2>&1
python3 scripts/bench_train.py --ours "" --torch compile-max-cudnn --out "$OUT/t1024max" \
  > "$OUT/t1024max.log" 2>&1
# Where launches cost: small steps, ours with and without CUDA graphs (two rounds each) against
# torch.compile with and without them.
for BT in "4 256" "1 1024"; do
  set -- $BT
  python3 scripts/bench_train.py --batch "$1" --seq-len "$2" --ours flash3,flash3+eager,flash3,flash3+eager \
    --torch compile-graphs-cudnn,compile-cudnn --out "$OUT/b$1t$2" > "$OUT/b$1t$2.log" 2>&1
done
for T in 32768 131072; do
  python3 scripts/bench_train.py --model d12 --batch 1 --seq-len "$T" --steps 3 --ours flash3,flash \
    --torch flash --out "$OUT/t$T" > "$OUT/t$T.log" 2>&1
done
results_table "Training step against PyTorch" \
  "python3 scripts/bench_train.py (see run.sh)" \
  "$OUT"/t1024/*.csv "$OUT"/t1024max/*.csv "$OUT"/b4t256/*.csv "$OUT"/b1t1024/*.csv \
  "$OUT"/t32768/*.csv "$OUT"/t131072/*.csv
