#!/bin/bash
# Device run 85 (1 GPU), session 11's final tree (kernels as session 10's; comments, docs and
# records since): every GPU test, memcheck on flash3's ragged shapes, and a fifth round of
# flash3 against cuDNN (bench_attention.py, as run 68).
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
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 build/test_gpu \
  --gtest_filter='*flash3_B3_T17_*:*flash3_B1_T1000_NH6*:*flash3*T4097*:Flash3.*' > $OUT/memcheck.log 2>&1
S+=("$(t "memcheck rc=$?: $(grep -E 'ERROR SUMMARY' $OUT/memcheck.log | tail -n 1), $(grep -cE '^\[       OK' $OUT/memcheck.log) ok")")
timeout 150 python3 scripts/bench_attention.py --binary build/flashgpt --backends flash,flash3 \
  --torch-backends flash,cudnn --hs 64,128 --seq-lens 4096,16384,65536 --causal 1 --iters 10 --warmup 3 \
  --budget-ms 1500 --out-dir $OUT --csv $OUT/flash3_attention_5.csv > $OUT/flash3_attention_5.log 2>&1
S+=("$(t "bench_attention.py rc=$?")")
grep -E "^ *(64|128) .*(fwd|bwd|fwdbwd) " $OUT/flash3_attention_5.log
echo "== summary =="; printf '%s\n' "${S[@]}"
