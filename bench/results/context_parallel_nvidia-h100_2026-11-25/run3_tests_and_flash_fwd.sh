#!/bin/bash
# Device run 3 (one GPU): GPU tests after the forward's compile-time causal flag; flash forward
# against the tree before the problem form (b265f0d), interleaved, one run.
cd "$(dirname "$0")/.."
B=.carry/bin
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee $OUT/gpu.txt
timeout 300 $B/test_gpu > $OUT/test_gpu.log 2>&1; echo "test_gpu rc=$?"
grep -E "^\[  FAILED" $OUT/test_gpu.log | head; tail -1 $OUT/test_gpu.log
for bin in flashgpt_base flashgpt flashgpt_base flashgpt; do
  timeout 100 $B/$bin bench-attention --backends flash --seq-lens 4096,16384 --warmup 3 --iters 20 >> $OUT/attn_$bin.log 2>&1
done
for bin in flashgpt_base flashgpt; do echo "== $bin"; grep -E "^flash" $OUT/attn_$bin.log; done
