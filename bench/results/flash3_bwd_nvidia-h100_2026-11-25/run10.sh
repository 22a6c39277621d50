#!/bin/bash
# Device run 10 (one GPU): flash3 backward, dQ issued before dK (default) vs after; determinism
# cost; Nsight Compute on one backward launch (HS 128, T 16K).
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
S=()
timeout 200 $B/test_gpu --gtest_filter='*flash3*:Flash3*:RingAttention*:*Determin*:FlashShapes*' > $OUT/test.log 2>&1
S+=("tests rc=$?: $(tail -n 1 $OUT/test.log)")
grep -E "^\[  FAILED" $OUT/test.log | head -20
A="--hs 64,128 --seq-lens 4096,16384,65536 --causal 1 --warmup 3 --iters 20"
for v in dqfirst dkfirst; do
  FLASHGPT_FLASH3_BWD=$v timeout 100 $B/flashgpt bench-attention --backends flash3 $A > $OUT/bench_$v.log 2>&1
  S+=("bench $v rc=$?")
done
timeout 100 $B/flashgpt bench-attention --backends flash3 $A --deterministic > $OUT/bench_det.log 2>&1
S+=("bench det rc=$?")
timeout 100 $B/flashgpt bench-attention --backends flash3 $A > $OUT/bench_dqfirst2.log 2>&1
S+=("bench dqfirst again rc=$?")
timeout 150 ncu --kernel-name regex:flash3_bwd_kernel --launch-count 1 --section SpeedOfLight \
  --section WarpStateStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
  --section SchedulerStats $B/flashgpt bench-attention --backends flash3 --hs 128 --seq-lens 16384 \
  --causal 1 --warmup 0 --iters 1 > $OUT/ncu_hs128.log 2>&1
S+=("ncu rc=$?")
echo "== summary ($(( $(date +%s) - START )) s) =="; printf '%s\n' "${S[@]}"
for f in dqfirst dkfirst det dqfirst2; do echo "-- $f"; grep -E "^flash3" $OUT/bench_$f.log | cut -c1-110; done
grep -E "Throughput|Pipe|Stall|Issued|Eligible|Bandwidth|Busy|Duration|Shared" $OUT/ncu_hs128.log | head -60
