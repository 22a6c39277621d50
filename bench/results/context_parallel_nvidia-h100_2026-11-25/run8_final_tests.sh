#!/bin/bash
# Device run 8 (one GPU): the final tree's GPU tests, bf16 and FP32 builds.
cd "$(dirname "$0")/.."
B=.carry/bin
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee $OUT/gpu.txt
timeout 330 $B/test_gpu > $OUT/test_gpu_bf16.log 2>&1; echo "bf16 rc=$?"
grep -E "^\[  FAILED" $OUT/test_gpu_bf16.log | head; tail -1 $OUT/test_gpu_bf16.log
timeout 200 $B/test_gpu_fp32 > $OUT/test_gpu_fp32.log 2>&1; echo "fp32 rc=$?"
grep -E "^\[  FAILED" $OUT/test_gpu_fp32.log | head; tail -1 $OUT/test_gpu_fp32.log
