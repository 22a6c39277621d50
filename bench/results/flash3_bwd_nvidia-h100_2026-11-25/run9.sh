#!/bin/bash
# Device run 9 (one GPU): flash3's warp-specialised backward (flash3_bwd.cu): its tests, memcheck,
# and the same-run benchmark against flash and PyTorch SDPA (FA2, cuDNN).
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee $OUT/gpu.txt
S=()
timeout 240 $B/test_gpu --gtest_filter='*flash3*:Flash3*:Hopper*:RingAttention*:*Determin*:FlashShapes*' > $OUT/test_flash3.log 2>&1
S+=("tests rc=$?: $(tail -n 1 $OUT/test_flash3.log)")
grep -E "^\[  FAILED" $OUT/test_flash3.log | head -20
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 $B/test_gpu \
  --gtest_filter='*flash3_B3_T17_*:*flash_B3_T17_*:Flash3*' > $OUT/memcheck.log 2>&1
S+=("memcheck rc=$?: $(grep -E 'ERROR SUMMARY' $OUT/memcheck.log | tail -n 1), $(grep -cE '^\[       OK' $OUT/memcheck.log) ok")
timeout 150 $B/flashgpt bench-attention --backends flash,flash3 --hs 64,128 --seq-lens 4096,16384,65536 \
  --causal 1 --warmup 3 --iters 10 > $OUT/bench.log 2>&1
S+=("bench rc=$?")
timeout 120 $B/flashgpt bench-attention --backends flash,flash3 --hs 64,128 --seq-lens 4096,16384 \
  --causal 1 --warmup 3 --iters 10 --deterministic > $OUT/bench_det.log 2>&1
S+=("bench det rc=$?")
timeout 240 python3 scripts/bench_attention.py --binary $B/flashgpt --backends flash,flash3 \
  --torch-backends flash,cudnn --hs 64,128 --seq-lens 4096,16384,65536 --iters 10 --warmup 3 \
  --budget-ms 1500 --out-dir $OUT > $OUT/bench_torch.log 2>&1
S+=("bench torch rc=$?")
echo "== summary ($(( $(date +%s) - START )) s) =="; printf '%s\n' "${S[@]}"
grep -E "^(flash|backend)" $OUT/bench.log | cut -c1-120
grep -E "^(flash|backend)" $OUT/bench_det.log | cut -c1-120
grep -A20 "^TFLOP/s (0" $OUT/bench_torch.log | cut -c1-160
