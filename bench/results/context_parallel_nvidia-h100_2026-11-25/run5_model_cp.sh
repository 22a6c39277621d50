#!/bin/bash
# Device run 5 (one GPU): the CUDA model with --cp 2 (two virtual ranks) against the CPU model;
# the ring tests again.
cd "$(dirname "$0")/.."
B=.carry/bin
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee $OUT/gpu.txt
timeout 200 $B/test_gpu --gtest_filter='CudaModelCp*:Ring*:CudaModel.*' > $OUT/test_cp.log 2>&1; echo "rc=$?"
grep -E "^cp 2|grad |FAILED|OK \] CudaModelCp" $OUT/test_cp.log | head -80; tail -1 $OUT/test_cp.log
