#!/bin/bash
# Device run 19 (2 GPUs): the NCCL ring tests with the ranks meeting before and after the ring
# (run 18: they hung at the first case); scripts/test_multigpu.sh SECTIONS=cp with CP_LR 3e-4.
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
S=()
mkdir -p build runs/data
cp $B/flashgpt build/flashgpt
ln -sfn ../../.carry/data/fortunes runs/data/fortunes
export NCCL_NVLS_ENABLE=0
F='RingShapes/RingAttentionGpu.Nccl/*'
timeout 90 $B/test_gpu --gtest_filter="$F" > $OUT/nccl_a.log 2>&1; rc=$?
S+=("NCCL ring tests rc=$rc: $(tail -n 1 $OUT/nccl_a.log) ($(( $(date +%s) - START )) s)")
if [ $rc -ne 0 ]; then
  CUDA_MODULE_LOADING=EAGER timeout 60 $B/test_gpu --gtest_filter="$F" > $OUT/nccl_eager.log 2>&1
  S+=("  EAGER rc=$?: $(tail -n 1 $OUT/nccl_eager.log)")
  NCCL_DEBUG=INFO timeout 25 $B/test_gpu --gtest_filter='RingShapes/RingAttentionGpu.Nccl/flash_cp2_B1_T256*' > $OUT/nccl_debug.log 2>&1
  S+=("  debug rc=$?")
fi
grep -E "^\[ +(OK|FAILED) " $OUT/nccl_*.log | head -24
SECTIONS=cp OUT="$OUT/mg" DATA=runs/data/fortunes timeout 380 scripts/test_multigpu.sh > $OUT/multigpu_cp.log 2>&1
S+=("test_multigpu cp rc=$?: $(tail -n 1 $OUT/multigpu_cp.log) ($(( $(date +%s) - START )) s)")
rm -rf $OUT/mg/ck_cp2; tar czf $OUT/mg.tgz -C $OUT mg && rm -rf $OUT/mg
echo "== multigpu cp =="; grep -E "^(PASS|FAIL|SKIP)|: 1:" $OUT/multigpu_cp.log | cut -c1-300
echo "== summary ($(( $(date +%s) - START )) s) =="; printf '%s\n' "${S[@]}"
