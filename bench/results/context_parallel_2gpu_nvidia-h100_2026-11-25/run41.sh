#!/bin/bash
# Device run 41 (2 x H100), session 7, the final tree: every single-process GPU test (the NCCL
# ring cases included); the 128K cp pair with flash3; the plain flash3 forward, old binary
# (d0cd779) against the new one, interleaved twice. ~7 min.
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
t() { echo "[$(( $(date +%s) - START )) s] $*"; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p build; cp $B/flashgpt build/
export NCCL_NVLS_ENABLE=0
timeout 330 $B/test_gpu > $OUT/test_gpu.log 2>&1
t "test_gpu rc=$?"
grep -E "^\[  PASSED|^\[  FAILED|^\[  SKIPPED \] [0-9]|tests ran" $OUT/test_gpu.log
grep -E "^\[  FAILED  \] [A-Z]" $OUT/test_gpu.log | head
ATTN=flash3 TS=131072 CP1_MAX_T=131072 WARMUP=1 STEPS=2 RUN_TIMEOUT=60 OUT=$OUT/cp_128k \
  timeout 110 scripts/bench_cp.sh > $OUT/cp_128k.log 2>&1
t "128K rc=$?"
for rep in 1 2; do for bin in flashgpt_old flashgpt; do
  timeout 60 $B/$bin bench-attention --backends flash3 --hs 64,128 --seq-lens 4096,16384 \
    --iters 20 --budget-ms 1000 > $OUT/plain_${bin}_$rep.log 2>&1
done; done
t "plain done"
grep -h -E "^bench:|^ring:" $OUT/cp_128k/*.log | cut -c1-260
grep -h -E "^\| [0-9]" $OUT/cp_128k.log
for rep in 1 2; do for bin in flashgpt_old flashgpt; do echo "== $bin $rep"; grep -E "^flash3 " $OUT/plain_${bin}_$rep.log | cut -c1-100; done; done
rm -f $OUT/cp_128k/*.png
