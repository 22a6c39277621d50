#!/bin/bash
# Device run 76 (1 GPU), session 10's tree: issue 11's d12 loss curve, flash3 (three consumer
# warpgroups at HS 64) against flash, same seed, 200 steps (as run 13 did on session 8's tree).
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=16 PYTHONUNBUFFERED=1
B=$PWD/.carry/bin
START=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
S=()
for a in flash3 flash; do
  timeout 90 $B/flashgpt train --data .carry/data/fortunes --model d12 --seq-len 1024 --batch 16 --steps 200 \
    --lr 6e-4 --warmup 20 --eval-every 50 --sample-every 0 --attn $a --log $OUT/$a.jsonl > $OUT/$a.log 2>&1
  S+=("train d12 $a rc=$?: $(grep -E '^done' $OUT/$a.log)")
done
python3 - $OUT > $OUT/curves.txt 2>&1 <<'PY'
import json, sys
o = sys.argv[1]
f = [json.loads(l) for l in open(o + "/flash3.jsonl")]
g = [json.loads(l) for l in open(o + "/flash.jsonl")]
f = [a for a in f if "loss" in a]; g = [a for a in g if "loss" in a]
d = [abs(a["loss"] - b["loss"]) for a, b in zip(f, g)]
print(f"flash3 vs flash, {len(d)} steps: first {f[0]['loss']:.4f}/{g[0]['loss']:.4f}, last {f[-1]['loss']:.4f}/{g[-1]['loss']:.4f}, mean |diff| {sum(d)/len(d):.4f}, max |diff| {max(d):.4f}")
PY
S+=("curves: $(head -n 1 $OUT/curves.txt)")
echo "== summary =="; printf '%s\n' "${S[@]}"
