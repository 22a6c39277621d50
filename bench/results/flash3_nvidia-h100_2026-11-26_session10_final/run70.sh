#!/bin/bash
# Device run 70 (2 GPUs), session 10's tree: every GPU test (the NCCL ring cases need 2 GPUs),
# the multi-GPU context-parallel checks, and memcheck on flash3's ragged shapes.
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
t() { echo "[$(( $(date +%s) - START )) s] $*"; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p build; cp $B/flashgpt $B/test_gpu build/
export NCCL_NVLS_ENABLE=0
S=()
timeout 300 build/test_gpu > $OUT/test_gpu.log 2>&1
S+=("$(t "test_gpu rc=$?: $(grep -E '^\[==========\] [0-9]+ tests|^\[  PASSED|^\[  FAILED  \] [0-9]|^\[  SKIPPED \] [0-9]' $OUT/test_gpu.log | tr '\n' ' ')")")
grep -E "^\[  FAILED  \] [A-Z]" $OUT/test_gpu.log | head
SECTIONS=cp OUT=$OUT/multigpu_cp DATA=.carry/data/fortunes timeout 170 scripts/test_multigpu.sh > $OUT/multigpu_cp.log 2>&1
S+=("$(t "test_multigpu cp rc=$?")")
rm -rf $OUT/multigpu_cp
CUDA_VISIBLE_DEVICES=0 timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 build/test_gpu \
  --gtest_filter='*flash3_B3_T17_*:*flash3_B1_T1000_NH6*:*flash3*T4097*:Flash3.*' > $OUT/memcheck.log 2>&1
S+=("$(t "memcheck rc=$?: $(grep -E 'ERROR SUMMARY' $OUT/memcheck.log | tail -n 1), $(grep -cE '^\[       OK' $OUT/memcheck.log) ok")")
echo "== cp =="; grep -E "PASS|FAIL|SKIP|failure" $OUT/multigpu_cp.log | cut -c1-200
echo "== summary =="; printf '%s\n' "${S[@]}"
