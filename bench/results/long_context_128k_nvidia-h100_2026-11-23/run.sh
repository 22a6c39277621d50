#!/bin/bash
# d12 at T = 131072 (RoPE, B 1) on one GPU: flash3 vs flash with --recompute layer, and flash3
# with --recompute layer-but-attn (attention's forward once per step): plan, peak, tokens/s.
cd "$(dirname "$0")"
export OMP_NUM_THREADS=16
for a in "flash3 layer" "flash layer" "flash3 layer-but-attn"; do
  set -- $a
  timeout -s KILL 60 ./flashgpt train --bench --model d12 --vocab-size 50257 --pos rope --seq-len 131072 \
    --batch 1 --attn $1 --recompute $2 --bench-steps 2 > $OUT/128k_$1_$2.log 2>&1
  echo "[$1 --recompute $2] rc=$? $(grep -E '^bench' $OUT/128k_$1_$2.log)"
  grep -iE "total|plan" $OUT/128k_$1_$2.log | head -3
done
