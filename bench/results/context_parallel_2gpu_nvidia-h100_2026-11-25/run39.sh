#!/bin/bash
# Device run 39 (1 x H100), session 7: flash3's own TMA forward on the ring's pairs.
# 1. tests: ring (virtual ranks, flash and flash3), every flash3/Hopper test, the cp model;
# 2. the plain forward, old binary (HEAD d0cd779) against the new one, same call;
# 3. the ring on one GPU (2 virtual ranks) against plain attention, flash and flash3, 256K.
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
t() { echo "[$(( $(date +%s) - START )) s] $*"; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
timeout 300 $B/test_gpu --gtest_filter='*RingAttention*:*flash3*:*Flash3*:Hopper*:CudaModelCp*' > $OUT/tests.log 2>&1
t "tests rc=$?"
grep -E "^\[  PASSED|^\[  FAILED|^\[  SKIPPED|tests ran|FAILED TEST" $OUT/tests.log | sort | uniq -c | head -30
for bin in flashgpt_old flashgpt; do
  timeout 120 $B/$bin bench-attention --backends flash3 --hs 64,128 --seq-lens 4096,16384,65536 \
    --iters 10 --budget-ms 1000 > $OUT/plain_$bin.log 2>&1
  t "plain $bin rc=$?"
done
timeout 200 $B/flashgpt bench-attention --backends flash,flash3 --hs 64,128 --seq-lens 262144 \
  --tokens 262144 --cp 2 --iters 3 --budget-ms 1000 > $OUT/ring_cp2.log 2>&1
t "ring rc=$?"
echo "== plain old / new"; grep -E "^flash3 " $OUT/plain_flashgpt_old.log | cut -c1-120; echo; grep -E "^flash3 " $OUT/plain_flashgpt.log | cut -c1-120
echo "== ring"; grep -E "^flash" $OUT/ring_cp2.log | cut -c1-200
