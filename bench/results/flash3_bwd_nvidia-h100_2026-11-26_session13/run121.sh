#!/bin/bash
# Device run 121 (1 GPU), session 13's final tree (run 120's binary): four rounds of
# run 104's bench_attention.py command (sustained-load warm-up, --warmup-ms 500).
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
t() { echo "[$(( $(date +%s) - START )) s] $*"; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p build; cp $B/flashgpt build/
S=()
for r in 1 2 3 4; do
  timeout 140 python3 scripts/bench_attention.py --binary build/flashgpt --backends flash,flash3 \
    --torch-backends flash,cudnn --hs 64,128 --seq-lens 4096,16384,65536 --causal 1 --iters 10 --warmup 3 \
    --budget-ms 1500 --warmup-ms 500 --out-dir $OUT --csv $OUT/flash3_attention_$r.csv > $OUT/flash3_attention_$r.log 2>&1
  S+=("$(t "bench_attention.py round $r rc=$?")")
done
python3 - $OUT <<'PY'
import sys, os
rows = {}
for r in (1, 2, 3, 4):
    f = "%s/flash3_attention_%d.log" % (sys.argv[1], r)
    if not os.path.exists(f): continue
    for line in open(f):
        x = line.split()
        if len(x) > 14 and x[0] in ("64", "128") and x[5] in ("fwd", "bwd", "fwdbwd"):
            rows.setdefault((int(x[0]), int(x[3]), x[5]), []).append((float(x[7]), float(x[9]), float(x[-1].rstrip("x"))))
print("flash3 / cuDNN per round, median; flash3 TF/s, cuDNN TF/s (round 1)")
for k in sorted(rows):
    v = rows[k]; c = sorted(z for a, b, z in v); n = len(c)
    print("HS %3d T %6d %-7s %s  med %.2f  min %.2f   %6.1f %6.1f" % (k + (" ".join("%.2f" % z for a, b, z in v), (c[(n - 1) // 2] + c[n // 2]) / 2, c[0], v[0][0], v[0][1])))
PY
echo "== summary =="; printf '%s\n' "${S[@]}"
