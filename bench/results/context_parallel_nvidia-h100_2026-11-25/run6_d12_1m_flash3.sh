#!/bin/bash
# Device run 6 (one GPU): d12 at T = 1,048,576 for real, flash3 (the sm_90 default),
# --recompute layer-but-attn, 2 steps and the final validation batch; line-buffered log.
cd "$(dirname "$0")/.."
B=.carry/bin
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee $OUT/gpu.txt
stdbuf -oL -eL timeout 570 $B/flashgpt train --data .carry/data/long --model d12 --pos rope --seq-len 1048576 \
  --batch 1 --total-batch 1048576 --attn flash3 --recompute layer-but-attn --steps 2 --warmup 1 \
  --lr 6e-4 --eval-every 0 --eval-steps 1 --sample-every 0 --log $OUT/train_1m_flash3.jsonl > $OUT/train_1m_flash3.log 2>&1
echo "train rc=$?"
tail -12 $OUT/train_1m_flash3.log
