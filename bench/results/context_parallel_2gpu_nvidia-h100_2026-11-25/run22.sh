#!/bin/bash
# Device run 22 (2 GPUs), tree = branch multigpu-fixes-unverified (a26a597): the NCCL ring tests
# (dynamic-smem attribute per device), then SECTIONS=cp test_multigpu.sh (with the cp communicator
# aborted first on a failing rank) on both GPUs, while the single-process GPU suite (without the
# NCCL cases) runs on GPU 1 beside it.
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p build; cp $B/flashgpt build/flashgpt; cp $B/test_gpu build/test_gpu
export NCCL_NVLS_ENABLE=0
S=()
timeout 150 build/test_gpu --gtest_filter='RingShapes/RingAttentionGpu.Nccl/*' > $OUT/ring_nccl.log 2>&1
S+=("NCCL ring tests rc=$?: $(tail -n 1 $OUT/ring_nccl.log) ($(( $(date +%s) - START )) s)")
grep -E "^\[ +(OK|FAILED) " $OUT/ring_nccl.log | cut -c1-150
( CUDA_VISIBLE_DEVICES=1 timeout 420 build/test_gpu --gtest_filter='-*Nccl*' > $OUT/test_gpu.log 2>&1
  echo "test_gpu rc=$? at $(( $(date +%s) - START )) s: $(tail -n 1 $OUT/test_gpu.log)" > $OUT/test_gpu.rc ) &
TG=$!
SECTIONS=cp OUT=$OUT/multigpu_cp DATA=.carry/data/fortunes timeout 420 scripts/test_multigpu.sh > $OUT/multigpu_cp.log 2>&1
S+=("test_multigpu cp rc=$?: $(tail -n 1 $OUT/multigpu_cp.log) ($(( $(date +%s) - START )) s)")
wait $TG
S+=("$(cat $OUT/test_gpu.rc)")
cd $OUT && tar czf multigpu_cp.tgz multigpu_cp && rm -rf multigpu_cp && cd - >/dev/null
echo "== multigpu =="; grep -E "PASS|FAIL" $OUT/multigpu_cp.log | cut -c1-220
echo "== test_gpu failures =="; grep -E "^\[  FAILED|PASSED|FAILED TEST" $OUT/test_gpu.log | head -20
echo "== summary ($(( $(date +%s) - START )) s) =="; printf '%s\n' "${S[@]}"
