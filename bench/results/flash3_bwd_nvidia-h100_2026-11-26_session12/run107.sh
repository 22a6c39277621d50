#!/bin/bash
# Device run 107 (1 GPU), session 12: the final tree's timer test (median_ms with warmup_ms) and
# the Kernels suite it belongs to; flash3's tests once more on the final binary.
cd "$(dirname "$0")/.."
B=.carry/bin
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p build; cp $B/flashgpt $B/test_gpu build/
timeout 200 build/test_gpu --gtest_filter='Kernels.*:*flash3*:*Flash3*' > $OUT/test.log 2>&1
echo "rc=$?"; grep -E "median_ms|^\[==========\] [0-9]+ tests|^\[  PASSED|^\[  FAILED|^\[  SKIPPED \] [0-9]" $OUT/test.log
