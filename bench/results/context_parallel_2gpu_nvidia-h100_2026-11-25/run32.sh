#!/bin/bash
# Device run 32 (2 GPUs; for the session after 2026-11-25 session 5), tree = branch
# cp-direct-dkv-unverified (2bd728d): the ring backward sends dK/dV contributions straight to
# their owners (own step last). Checks first, then the 512K pair (compare run 29: cp 2 25.65 s
# a step, dK/dV waits 179 / 969 ms). ~5 min. Build the branch with GPU_ARCH=90a, copy the
# stripped binaries to .carry/bin, carry .carry.
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p build; cp $B/flashgpt $B/test_gpu build/
export NCCL_NVLS_ENABLE=0
t() { echo "[$(( $(date +%s) - START )) s] $*"; }
timeout 150 build/test_gpu --gtest_filter='*RingAttention*:*CudaModelCp*' > $OUT/tests.log 2>&1
t "ring (local + NCCL) and model cp tests rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' $OUT/tests.log | tr '\n' ' ')"
grep -E "^\[  FAILED" $OUT/tests.log | head
SECTIONS=cp OUT=$OUT/multigpu_cp DATA=.carry/data/fortunes timeout 300 scripts/test_multigpu.sh > $OUT/multigpu_cp.log 2>&1
t "test_multigpu cp rc=$?"; grep -E "PASS|FAIL" $OUT/multigpu_cp.log | cut -c1-200
rm -rf $OUT/multigpu_cp
TS=524288 WARMUP=1 STEPS=1 RUN_TIMEOUT=200 OUT=$OUT/bench_cp timeout 300 scripts/bench_cp.sh > $OUT/bench_cp.log 2>&1
t "bench_cp 512K rc=$?"
grep -h -E "^bench:|^ring:" $OUT/bench_cp/*.log | cut -c1-300
grep -E "^\|" $OUT/bench_cp.log
rm -f $OUT/bench_cp/*.png
