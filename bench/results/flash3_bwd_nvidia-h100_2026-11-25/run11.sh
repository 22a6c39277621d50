#!/bin/bash
# Device run 11 (one GPU): flash3 backward variants (split dQ partials per warpgroup = default,
# dqfirst, dkfirst): tests of the default, then the same-binary A/B, interleaved.
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
S=()
timeout 200 $B/test_gpu --gtest_filter='*flash3*:Flash3*:RingAttention*:*Determin*' > $OUT/test.log 2>&1
S+=("tests rc=$?: $(tail -n 1 $OUT/test.log)")
grep -E "^\[  FAILED" $OUT/test.log | head -20
A="--hs 64,128 --seq-lens 4096,16384,65536 --causal 1 --warmup 3 --iters 20"
for round in 1 2; do
  for v in split dqfirst dkfirst; do
    FLASHGPT_FLASH3_BWD=$v timeout 100 $B/flashgpt bench-attention --backends flash3 $A > $OUT/bench_${v}_$round.log 2>&1
    S+=("bench $v $round rc=$?")
  done
done
timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 $B/test_gpu \
  --gtest_filter='*flash3_B3_T17_*:*flash3_B1_T1000*' > $OUT/memcheck.log 2>&1
S+=("memcheck rc=$?: $(grep -E 'ERROR SUMMARY' $OUT/memcheck.log | tail -n 1), $(grep -cE '^\[       OK' $OUT/memcheck.log) ok")
echo "== summary ($(( $(date +%s) - START )) s) =="; printf '%s\n' "${S[@]}"
for v in split dqfirst dkfirst; do for r in 1 2; do echo "-- $v $r"; grep -E "^flash3" $OUT/bench_${v}_$r.log | cut -c1-110; done; done
