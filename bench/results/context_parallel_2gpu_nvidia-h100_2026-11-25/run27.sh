#!/bin/bash
# Device run 27 (2 GPUs; planned for the next session): issue 12's 1M efficiency like for like:
# bench_cp.sh at T = 1M, cp 2 then one GPU (GPU 0), one --bench step each, no warm-up; then
# 256K on one GPU on GPU 1 (is one card slower? the cp 2 wait grew as T^2.3 from 256K to 512K,
# which a slower peer would explain); SM clocks, power and temperature every 5 s. ~7.5 min.
# Carry .carry with bin/flashgpt built from main.
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p build; cp $B/flashgpt build/flashgpt
export NCCL_NVLS_ENABLE=0
( while sleep 5; do nvidia-smi --query-gpu=timestamp,index,clocks.sm,power.draw,temperature.gpu,utilization.gpu \
    --format=csv,noheader >> $OUT/clocks.csv; done ) &
SMI=$!
TS=1048576 CP1_MAX_T=1048576 WARMUP=0 STEPS=1 RUN_TIMEOUT=280 OUT=$OUT/bench_cp timeout 480 \
  scripts/bench_cp.sh > $OUT/bench_cp.log 2>&1
echo "bench_cp 1M rc=$? ($(( $(date +%s) - START )) s)"
CUDA_VISIBLE_DEVICES=1 timeout 80 build/flashgpt train --bench --model d12 --pos rope --batch 1 \
  --attn flash --seq-len 262144 --recompute layer-but-attn --bench-warmup 1 --bench-steps 2 > $OUT/cp1_256k_gpu1.log 2>&1
echo "256K on GPU 1 rc=$? ($(( $(date +%s) - START )) s): $(grep -E '^ *bench' $OUT/cp1_256k_gpu1.log | cut -c1-200)"
kill $SMI
grep -E "^ +bench:|does not fit|failed|timeout|^\||^==" $OUT/bench_cp.log | cut -c1-260
echo "== clocks (per GPU: min/median SM MHz, max W, max C) =="
python3 - $OUT/clocks.csv <<'PY'
import sys, statistics
rows = [l.split(", ") for l in open(sys.argv[1]) if l.strip()]
for g in sorted({r[1] for r in rows}):
    r = [x for x in rows if x[1] == g and int(x[5].split()[0]) > 50]  # busy samples
    if not r: continue
    mhz = [int(x[2].split()[0]) for x in r]; w = [float(x[3].split()[0]) for x in r]; c = [int(x[4]) for x in r]
    print(f"GPU {g}: {len(r)} busy samples, SM {min(mhz)}/{statistics.median(mhz)} MHz, {max(w):.0f} W, {max(c)} C")
PY
