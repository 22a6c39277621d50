#!/bin/bash
# Device run 42 (1 x H100), session 7, the final tree: flash3's plain forward with one tensor
# map again (the ring pairs from another rank keep three), old binary (d0cd779) against the new
# one interleaved three times; then every single-process GPU test. ~5 min.
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
t() { echo "[$(( $(date +%s) - START )) s] $*"; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
for rep in 1 2 3; do for bin in flashgpt_old flashgpt; do
  timeout 60 $B/$bin bench-attention --backends flash3 --hs 64,128 --seq-lens 4096,16384 \
    --iters 20 --budget-ms 1000 > $OUT/plain_${bin}_$rep.log 2>&1
done; done
t "plain done"
timeout 330 $B/test_gpu > $OUT/test_gpu.log 2>&1
t "test_gpu rc=$?"
grep -E "^\[  PASSED|^\[  FAILED|^\[  SKIPPED \] [0-9]|tests ran" $OUT/test_gpu.log
grep -E "^\[  FAILED  \] [A-Z]" $OUT/test_gpu.log | head
for rep in 1 2 3; do for bin in flashgpt_old flashgpt; do echo "== $bin $rep"; grep -E "^flash3 " $OUT/plain_${bin}_$rep.log | cut -c1-100; done; done
