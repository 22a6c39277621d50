#!/bin/bash
# Device run 13 (one GPU): issue 11's measurements with flash3's new backward: attention against
# PyTorch SDPA (FA2, cuDNN) in one process, --deterministic cost, d12 curves flash3 vs flash,
# d12 B32 T1024 against torch.compile, d12 at T = 128K.
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=16 PYTHONUNBUFFERED=1
B=$PWD/.carry/bin
START=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
S=()
mkdir -p /tmp/c
timeout 150 python3 scripts/bench_attention.py --binary $B/flashgpt --backends flash,flash3 \
  --torch-backends flash,cudnn --hs 64,128 --seq-lens 4096,16384,65536 --iters 10 --warmup 3 \
  --budget-ms 1500 --out-dir /tmp/c --csv $OUT/attention.csv > $OUT/bench_torch.log 2>&1; S+=("bench_attention.py rc=$?")
timeout 60 $B/flashgpt bench-attention --backends flash,flash3 --hs 64,128 --seq-lens 4096,16384,65536 \
  --iters 10 --warmup 3 --budget-ms 1500 > $OUT/bench_plain.log 2>&1; S+=("bench plain rc=$?")
timeout 60 $B/flashgpt bench-attention --backends flash,flash3 --hs 64,128 --seq-lens 4096,16384,65536 \
  --iters 10 --warmup 3 --budget-ms 1500 --deterministic > $OUT/bench_det.log 2>&1; S+=("bench det rc=$?")
for a in flash3 flash; do
  timeout 45 $B/flashgpt train --data .carry/data/fortunes --model d12 --seq-len 1024 --batch 16 --steps 200 \
    --lr 6e-4 --warmup 20 --eval-every 50 --sample-every 0 --attn $a --log /tmp/c/$a.jsonl > /tmp/c/$a.log 2>&1
  S+=("train d12 $a rc=$?: $(grep -E '^done' /tmp/c/$a.log)")
done
python3 - > $OUT/curves.txt 2>&1 <<'PY'
import json
f = [json.loads(l) for l in open("/tmp/c/flash3.jsonl")]
g = [json.loads(l) for l in open("/tmp/c/flash.jsonl")]
f = [a for a in f if "loss" in a]; g = [a for a in g if "loss" in a]
d = [abs(a["loss"] - b["loss"]) for a, b in zip(f, g)]
print(f"flash3 vs flash, {len(d)} steps: first {f[0]['loss']:.4f}/{g[0]['loss']:.4f}, last {f[-1]['loss']:.4f}/{g[-1]['loss']:.4f}, mean |diff| {sum(d)/len(d):.4f}, max |diff| {max(d):.4f}")
PY
cp /tmp/c/flash3.jsonl /tmp/c/flash.jsonl $OUT/ 2>/dev/null
S+=("curves: $(head -n 1 $OUT/curves.txt)")
for a in "flash3 layer-but-attn" "flash layer-but-attn" "flash3 layer"; do
  set -- $a
  timeout -s KILL 60 $B/flashgpt train --bench --model d12 --vocab-size 50257 --pos rope --seq-len 131072 \
    --batch 1 --attn $1 --recompute $2 --bench-steps 2 > $OUT/128k_$1_$2.log 2>&1
  S+=("128K $1 $2 rc=$?: $(grep -E '^bench' $OUT/128k_$1_$2.log)")
done
timeout 200 python3 scripts/bench_train.py --binary $B/flashgpt --ours flash3,flash --torch compile-cudnn \
  --out $OUT > $OUT/bench_train.log 2>&1; S+=("bench_train rc=$?")
echo "== summary ($(( $(date +%s) - START )) s) =="; printf '%s\n' "${S[@]}"
grep -A22 "^TFLOP/s (0" $OUT/bench_torch.log | grep -E "cau| 1 (fwd|bwd|fwdbwd)" | cut -c1-160
tail -8 $OUT/bench_train.log
