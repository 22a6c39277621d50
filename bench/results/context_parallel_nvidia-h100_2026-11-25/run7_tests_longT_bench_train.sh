#!/bin/bash
# Device run 7 (one GPU): ring/model-cp/flash tests after the ring's refactor; flash vs flash3
# at long T (is flash3's forward slower at 512K?); the d12 training step against PyTorch eager
# and torch.compile with cuDNN attention.
cd "$(dirname "$0")/.."
B=.carry/bin
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee $OUT/gpu.txt
timeout 120 $B/test_gpu --gtest_filter='Ring*:CudaModelCp*:Flash*' > $OUT/test_ring.log 2>&1; echo "tests rc=$?"
grep -E "^\[  FAILED" $OUT/test_ring.log | head; tail -1 $OUT/test_ring.log
timeout 150 $B/flashgpt bench-attention --backends flash,flash3 --hs 64 --seq-lens 131072,524288 --tokens 1 --warmup 1 --iters 3 > $OUT/attn_long.log 2>&1; echo "attn rc=$?"
grep -E "^flash" $OUT/attn_long.log
timeout 330 python3 scripts/bench_train.py --binary $B/flashgpt --ours flash3,flash --torch flash,cudnn,compile-cudnn --out $OUT > $OUT/bench_train.log 2>&1; echo "bench_train rc=$?"
tail -12 $OUT/bench_train.log
