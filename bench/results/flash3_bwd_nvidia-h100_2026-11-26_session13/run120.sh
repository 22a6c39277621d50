#!/bin/bash
# Device run 120 (1 GPU), session 13's final tree (kSdpNext at HS 128, every math thread arriving on
# empty[s]): every GPU test, memcheck, racecheck, synccheck, initcheck on flash3's ragged shapes,
# --deterministic's cost at
# sustained-load clocks.
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
t() { echo "[$(( $(date +%s) - START )) s] $*"; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p build; cp $B/flashgpt $B/test_gpu build/
S=()
timeout 300 build/test_gpu > $OUT/test_gpu.log 2>&1
S+=("$(t "test_gpu rc=$?: $(grep -E '^\[==========\] [0-9]+ tests|^\[  PASSED|^\[  FAILED  \] [0-9]|^\[  SKIPPED \] [0-9]' $OUT/test_gpu.log | tr '\n' ' ')")")
grep -E "^\[  FAILED  \] [A-Z]" $OUT/test_gpu.log | head
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 build/test_gpu \
  --gtest_filter='*flash3_B3_T17_*:*flash3_B1_T1000_NH6*:*flash3*T4097*:Flash3.*' > $OUT/memcheck.log 2>&1
S+=("$(t "memcheck rc=$?: $(grep -E 'ERROR SUMMARY' $OUT/memcheck.log | tail -n 1), $(grep -cE '^\[       OK' $OUT/memcheck.log) ok")")
F='*flash3_B3_T17_*:*flash3_B1_T1000_NH6*'
for tool in racecheck synccheck initcheck; do
  timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 build/test_gpu --gtest_filter="$F" > $OUT/$tool.log 2>&1
  S+=("$(t "$tool rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/$tool.log | tail -n 1), $(grep -cE '^\[       OK' $OUT/$tool.log) ok")")
done
for det in "" --deterministic; do
  timeout 100 build/flashgpt bench-attention --backends flash,flash3 --hs 64,128 \
    --seq-lens 4096,16384,65536 --iters 10 --warmup 3 --budget-ms 1500 --warmup-ms 500 $det > $OUT/det${det:+_on}.log 2>&1
  S+=("$(t "bench-attention $det rc=$?: $(grep -E '^flash3? ' $OUT/det${det:+_on}.log | awk '{print $1":"$2"/"$6, $13}' | tr '\n' ' ')")")
done

echo "== summary =="; printf "%s\n" "${S[@]}"
