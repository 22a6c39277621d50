#!/bin/bash
# Device run 93 (1 GPU), session 11's final tree: d12 B 32 x T 1024 against PyTorch (bench_train.py),
# d12 at 128K (flash3, flash), and the profile sweep (flash3, flash).
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=16
B=.carry/bin
START=$(date +%s)
t() { echo "[$(( $(date +%s) - START )) s] $*"; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p build; cp $B/flashgpt build/flashgpt
S=()
timeout 170 python3 scripts/bench_train.py --ours flash3,flash --torch compile-cudnn,cudnn --out $OUT > $OUT/bench_train.log 2>&1
S+=("$(t "bench_train rc=$?")")
for attn in flash3 flash; do
  timeout 50 build/flashgpt train --bench --model d12 --vocab-size 50257 --pos rope --seq-len 131072 \
    --batch 1 --attn $attn --recompute layer-but-attn --bench-steps 2 > $OUT/128k_$attn.log 2>&1
  S+=("$(t "128K $attn rc=$?: $(grep -E '^ *bench' $OUT/128k_$attn.log | cut -c1-200)")")
done
timeout 330 build/flashgpt profile --attn flash3,flash --out $OUT/profile > $OUT/profile.log 2>&1
S+=("$(t "profile rc=$?")")
rm -f $OUT/profile/*.png
tail -n 7 $OUT/bench_train.log | cut -c1-150
grep -E "^(backend|flash|ceil)" $OUT/profile.log | cut -c1-160 | head -20
echo "== summary =="; printf '%s\n' "${S[@]}"
