#!/bin/bash
# Device run 18 (2 GPUs): the backward-helpers branch's bf16 GPU tests (all, with the NCCL ring
# cases on 2 GPUs); the binaries that pass (branch, else main) go to build/; then issue 12's
# 2-GPU checks (scripts/test_multigpu.sh SECTIONS=cp) and bench_cp.sh at T = 128K.
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee $OUT/gpu.txt
nvidia-smi topo -m > $OUT/topo.txt 2>&1
S=()
mkdir -p build runs/data
ln -sfn ../../.carry/data/fortunes runs/data/fortunes
export NCCL_NVLS_ENABLE=0
timeout 300 $B/test_gpu_branch > $OUT/test_gpu_branch.log 2>&1; rc=$?
S+=("branch tests rc=$rc: $(tail -n 1 $OUT/test_gpu_branch.log) ($(( $(date +%s) - START )) s)")
if [ $rc -eq 0 ] && ! grep -q '^\[  FAILED' $OUT/test_gpu_branch.log; then
  cp $B/flashgpt_branch build/flashgpt; S+=("using: branch binaries")
else
  grep -E "^\[  FAILED" $OUT/test_gpu_branch.log | head
  cp $B/flashgpt build/flashgpt; S+=("using: main binaries")
  timeout 60 $B/test_gpu --gtest_filter='RingShapes/RingAttentionGpu.Nccl/*' > $OUT/test_gpu_main_nccl.log 2>&1
  S+=("main NCCL ring tests rc=$?: $(tail -n 1 $OUT/test_gpu_main_nccl.log)")
fi
grep -E "RingAttentionGpu.Nccl.*(OK|FAILED)" $OUT/test_gpu_*.log | head -20 > $OUT/nccl_ring_cases.txt
SECTIONS=cp OUT="$OUT/multigpu_cp" DATA=runs/data/fortunes timeout 200 scripts/test_multigpu.sh > $OUT/multigpu_cp.log 2>&1
S+=("test_multigpu cp rc=$?: $(tail -n 1 $OUT/multigpu_cp.log) ($(( $(date +%s) - START )) s)")
TS=131072 OUT="$OUT/bench_cp" RUN_TIMEOUT=120 timeout $(( 585 - ($(date +%s) - START) )) scripts/bench_cp.sh > $OUT/bench_cp.log 2>&1
S+=("bench_cp 128K rc=$? ($(( $(date +%s) - START )) s)")
echo "== multigpu cp =="; grep -E "^(PASS|FAIL|SKIP)" $OUT/multigpu_cp.log
echo "== bench =="; grep -E "^ +bench:|does not fit|failed|timeout" $OUT/bench_cp.log | cut -c1-260
echo "== summary ($(( $(date +%s) - START )) s) =="; printf '%s\n' "${S[@]}"
