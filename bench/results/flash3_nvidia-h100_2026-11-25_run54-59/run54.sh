#!/bin/bash
# Device run 54 (1 GPU), session 9, the tree with flash3's backward in pair groups (the largest
# group that fits one wave, flash3_tiles.h bwd_pair_group): every GPU test; issue 11's tables
# again: flash3 and flash against SDPA FA2 and cuDNN in one process, the cost of
# --deterministic, d12 at 128K (flash3, flash).
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p build; cp $B/flashgpt build/flashgpt; cp $B/test_gpu build/test_gpu
S=()
timeout 250 build/test_gpu > $OUT/test_gpu.log 2>&1
S+=("test_gpu rc=$? ($(( $(date +%s) - START )) s): $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]|^\[  SKIPPED \] [0-9]|tests ran' $OUT/test_gpu.log | tr '\n' ' ')")
grep -E "^\[  FAILED  \] [A-Z]" $OUT/test_gpu.log | head
timeout 240 python3 scripts/bench_attention.py --binary build/flashgpt --backends flash,flash3 \
  --torch-backends flash,cudnn --hs 64,128 --seq-lens 4096,16384,65536 --causal 1 --iters 10 --warmup 3 \
  --budget-ms 1500 --out-dir $OUT --csv $OUT/flash3_attention.csv > $OUT/flash3_attention.log 2>&1
S+=("bench_attention.py rc=$? ($(( $(date +%s) - START )) s)")
for det in "" --deterministic; do
  timeout 60 build/flashgpt bench-attention --backends flash3 --hs 64,128 \
    --seq-lens 4096,16384,65536 --iters 10 --warmup 3 --budget-ms 1500 $det \
    > $OUT/flash3_bench${det:+_det}.log 2>&1
  S+=("bench-attention $det rc=$? ($(( $(date +%s) - START )) s)")
done
for attn in flash3 flash; do
  timeout 50 build/flashgpt train --bench --model d12 --vocab-size 50257 --pos rope --seq-len 131072 \
    --batch 1 --attn $attn --recompute layer-but-attn --bench-steps 2 > $OUT/128k_$attn.log 2>&1
  S+=("128K $attn rc=$?: $(grep -E '^ *bench' $OUT/128k_$attn.log | cut -c1-200)")
done
echo "== bench_attention.py =="; tail -n 22 $OUT/flash3_attention.log | cut -c1-200
echo "== det =="; for f in $OUT/flash3_bench.log $OUT/flash3_bench_det.log; do grep -E "^flash3" $f | awk '{print $2, $6, $13}' | tr '\n' ';'; echo; done
echo "== summary ($(( $(date +%s) - START )) s) =="; printf '%s\n' "${S[@]}"
