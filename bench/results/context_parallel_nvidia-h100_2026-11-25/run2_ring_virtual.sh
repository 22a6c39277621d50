#!/bin/bash
# Device run 2 (one GPU): the flash kernels in problem form against the tree before them
# (b265f0d) in one run; the ring with virtual ranks on this GPU.
cd "$(dirname "$0")/.."
B=.carry/bin
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee $OUT/gpu.txt
for bin in flashgpt_base flashgpt flashgpt_base flashgpt; do
  timeout 100 $B/$bin bench-attention --backends flash,flash3 --seq-lens 4096,16384 --warmup 3 --iters 15 >> $OUT/attn_$bin.log 2>&1
done
for bin in flashgpt_base flashgpt; do echo "== $bin"; grep -E "^flash" $OUT/attn_$bin.log; done
timeout 200 $B/flashgpt bench-attention --backends flash --cp 2 --hs 64,128 --seq-lens 16384,65536 --tokens 65536 --warmup 2 --iters 5 > $OUT/ring_cp2.log 2>&1; echo "ring rc=$?"
grep -E "^flash" $OUT/ring_cp2.log
