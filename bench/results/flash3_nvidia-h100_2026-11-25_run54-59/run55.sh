#!/bin/bash
# Device run 55 (1 GPU), session 9, final tree: --deterministic keeps one group of all pairs
# (run 54: the pair groups cost the fixed dQ order up to 32%). flash3's and the determinism
# tests; bench-attention plain and --deterministic (one call); d12 B 32 x T 1024 against PyTorch.
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p build; cp $B/flashgpt build/flashgpt; cp $B/test_gpu build/test_gpu
S=()
timeout 120 build/test_gpu --gtest_filter='*Determin*:*flash3*:*Flash3*' > $OUT/test.log 2>&1
S+=("tests rc=$? ($(( $(date +%s) - START )) s): $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' $OUT/test.log | tr '\n' ' ')")
for det in "" --deterministic; do
  timeout 60 build/flashgpt bench-attention --backends flash3 --hs 64,128 \
    --seq-lens 4096,16384,65536 --iters 10 --warmup 3 --budget-ms 1500 $det \
    > $OUT/flash3_bench${det:+_det}.log 2>&1
  S+=("bench-attention $det rc=$? ($(( $(date +%s) - START )) s)")
done
timeout 420 python3 scripts/bench_train.py --ours flash3,flash --torch compile-cudnn,cudnn --out $OUT > $OUT/bench_train.log 2>&1
S+=("bench_train rc=$? ($(( $(date +%s) - START )) s)")
echo "== det =="; for f in $OUT/flash3_bench.log $OUT/flash3_bench_det.log; do grep -E "^flash3" $f | awk '{print $2, $6, $13}' | tr '\n' ';'; echo; done
tail -n 8 $OUT/bench_train.log | cut -c1-200
echo "== summary ($(( $(date +%s) - START )) s) =="; printf '%s\n' "${S[@]}"
