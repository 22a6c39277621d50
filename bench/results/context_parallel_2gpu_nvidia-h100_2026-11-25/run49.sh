#!/bin/bash
# Device run 49 (2 x H100), session 8, the final tree: the forwards' ring epilogues share
# flash_common.cuh's ring_merge_weights / ring_merge_o2, and flash and flash3 build the
# whole-sequence forward problem in one place (739b32d cherry-picked). Every single-process GPU
# test (the NCCL ring cases on 2 GPUs included), then SECTIONS=cp scripts/test_multigpu.sh (the
# multi-process cp checks, last run in run 32, before flash3's own pair forward). ~6 min.
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
t() { echo "[$(( $(date +%s) - START )) s] $*"; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p build; cp $B/flashgpt $B/test_gpu build/
export NCCL_NVLS_ENABLE=0
timeout 330 build/test_gpu > $OUT/test_gpu.log 2>&1
t "test_gpu rc=$?"
grep -E "^\[  PASSED|^\[  FAILED|^\[  SKIPPED \] [0-9]|tests ran" $OUT/test_gpu.log
grep -E "^\[  FAILED  \] [A-Z]" $OUT/test_gpu.log | head
SECTIONS=cp OUT=$OUT/multigpu_cp DATA=.carry/data/fortunes timeout 240 scripts/test_multigpu.sh > $OUT/multigpu_cp.log 2>&1
t "test_multigpu cp rc=$?"; grep -E "PASS|FAIL|SKIP|failure" $OUT/multigpu_cp.log | cut -c1-220
rm -rf $OUT/multigpu_cp
