#!/bin/bash
# Device run 23 (2 GPUs): bench_cp.sh at T = 128K and 512K (cp 2, then one GPU), 1 warm-up + 2
# timed steps each: the points run 20 left out.
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p build; cp $B/flashgpt build/flashgpt
export NCCL_NVLS_ENABLE=0
TS="131072 524288" STEPS=2 RUN_TIMEOUT=300 OUT=$OUT/bench_cp timeout 570 scripts/bench_cp.sh > $OUT/bench_cp.log 2>&1
echo "bench_cp rc=$? ($(( $(date +%s) - START )) s)"
grep -E "^ +bench:|does not fit|failed|timeout|^\||^==" $OUT/bench_cp.log | cut -c1-260
