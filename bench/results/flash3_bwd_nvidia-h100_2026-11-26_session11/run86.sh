#!/bin/bash
# Device run 86 (1 GPU), session 11: flash's (FA2-schedule) backward kernel with its doubled
# cp_async_wait<0>() made one: every GPU test, and flash's backward speed against run 85's
# numbers (same kind of GPU) as a sanity check.
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
t() { echo "[$(( $(date +%s) - START )) s] $*"; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p build; cp $B/flashgpt $B/test_gpu build/
S=()
timeout 240 build/test_gpu > $OUT/test_gpu.log 2>&1
S+=("$(t "test_gpu rc=$?: $(grep -E '^\[==========\] [0-9]+ tests|^\[  PASSED|^\[  FAILED  \] [0-9]|^\[  SKIPPED \] [0-9]' $OUT/test_gpu.log | tr '\n' ' ')")")
grep -E "^\[  FAILED  \] [A-Z]" $OUT/test_gpu.log | head
timeout 60 build/flashgpt bench-attention --backends flash,flash3 --hs 64,128 --seq-lens 4096,16384 --iters 10 --warmup 3 > $OUT/bench.log 2>&1
grep -E "^flash" $OUT/bench.log
echo "== summary =="; printf '%s\n' "${S[@]}"
