#!/bin/bash
# Device run 75 (1 GPU), session 10: diagnostic: run 73's restructured loop with the prefetch off (the next tile's first S in its own turn after the epilogue), flashgpt_nopf, against flashgpt_base.
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
t() { echo "[$(( $(date +%s) - START )) s] $*"; }
S=()
A="--backends flash3 --hs 64,128 --seq-lens 1024,4096,16384,65536 --causal 1 --warmup 3 --iters 10 --budget-ms 300"
for round in 1 2 3; do for v in base nopf; do
  timeout 60 $B/flashgpt_$v bench-attention $A > $OUT/bench_${v}_$round.log 2>&1
  S+=("$(t "bench $v round $round rc=$?")")
done; done
echo "== summary =="; printf '%s\n' "${S[@]}"
python3 - $OUT <<'PY'
import sys, glob, statistics as st, collections
d = collections.defaultdict(list)
for f in sorted(glob.glob(sys.argv[1] + "/bench_*_*.log")):
    v = f.rsplit("/", 1)[1].split("_")[1]
    for line in open(f):
        if line.startswith("flash3"):
            x = line.split()
            d[(v, int(x[1]), int(x[5]))].append((float(x[9]), float(x[15])))
print("flash3 fwd TFLOP/s rounds (median) | f+b median, ratio to base")
for hs in (64, 128):
    for T in (1024, 4096, 16384, 65536):
        a, b = d[("base", hs, T)], d[("nopf", hs, T)]
        if not a or not b: continue
        m = lambda r, i: st.median(x[i] for x in r)
        print("%3d %6d | base %s (%.0f) f+b %.0f | nopf %s (%.0f) f+b %.0f | fwd x%.3f f+b x%.3f" % (hs, T,
              "/".join("%.0f" % x[0] for x in a), m(a,0), m(a,1), "/".join("%.0f" % x[0] for x in b), m(b,0), m(b,1), m(b,0)/m(a,0), m(b,1)/m(a,1)))
PY
