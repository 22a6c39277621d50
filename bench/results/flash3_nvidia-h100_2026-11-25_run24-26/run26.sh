#!/bin/bash
# Device run 26 (1 GPU), tree = a26a597: one whole d12 training step at T = 1M on one GPU,
# flash3 then flash (train --bench, no warm-up, 1 timed step; vocabulary 4096 as the real 1M
# run): is flash3 the faster at 1M in the whole model (auto stops at 512K on an old measurement)?
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
for attn in flash3 flash; do
  timeout 272 $B/flashgpt train --bench --model d12 --vocab-size 4096 --pos rope --seq-len 1048576 \
    --batch 1 --attn $attn --recompute layer-but-attn --bench-warmup 0 --bench-steps 1 > $OUT/1m_$attn.log 2>&1
  echo "1M $attn rc=$? ($(( $(date +%s) - START )) s): $(grep -E '^ *bench' $OUT/1m_$attn.log | cut -c1-220)"
done
