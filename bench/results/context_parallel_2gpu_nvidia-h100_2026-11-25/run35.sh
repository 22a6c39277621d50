#!/bin/bash
# Device run 35 (2 GPUs), session 6: the final tree (main after merging the direct dK/dV ring
# backward, 1d83fa6): every single-process GPU test, NCCL ring cases included (2 GPUs visible). ~5 min.
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p build; cp $B/flashgpt $B/test_gpu build/
export NCCL_NVLS_ENABLE=0
t() { echo "[$(( $(date +%s) - START )) s] $*"; }
timeout 480 build/test_gpu > $OUT/test_gpu.log 2>&1
t "test_gpu rc=$?"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests ran|^\[  FAILED" $OUT/test_gpu.log | head -20
