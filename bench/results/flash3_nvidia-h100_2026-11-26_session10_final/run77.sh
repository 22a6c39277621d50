#!/bin/bash
# Device run 77 (1 GPU): is run 76's flash3-vs-flash gap (val loss +0.025..+0.039) the new forward
# or run-to-run divergence? d12, 200 steps, same seed: --deterministic flash3 with 3 and with 2
# consumer warpgroups (FLASHGPT_FLASH3_FWD_WG) and flash; and a repeat of the plain pair.
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=16 PYTHONUNBUFFERED=1
B=$PWD/.carry/bin
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
run() {  # name, attn, wg, extra
  FLASHGPT_FLASH3_FWD_WG=$3 timeout 90 $B/flashgpt train --data .carry/data/fortunes --model d12 --seq-len 1024 \
    --batch 16 --steps 200 --lr 6e-4 --warmup 20 --eval-every 50 --sample-every 0 --attn $2 $4 \
    --log $OUT/$1.jsonl > $OUT/$1.log 2>&1
  echo "$1 rc=$?: $(grep -E '^done' $OUT/$1.log)"
}
run det_f3wg3 flash3 3 --deterministic
run det_f3wg2 flash3 2 --deterministic
run det_flash flash 3 --deterministic
run f3wg3 flash3 3
run f3wg2 flash3 2
run flash flash 3
python3 - $OUT <<'PY'
import json, sys
o = sys.argv[1]
def load(n):
    v = [json.loads(l) for l in open("%s/%s.jsonl" % (o, n))]
    return [a["loss"] for a in v if "loss" in a], [round(a["val_loss"], 4) for a in v if "val_loss" in a]
R = {n: load(n) for n in ("det_f3wg3", "det_f3wg2", "det_flash", "f3wg3", "f3wg2", "flash")}
for n, (L, V) in R.items():
    print("%-10s last %.4f mean(last 50) %.4f val %s" % (n, L[-1], sum(L[-50:]) / 50, V))
def cmp(a, b):
    d = [abs(x - y) for x, y in zip(R[a][0], R[b][0])]
    print("%-10s vs %-10s mean |diff| %.4f max %.4f" % (a, b, sum(d) / len(d), max(d)))
for a, b in (("det_f3wg3", "det_f3wg2"), ("det_f3wg3", "det_flash"), ("det_f3wg2", "det_flash"),
             ("f3wg3", "flash"), ("f3wg2", "flash"), ("f3wg3", "f3wg2")):
    cmp(a, b)
PY
