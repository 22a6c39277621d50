#!/bin/bash
# Device run 25 (1 GPU), tree = a26a597: d12 B 32 x T 1024 training steps, flash3 and flash
# against torch.compile with SDPA cuDNN and eager cuDNN, in one run (README flash3 section).
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p build; cp $B/flashgpt build/flashgpt
timeout 480 python3 scripts/bench_train.py --ours flash3,flash --torch compile-cudnn,cudnn --out $OUT > $OUT/bench_train.log 2>&1
echo "bench_train rc=$? ($(( $(date +%s) - START )) s)"
tail -n 12 $OUT/bench_train.log | cut -c1-200
