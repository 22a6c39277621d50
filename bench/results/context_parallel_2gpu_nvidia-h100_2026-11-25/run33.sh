#!/bin/bash
# Device run 33 (2 GPUs), after run 32 passed: the 1M pair like for like on branch
# cp-direct-dkv-unverified (run 27 on main 7372c90: 82.4%, cp 2 116.5 s, one GPU 191.9 s).
# ~6 min. SM clocks every 5 s.
cd "$(dirname "$0")/.."
B=.carry/bin
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p build; cp $B/flashgpt build/
export NCCL_NVLS_ENABLE=0
( while sleep 5; do nvidia-smi --query-gpu=timestamp,index,clocks.sm,power.draw,temperature.gpu,utilization.gpu \
    --format=csv,noheader >> $OUT/clocks.csv; done ) &
SMI=$!
TS=1048576 CP1_MAX_T=1048576 WARMUP=0 STEPS=1 RUN_TIMEOUT=280 OUT=$OUT/bench_cp timeout 560 \
  scripts/bench_cp.sh > $OUT/bench_cp.log 2>&1
echo "bench_cp 1M rc=$?"
kill $SMI
grep -h -E "^bench:|^ring:" $OUT/bench_cp/*.log | cut -c1-300
grep -E "^\||does not fit|failed|timeout" $OUT/bench_cp.log | cut -c1-260
rm -f $OUT/bench_cp/*.png
