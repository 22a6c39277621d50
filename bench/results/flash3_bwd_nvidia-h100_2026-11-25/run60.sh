#!/bin/bash
# Device run 60 (1 GPU), session 9: flash3's backward with the last pair group merged to at
# least 2 SMs / n_j pairs (FLASHGPT_FLASH3_BWD_TAIL=1; 0 = the final tree's order, same binary):
# tests and memcheck with it; benches interleaved, 3 rounds, HS 64 and 128, T 4K..64K.
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
t() { echo "[$(( $(date +%s) - START )) s] $*"; }
S=()
FLASHGPT_FLASH3_BWD_TAIL=1 timeout 90 $B/test_gpu --gtest_filter='*flash3*:*Flash3*:*Determin*' > $OUT/test.log 2>&1
S+=("$(t "tests tail=1 rc=$?: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' $OUT/test.log | tr '\n' ' ')")")
grep -E "^\[  FAILED  \] [A-Z]" $OUT/test.log | head -5
FLASHGPT_FLASH3_BWD_TAIL=1 timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 $B/test_gpu \
  --gtest_filter='*flash3_B3_T17_*:*flash3_B1_T1000_NH6*:Flash3.*' > $OUT/memcheck.log 2>&1
S+=("$(t "memcheck tail=1 rc=$?: $(grep -E 'ERROR SUMMARY' $OUT/memcheck.log | tail -n 1), $(grep -cE '^\[       OK' $OUT/memcheck.log) ok")")
A="--hs 64,128 --seq-lens 4096,8192,16384,65536 --causal 1 --warmup 3 --iters 10 --budget-ms 1000"
for round in 1 2 3; do for v in 0 1; do
  FLASHGPT_FLASH3_BWD_TAIL=$v timeout 60 $B/flashgpt bench-attention --backends flash3 $A > $OUT/bench_t${v}_$round.log 2>&1
  S+=("$(t "bench tail=$v round $round rc=$?")")
done; done
echo "== summary =="; printf '%s\n' "${S[@]}"
python3 - $OUT <<'PY'
import sys, glob, statistics as st, collections
d = collections.defaultdict(list)
for f in sorted(glob.glob(sys.argv[1] + "/bench_t*_*.log")):
    v = f.split("bench_t")[1].rsplit("_", 1)[0]
    for line in open(f):
        if line.startswith("flash3"):
            x = line.split()
            d[(v, int(x[1]), int(x[5]))].append((float(x[9]), float(x[12]), float(x[15])))
print("flash3 bwd TFLOP/s per round (median) | f+b median: tail=0 (final tree) vs tail=1 (last group merged)")
for hs in (64, 128):
    for T in (4096, 8192, 16384, 65536):
        a, b = d[("0", hs, T)], d[("1", hs, T)]
        if not a or not b: continue
        m = lambda r, i: st.median(x[i] for x in r)
        print("%3d %6d | t0 %s (%.0f) f+b %.0f | t1 %s (%.0f) f+b %.0f | bwd x%.3f f+b x%.3f" % (hs, T,
              "/".join("%.0f" % x[1] for x in a), m(a,1), m(a,2), "/".join("%.0f" % x[1] for x in b), m(b,1), m(b,2), m(b,1)/m(a,1), m(b,2)/m(a,2)))
PY
