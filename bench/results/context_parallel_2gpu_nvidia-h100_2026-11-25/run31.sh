#!/bin/bash
# Device run 31 (one GPU is enough): the final tree of this session (stagger reverted; cuBLASLt
# state per host thread; high-priority ring comm stream; ring timing): the CUDA model's cp tests
# 5 times (run 30 failed once: two virtual ranks shared cuBLASLt's cache and workspace), the
# ring tests with virtual ranks, the matmul and flash tests.
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p build; cp $B/test_gpu build/
t() { echo "[$(( $(date +%s) - START )) s] $*"; }
timeout 100 build/test_gpu --gtest_filter='*CudaModelCp*' --gtest_repeat=5 > $OUT/cp_repeat.log 2>&1
t "CudaModelCp x5 rc=$?: $(grep -cE '^\[       OK \]' $OUT/cp_repeat.log) ok, $(grep -cE '^\[  FAILED  \] CudaModelCp\.[A-Za-z]+ \(' $OUT/cp_repeat.log) failed"
timeout 120 build/test_gpu --gtest_filter='*RingAttention*:*FlashGpu*:Kernels.Matmul*:CudaModel.*' > $OUT/tests.log 2>&1
t "ring/flash/matmul/model tests rc=$?: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $OUT/tests.log | tr '\n' ' ' | cut -c1-300)"
grep -E "^\[  FAILED" $OUT/tests.log $OUT/cp_repeat.log | sort | uniq | head
