#!/bin/bash
# Device run 12 (one GPU): the tree's GPU tests (bf16 and FP32 builds) and compute-sanitizer
# memcheck over flash3's warp-specialised backward (both dQ orders) and flash's.
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
S=()
timeout 330 $B/test_gpu > $OUT/test_gpu_bf16.log 2>&1; S+=("bf16 rc=$?: $(tail -n 1 $OUT/test_gpu_bf16.log)")
grep -E "^\[  FAILED" $OUT/test_gpu_bf16.log | head
timeout 150 $B/test_gpu_fp32 > $OUT/test_gpu_fp32.log 2>&1; S+=("fp32 rc=$?: $(tail -n 1 $OUT/test_gpu_fp32.log)")
grep -E "^\[  FAILED" $OUT/test_gpu_fp32.log | head
timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 $B/test_gpu \
  --gtest_filter='*flash3_B3_T17_*:*flash_B3_T17_*:*flash3_B1_T1000*:Flash3*:Hopper*' > $OUT/memcheck.log 2>&1
S+=("memcheck rc=$?: $(grep -E 'ERROR SUMMARY' $OUT/memcheck.log | tail -n 1), $(grep -cE '^\[       OK' $OUT/memcheck.log) ok")
echo "== summary ($(( $(date +%s) - START )) s) =="; printf '%s\n' "${S[@]}"
