#!/bin/bash
# Device run 40 (2 x H100), session 7: cp 2 with flash3 (its own forward and backward on every
# ring pair) against one GPU with flash3, same call: 1M, 512K, 256K; the NCCL ring tests first;
# SM clocks every 250 ms throughout. ~9 min.
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
t() { echo "[$(( $(date +%s) - START )) s] $*"; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p build; cp $B/flashgpt build/
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=timestamp,index,clocks.sm,power.draw,temperature.gpu,utilization.gpu \
  --format=csv,noheader -lms 250 > $OUT/clocks.csv &
SMI=$!
timeout 120 $B/test_gpu --gtest_filter='*RingAttentionGpu.Nccl*' > $OUT/ring_nccl.log 2>&1
t "NCCL ring tests rc=$?: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $OUT/ring_nccl.log | tr '\n' ' ')"
grep -E "^\[  FAILED" $OUT/ring_nccl.log | head
ATTN=flash3 TS=1048576 CP1_MAX_T=1048576 WARMUP=0 STEPS=1 RUN_TIMEOUT=230 OUT=$OUT/cp_1m \
  timeout 420 scripts/bench_cp.sh > $OUT/cp_1m.log 2>&1
t "1M rc=$?"
ATTN=flash3 TS=524288 CP1_MAX_T=524288 WARMUP=0 STEPS=1 RUN_TIMEOUT=100 OUT=$OUT/cp_512k \
  timeout 170 scripts/bench_cp.sh > $OUT/cp_512k.log 2>&1
t "512K rc=$?"
ATTN=flash3 TS=262144 CP1_MAX_T=262144 WARMUP=1 STEPS=1 RUN_TIMEOUT=60 OUT=$OUT/cp_256k \
  timeout 100 scripts/bench_cp.sh > $OUT/cp_256k.log 2>&1
t "256K rc=$?"
kill $SMI
grep -h -E "^bench:|^ring:" $OUT/cp_*/*.log | cut -c1-260
grep -h -E "^\| [0-9]" $OUT/cp_*.log | cut -c1-200
rm -f $OUT/cp_*/*.png
