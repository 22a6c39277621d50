#!/bin/bash
# Device run 28 (2 GPUs): where cp 2's step goes at 512K and 1M (the 1M efficiency is 82.4% like
# for like, run 27; 88.0% at 512K): per-rank, per-ring-step attention times and waits (the new
# "ring:" lines of train --bench --cp), the ring tests after the timing change, and the ring's
# compute overhead without the wire (bench-attention --cp 2, 4 heads) at 512K and 1M. ~6 min.
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p build; cp $B/flashgpt $B/test_gpu build/
export NCCL_NVLS_ENABLE=0
t() { echo "[$(( $(date +%s) - START )) s] $*"; }
timeout 150 build/test_gpu --gtest_filter='RingAttention*' > $OUT/test_ring.log 2>&1
t "ring tests rc=$?: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $OUT/test_ring.log | tr '\n' ' ')"
TS=524288 CP1_MAX_T=0 WARMUP=1 STEPS=1 RUN_TIMEOUT=150 OUT=$OUT/cp512k timeout 170 scripts/bench_cp.sh > $OUT/cp512k.log 2>&1
t "cp2 512K rc=$?"
TS=1048576 CP1_MAX_T=0 WARMUP=0 STEPS=1 RUN_TIMEOUT=200 OUT=$OUT/cp1m timeout 220 scripts/bench_cp.sh > $OUT/cp1m.log 2>&1
t "cp2 1M rc=$?"
CUDA_VISIBLE_DEVICES=0 timeout 150 build/flashgpt bench-attention --backends flash --hs 64 --heads 4 \
  --seq-lens 524288,1048576 --tokens 1 --warmup 1 --iters 1 --cp 2 --csv $OUT/ring_virtual.csv > $OUT/ring_virtual.log 2>&1
t "bench-attention --cp 2 rc=$?"
echo "== ring lines =="
grep -h -E "^bench:|^ring:" $OUT/cp512k/*.log $OUT/cp1m/*.log | cut -c1-300
echo "== virtual ring (4 heads) =="
cat $OUT/ring_virtual.log | tail -15 | cut -c1-250
