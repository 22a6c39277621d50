#!/bin/bash
# Device run 66 (1 GPU), session 10: flash3 backward with the dQ convert fused into each pair's
# last block (FLASHGPT_FLASH3_DQ_CONVERT=fused|kernel; default: fused while the pair's dQacc is
# <= 8 MB). Tests both ways, memcheck fused; benches interleaved, 3 rounds, fused vs kernel.
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
t() { echo "[$(( $(date +%s) - START )) s] $*"; }
S=()
for v in fused kernel; do
FLASHGPT_FLASH3_DQ_CONVERT=$v timeout 150 $B/test_gpu --gtest_filter='*flash3*:*Flash3*:*Determin*' > $OUT/test_$v.log 2>&1
S+=("$(t "tests $v rc=$?: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' $OUT/test_$v.log | tr '\n' ' ')")")
grep -E "^\[  FAILED  \] [A-Z]" $OUT/test_$v.log | head -5
done
FLASHGPT_FLASH3_DQ_CONVERT=fused timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 $B/test_gpu \
  --gtest_filter='*flash3_B3_T17_*:*flash3_B1_T1000_NH6*:*flash3*T4097*:Flash3.*' > $OUT/memcheck.log 2>&1
S+=("$(t "memcheck fused rc=$?: $(grep -E 'ERROR SUMMARY' $OUT/memcheck.log | tail -n 1), $(grep -cE '^\[       OK' $OUT/memcheck.log) ok")")
A="--backends flash3 --hs 64,128 --seq-lens 4096,8192,16384,32768 --causal 1 --warmup 3 --iters 10 --budget-ms 500"
for round in 1 2 3; do for v in kernel fused; do
  FLASHGPT_FLASH3_DQ_CONVERT=$v timeout 60 $B/flashgpt bench-attention $A > $OUT/bench_${v}_$round.log 2>&1
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
            d[(v, int(x[1]), int(x[5]))].append((float(x[11]), float(x[14])))
print("flash3 bwd ms rounds (median) | f+b ms median: kernel vs fused")
for hs in (64, 128):
    for T in (4096, 8192, 16384, 32768):
        a, b = d[("kernel", hs, T)], d[("fused", hs, T)]
        if not a or not b: continue
        m = lambda r, i: st.median(x[i] for x in r)
        print("%3d %6d | kernel %s (%.3f) f+b %.3f | fused %s (%.3f) f+b %.3f | bwd x%.3f f+b x%.3f (speed)" % (hs, T,
              "/".join("%.3f" % x[0] for x in a), m(a,0), m(a,1), "/".join("%.3f" % x[0] for x in b), m(b,0), m(b,1), m(a,0)/m(b,0), m(a,1)/m(b,1)))
PY
