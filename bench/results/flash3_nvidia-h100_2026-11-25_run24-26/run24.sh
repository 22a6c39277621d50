#!/bin/bash
# Device run 24 (1 GPU), tree = branch multigpu-fixes-unverified (a26a597): the two tests that
# failed in run 22 only because they shared GPU 1 with test_multigpu (a timer and device-wide
# memory), alone; then issue 11's re-measurement (gpu_check.sh flash3's first steps): flash3 and
# flash against SDPA FA2 and cuDNN, the cost of --deterministic, d12 at 128K.
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p build; cp $B/flashgpt build/flashgpt; cp $B/test_gpu build/test_gpu
S=()
timeout 120 build/test_gpu --gtest_filter='Kernels.CudaEventTimer:CudaModel.MemoryPlanMatchesMeasured' > $OUT/retest.log 2>&1
S+=("retest rc=$?: $(tail -n 1 $OUT/retest.log) ($(( $(date +%s) - START )) s)")
timeout 300 python3 scripts/bench_attention.py --binary build/flashgpt --backends flash,flash3 \
  --torch-backends flash,cudnn --hs 64,128 --seq-lens 4096,16384,65536 --causal 1 --iters 10 --warmup 3 \
  --budget-ms 1500 --out-dir $OUT --csv $OUT/flash3_attention.csv > $OUT/flash3_attention.log 2>&1
S+=("bench_attention.py rc=$? ($(( $(date +%s) - START )) s)")
for det in "" --deterministic; do
  timeout 90 build/flashgpt bench-attention --backends flash,flash3 --hs 64,128 \
    --seq-lens 4096,16384,65536 --iters 10 --warmup 3 --budget-ms 1500 $det \
    > $OUT/flash3_bench${det:+_det}.log 2>&1
  S+=("bench-attention $det rc=$? ($(( $(date +%s) - START )) s)")
done
for attn in flash3 flash; do
  timeout 60 build/flashgpt train --bench --model d12 --vocab-size 50257 --pos rope --seq-len 131072 \
    --batch 1 --attn $attn --recompute layer-but-attn --bench-steps 2 > $OUT/128k_$attn.log 2>&1
  S+=("128K $attn rc=$?: $(grep -E '^ *bench' $OUT/128k_$attn.log | cut -c1-200)")
done
grep -E "^\[ +(OK|FAILED) " $OUT/retest.log
echo "== bench_attention.py =="; tail -n 30 $OUT/flash3_attention.log | cut -c1-200
echo "== det =="; for f in $OUT/flash3_bench.log $OUT/flash3_bench_det.log; do grep -E "flash3|flash " $f | cut -c1-160 | tail -n 12; done
echo "== summary ($(( $(date +%s) - START )) s) =="; printf '%s\n' "${S[@]}"
