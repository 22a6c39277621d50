#!/bin/bash
# Device run 68 (1 GPU), session 10's tree: flash3 and flash against SDPA FA2 and cuDNN four times
# in a row (the median of the same-run ratios), and flash3's --deterministic cost.
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
t() { echo "[$(( $(date +%s) - START )) s] $*"; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p build; cp $B/flashgpt build/flashgpt
S=()
for r in 1 2 3 4; do
  timeout 110 python3 scripts/bench_attention.py --binary build/flashgpt --backends flash,flash3 \
    --torch-backends flash,cudnn --hs 64,128 --seq-lens 4096,16384,65536 --causal 1 --iters 10 --warmup 3 \
    --budget-ms 1500 --out-dir $OUT --csv $OUT/flash3_attention_$r.csv > $OUT/flash3_attention_$r.log 2>&1
  S+=("$(t "bench_attention.py round $r rc=$?")")
done
for det in "" --deterministic; do
  timeout 60 build/flashgpt bench-attention --backends flash3 --hs 64,128 \
    --seq-lens 4096,16384,65536 --iters 10 --warmup 3 --budget-ms 1500 $det > $OUT/flash3_bench${det:+_det}.log 2>&1
  S+=("$(t "bench-attention $det rc=$?: $(grep ^flash3 $OUT/flash3_bench${det:+_det}.log | awk '{print $2"/"$6, $13}' | tr '\n' ' ')")")
done
python3 - $OUT <<'PY'
import sys, statistics as st
rows = {}
for r in (1, 2, 3, 4):
    for line in open("%s/flash3_attention_%d.log" % (sys.argv[1], r)):
        x = line.split()
        if len(x) > 14 and x[0] in ("64", "128") and x[5] in ("fwd", "bwd", "fwdbwd"):
            rows.setdefault((int(x[0]), int(x[3]), x[5]), []).append((float(x[7]), float(x[9]), float(x[-1].rstrip("x"))))
print("flash3 / cuDNN per round, median; flash3 TF/s median, cuDNN TF/s median")
for k in sorted(rows):
    v = rows[k]
    print("%3d %6d %-6s | %s | median %.2f | flash3 %.1f cudnn %.1f" % (k + ("/".join("%.2f" % e[2] for e in v), st.median(e[2] for e in v), st.median(e[0] for e in v), st.median(e[1] for e in v))))
PY
echo "== summary =="; printf '%s\n' "${S[@]}"
