#!/bin/bash
# Device run 45 (1 GPU), session 8: flash3 backward variants dqlag / dqlagturns (no per-step
# meeting of the math warpgroups; dQ of step it-1 issued in step it) against dqfirst (default):
# tests of each variant, memcheck of the lag ones, then interleaved same-binary benches at HS 128,
# and ncu durations of the backward's three kernels at HS 128 4K.
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
t() { echo "[$(( $(date +%s) - START )) s] $*"; }
S=()
for v in dqlag dqlagturns dqfirst; do
  FLASHGPT_FLASH3_BWD=$v timeout 200 $B/test_gpu --gtest_filter='*flash3*:*Flash3*' > $OUT/test_$v.log 2>&1
  S+=("$(t "tests $v rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' $OUT/test_$v.log | tr '\n' ' ')")")
  grep -E "^\[  FAILED" $OUT/test_$v.log | head -5
done
for v in dqlag dqlagturns; do
  FLASHGPT_FLASH3_BWD=$v timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 $B/test_gpu \
    --gtest_filter='*flash3_B3_T17_*:*flash3_B1_T1000_NH6*' > $OUT/memcheck_$v.log 2>&1
  S+=("$(t "memcheck $v rc=$?: $(grep -E 'ERROR SUMMARY' $OUT/memcheck_$v.log | tail -n 1), $(grep -cE '^\[       OK' $OUT/memcheck_$v.log) ok")")
done
A="--hs 128 --seq-lens 4096,16384,65536 --causal 1 --warmup 3 --iters 20"
for round in 1 2; do
  for v in dqfirst dqlag dqlagturns; do
    FLASHGPT_FLASH3_BWD=$v timeout 100 $B/flashgpt bench-attention --backends flash3 $A > $OUT/bench_${v}_$round.log 2>&1
    S+=("$(t "bench $v $round rc=$?")")
  done
done
for v in dqfirst dqlag; do
  FLASHGPT_FLASH3_BWD=$v timeout 100 ncu --metrics gpu__time_duration.sum -k 'regex:flash_bwd_dot|flash_bwd_dq|flash3_bwd' \
    --launch-skip 3 --launch-count 6 $B/flashgpt bench-attention --backends flash3 --hs 128 --seq-lens 4096 --causal 1 --warmup 1 --iters 2 > $OUT/ncu_$v.log 2>&1
  S+=("$(t "ncu $v rc=$?")")
done
echo "== summary =="; printf '%s\n' "${S[@]}"
for v in dqfirst dqlag dqlagturns; do for r in 1 2; do echo "-- $v $r"; grep -E "^flash3" $OUT/bench_${v}_$r.log | cut -c1-110; done; done
for v in dqfirst dqlag; do echo "-- ncu $v"; grep -E "flash|gpu__time_duration" $OUT/ncu_$v.log | sed 's/  */ /g' | cut -c1-120 | head -12; done
