#!/bin/bash
# Device run 4 (one GPU): d12 at T = 1,048,576 for real (not --bench): the long corpus, RoPE,
# B 1, --recompute layer-but-attn (attention's forward once per step), 2 steps and one
# validation batch at the end.
cd "$(dirname "$0")/.."
B=.carry/bin
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee $OUT/gpu.txt
$B/flashgpt profile --plan-only --model d12 --vocab 4096 --pos rope --seq-lens 1048576 --batch 1 --recompute layer-but-attn --attn flash --out $OUT/plan > $OUT/plan_1m.txt 2>&1
grep -iE "total|GiB" $OUT/plan_1m.txt | head -8
( while sleep 20; do nvidia-smi --query-gpu=memory.used --format=csv,noheader >> $OUT/smi_mem.txt; done ) &
SMI=$!
timeout 530 $B/flashgpt train --data .carry/data/long --model d12 --pos rope --seq-len 1048576 \
  --batch 1 --total-batch 1048576 --attn flash --recompute layer-but-attn --steps 2 --warmup 1 \
  --lr 6e-4 --eval-every 0 --eval-steps 1 --sample-every 0 --log $OUT/train_1m.jsonl > $OUT/train_1m.log 2>&1
echo "train rc=$?"
kill $SMI
tail -8 $OUT/train_1m.log; sort -n $OUT/smi_mem.txt | tail -1
