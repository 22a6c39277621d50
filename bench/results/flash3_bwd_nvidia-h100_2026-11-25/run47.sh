#!/bin/bash
# Device run 47 (1 GPU), session 8: flash3 backward with the LSE/D rows read before the waits
# (PRELOAD_ROWS; new binary) against HEAD (flashgpt_base), with 2 and 3 (Q, dO) stages; tests.
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
t() { echo "[$(( $(date +%s) - START )) s] $*"; }
S=()
for st in 2 3; do
  FLASHGPT_FLASH3_BWD_STAGES=$st timeout 200 $B/test_gpu --gtest_filter='*flash3*:*Flash3*' > $OUT/test_s$st.log 2>&1
  S+=("$(t "tests stages $st rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' $OUT/test_s$st.log | tr '\n' ' ')")")
  grep -E "^\[  FAILED" $OUT/test_s$st.log | head -5
done
FLASHGPT_FLASH3_BWD_STAGES=3 timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 $B/test_gpu \
  --gtest_filter='*flash3_B3_T17_*:*flash3_B1_T1000_NH6*' > $OUT/memcheck_s3.log 2>&1
S+=("$(t "memcheck s3 rc=$?: $(grep -E 'ERROR SUMMARY' $OUT/memcheck_s3.log | tail -n 1), $(grep -cE '^\[       OK' $OUT/memcheck_s3.log) ok")")
A="--hs 64,128 --seq-lens 4096,16384,65536 --causal 1 --warmup 3 --iters 20"
for round in 1 2 3; do
  timeout 100 $B/flashgpt_base bench-attention --backends flash3 $A > $OUT/bench_base_$round.log 2>&1; S+=("$(t "bench base $round rc=$?")")
  timeout 100 $B/flashgpt bench-attention --backends flash3 $A > $OUT/bench_s2_$round.log 2>&1; S+=("$(t "bench s2 $round rc=$?")")
  FLASHGPT_FLASH3_BWD_STAGES=3 timeout 100 $B/flashgpt bench-attention --backends flash3 $A > $OUT/bench_s3_$round.log 2>&1; S+=("$(t "bench s3 $round rc=$?")")
done
echo "== summary =="; printf '%s\n' "${S[@]}"
for v in base s2 s3; do for r in 1 2 3; do echo "-- $v $r"; grep -E "^flash3" $OUT/bench_${v}_$r.log | cut -c1-100; done; done
python3 - $OUT <<'PY'
import sys, glob, statistics as st, collections
d = collections.defaultdict(list)
for f in sorted(glob.glob(sys.argv[1] + "/bench_*_*.log")):
    v = f.split("bench_")[1].rsplit("_", 1)[0]
    for line in open(f):
        if line.startswith("flash3"):
            x = line.split()
            d[(v, int(x[1]), int(x[5]))].append((float(x[9]), float(x[12]), float(x[15])))
print("median of rounds, TFLOP/s fwd / bwd / f+b")
for hs in (64, 128):
    for T in (4096, 16384, 65536):
        print(hs, T, "  ".join("%s %s" % (v, "/".join("%.1f" % st.median(r[i] for r in d[(v, hs, T)]) for i in range(3))) for v in ("base", "s2", "s3") if d[(v, hs, T)]))
PY
