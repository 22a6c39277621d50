#!/bin/bash
# Device run 43 (2 x H100), session 7, the final tree: the NCCL ring tests, then the 1M cp pair
# with flash3 again (run 40 ran the tree before the one-map change; a second machine also shows
# the spread). ~6 min.
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
t() { echo "[$(( $(date +%s) - START )) s] $*"; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p build; cp $B/flashgpt build/
export NCCL_NVLS_ENABLE=0
timeout 60 $B/test_gpu --gtest_filter='*RingAttentionGpu.Nccl*' > $OUT/ring_nccl.log 2>&1
t "NCCL ring tests rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' $OUT/ring_nccl.log | tr '\n' ' ')"
ATTN=flash3 TS=1048576 CP1_MAX_T=1048576 WARMUP=0 STEPS=1 RUN_TIMEOUT=200 OUT=$OUT/cp_1m \
  timeout 330 scripts/bench_cp.sh > $OUT/cp_1m.log 2>&1
t "1M rc=$?"
grep -h -E "^bench:|^ring:" $OUT/cp_1m/*.log | cut -c1-260
grep -h -E "^\| [0-9]" $OUT/cp_1m.log
rm -f $OUT/cp_1m/*.png $OUT/cp_1m/table.md
