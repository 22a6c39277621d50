#!/bin/bash
# Device run 124 (1 GPU), session 13's final tree: lane 0 of each math warp arrives on empty[s]
# again, every math thread under FLASHGPT_FLASH3_RACECHECK=1. Every GPU test; racecheck with the
# switch; the tree against commit 2bbe0a8 (.carry/old), default and --deterministic, 2 rounds.
cd "$(dirname "$0")/.."
START=$(date +%s)
t() { echo "[$(( $(date +%s) - START )) s] $*"; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p build; cp .carry/bin/flashgpt .carry/bin/test_gpu build/
S=()
timeout 300 build/test_gpu > $OUT/test_gpu.log 2>&1
S+=("$(t "test_gpu rc=$?: $(grep -E '^\[==========\] [0-9]+ tests|^\[  PASSED|^\[  FAILED  \] [0-9]|^\[  SKIPPED \] [0-9]' $OUT/test_gpu.log | tr '\n' ' ')")")
grep -E "^\[  FAILED  \] [A-Z]" $OUT/test_gpu.log | head
F='*flash3_B3_T17_*:*flash3_B1_T1000_NH6*'
FLASHGPT_FLASH3_RACECHECK=1 timeout 100 compute-sanitizer --tool racecheck --error-exitcode 9 build/test_gpu --gtest_filter="$F" > $OUT/racecheck.log 2>&1
S+=("$(t "racecheck (FLASHGPT_FLASH3_RACECHECK=1) rc=$?: $(grep -E 'RACECHECK SUMMARY' $OUT/racecheck.log | tail -n 1), $(grep -cE '^\[       OK' $OUT/racecheck.log) ok")")
for r in 1 2; do
  for det in "" --deterministic; do
    for v in old bin; do
      timeout 100 .carry/$v/flashgpt bench-attention --backends flash3 --hs 64,128 --seq-lens 4096,16384,65536 \
        --iters 10 --warmup 3 --budget-ms 1500 --warmup-ms 500 $det > $OUT/${v}${det:+_det}_$r.log 2>&1
      S+=("$(t "round $r $v ${det:-default}: $(grep -E '^flash3 ' $OUT/${v}${det:+_det}_$r.log | awk '{print $2"/"$6, $13}' | tr '\n' ' ')")")
    done
  done
done
echo "== summary =="; printf '%s\n' "${S[@]}"
