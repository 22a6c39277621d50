#!/bin/bash
# Device run 34 (2 GPUs), session 6: main 923d990 (high-priority ring comm stream, 7c253f4, never
# measured as a pair): the 512K and 1M pairs, each from one bench_cp.sh call. ~9 min.
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p build; cp $B/flashgpt build/
export NCCL_NVLS_ENABLE=0
t() { echo "[$(( $(date +%s) - START )) s] $*"; }
( while sleep 5; do nvidia-smi --query-gpu=timestamp,index,clocks.sm,power.draw,temperature.gpu,utilization.gpu \
    --format=csv,noheader >> $OUT/clocks.csv; done ) &
SMI=$!
TS=524288 WARMUP=1 STEPS=1 RUN_TIMEOUT=150 OUT=$OUT/cp512k timeout 200 scripts/bench_cp.sh > $OUT/cp512k.log 2>&1
t "bench_cp 512K rc=$?"
TS=1048576 CP1_MAX_T=1048576 WARMUP=0 STEPS=1 RUN_TIMEOUT=250 OUT=$OUT/cp1m timeout 370 scripts/bench_cp.sh > $OUT/cp1m.log 2>&1
t "bench_cp 1M rc=$?"
kill $SMI
grep -h -E "^bench:|^ring:" $OUT/cp512k/*.log $OUT/cp1m/*.log | cut -c1-300
grep -h -E "^\||does not fit|failed|timeout" $OUT/cp512k.log $OUT/cp1m.log | cut -c1-260
rm -f $OUT/cp512k/*.png $OUT/cp1m/*.png $OUT/cp512k/table.md $OUT/cp1m/table.md
