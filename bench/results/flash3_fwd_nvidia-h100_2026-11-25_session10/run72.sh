#!/bin/bash
# Device run 72 (1 GPU), session 10: run 71's prefetched first S again, now with the producer
# claiming the next work tile right after this tile's Q load (flashgpt_pf), and the early claim
# alone on the committed tree (flashgpt_early), against the committed tree (flashgpt_base,
# c006419's kernels). Forward benches interleaved, 3 rounds.
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
t() { echo "[$(( $(date +%s) - START )) s] $*"; }
S=()
A="--backends flash3 --hs 64,128 --seq-lens 1024,4096,16384,65536 --causal 1 --warmup 3 --iters 10 --budget-ms 300"
for round in 1 2 3; do for v in base early pf; do
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
print("flash3 fwd TFLOP/s rounds (median), ratio to base")
for hs in (64, 128):
    for T in (1024, 4096, 16384, 65536):
        a = d[("base", hs, T)]
        if not a: continue
        m = lambda r, i: st.median(x[i] for x in r)
        print("%3d %6d | " % (hs, T) + " | ".join("%s %s (%.0f) x%.3f" % (v, "/".join("%.0f" % x[0] for x in d[(v, hs, T)]), m(d[(v, hs, T)], 0), m(d[(v, hs, T)], 0) / m(a, 0)) for v in ("base", "early", "pf") if d[(v, hs, T)]))
PY
