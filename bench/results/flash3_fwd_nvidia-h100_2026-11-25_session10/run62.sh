#!/bin/bash
# Device run 62 (1 GPU), session 10: flash3 forward softmax variants (FLASHGPT_FLASH3_SOFTMAX:
# 0 MUFU + always rescale = the tree's kernel; 1 skip the O rescale where no row max changed;
# 2/3 1/8 of P's exponentials on the FMA pipe (+ skip); 4/5 1/4 (+ skip)): tests with 3 and 5,
# memcheck with 5; benches interleaved, 2 rounds, HS 64 and 128; cuDNN in the same run.
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
t() { echo "[$(( $(date +%s) - START )) s] $*"; }
S=()
for v in 5 3; do
FLASHGPT_FLASH3_SOFTMAX=$v timeout 120 $B/test_gpu --gtest_filter='*flash3*:*Flash3*:*Determin*' > $OUT/test_v$v.log 2>&1
S+=("$(t "tests v=$v rc=$?: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' $OUT/test_v$v.log | tr '\n' ' ')")")
grep -E "^\[  FAILED  \] [A-Z]" $OUT/test_v$v.log | head -5
done
FLASHGPT_FLASH3_SOFTMAX=5 timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 $B/test_gpu \
  --gtest_filter='*flash3_B3_T17_*:*flash3_B1_T1000_NH6*:Flash3.*' > $OUT/memcheck.log 2>&1
S+=("$(t "memcheck v=5 rc=$?: $(grep -E 'ERROR SUMMARY' $OUT/memcheck.log | tail -n 1), $(grep -cE '^\[       OK' $OUT/memcheck.log) ok")")
A="--hs 64,128 --seq-lens 4096,16384,65536 --causal 1 --warmup 3 --iters 10 --budget-ms 600"
for round in 1 2; do for v in 0 1 2 3 4 5; do
  FLASHGPT_FLASH3_SOFTMAX=$v timeout 60 $B/flashgpt bench-attention --backends flash3 $A > $OUT/bench_v${v}_$round.log 2>&1
  S+=("$(t "bench v=$v round $round rc=$?")")
done; done
timeout 200 python3 scripts/bench_attention.py --binary $B/flashgpt --backends flash3 --torch-backends cudnn \
  --hs 64,128 --seq-lens 4096,16384,65536 --causal 1 --iters 10 --warmup 3 --budget-ms 1000 \
  --csv $OUT/torch_v0.csv > $OUT/torch_v0.log 2>&1
S+=("$(t "bench_attention.py v=0 rc=$?")")
echo "== summary =="; printf '%s\n' "${S[@]}"
grep -E "^torch-cudnn|^flash3" $OUT/torch_v0.log | awk '{print $1, $2, $5, $6, $9, $10}' | head -20
python3 - $OUT <<'PY'
import sys, glob, statistics as st, collections
d = collections.defaultdict(list)
for f in sorted(glob.glob(sys.argv[1] + "/bench_v*_*.log")):
    v = f.split("bench_v")[1].rsplit("_", 1)[0]
    for line in open(f):
        if line.startswith("flash3"):
            x = line.split()
            d[(v, int(x[1]), int(x[5]))].append(float(x[9]))
print("flash3 fwd TFLOP/s, rounds, and median / v0's median")
for hs in (64, 128):
    for T in (4096, 16384, 65536):
        base = st.median(d[("0", hs, T)]) if d[("0", hs, T)] else 0
        print("%3d %6d |" % (hs, T) + " | ".join("v%s %s x%.3f" % (v, "/".join("%.0f" % x for x in d[(v, hs, T)]),
              st.median(d[(v, hs, T)]) / base if base and d[(v, hs, T)] else 0) for v in "012345"))
PY
