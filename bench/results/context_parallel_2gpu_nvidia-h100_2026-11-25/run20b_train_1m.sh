#!/bin/bash
# Device run 20 (2 GPUs): issue 12's bar: a real d12 run at T = 1M with --cp 2 (3 steps), then
# bench_cp.sh at T = 256K (cp 2 and one GPU; 1 warm-up + 2 timed steps each).
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
S=()
mkdir -p build
cp $B/flashgpt build/flashgpt
export NCCL_NVLS_ENABLE=0
( while sleep 20; do nvidia-smi --query-gpu=index,memory.used --format=csv,noheader >> $OUT/smi_mem.txt; done ) &
SMI=$!
timeout 500 scripts/launch.sh --gpus 2 -- --data .carry/data/long --eval-steps 1 \
  --model d12 --pos rope --seq-len 1048576 --batch 1 --cp 2 --recompute layer-but-attn \
  --attn flash --steps 3 --warmup 1 --eval-every 0 --sample-every 0 \
  --log $OUT/train_1m_cp2.jsonl > $OUT/train_1m_cp2.log 2>&1
S+=("1M cp 2 train rc=$?: $(grep -E '^done' $OUT/train_1m_cp2.log) ($(( $(date +%s) - START )) s)")
kill $SMI
LEFT=$(( 580 - ($(date +%s) - START) ))
: skipped
S+=("bench_cp 256K rc=$? ($(( $(date +%s) - START )) s)")

echo "== 1M =="; grep -vE "^\s*$" $OUT/train_1m_cp2.log | tail -n 8 | cut -c1-250
sort -u $OUT/smi_mem.txt | sort -t, -k2 -n | tail -n 2
echo "== bench =="; grep -E "^ +bench:|does not fit|failed|timeout|^\|" $OUT/bench_cp.log | cut -c1-260
echo "== summary ($(( $(date +%s) - START )) s) =="; printf '%s\n' "${S[@]}"
