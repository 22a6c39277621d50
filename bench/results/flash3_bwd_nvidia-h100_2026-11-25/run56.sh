#!/bin/bash
# Device run 56 (1 GPU), session 9: flash3's first dQ partial of each tile stores (a ticket per
# tile; --deterministic: block 0) instead of adding to a dQacc the D kernel zeroed.
# FLASHGPT_FLASH3_DQ_ZERO=1 runs the old way in the same binary. Tests both ways, memcheck,
# ncu of the D kernel, benches interleaved 3 rounds, --deterministic one round each.
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
t() { echo "[$(( $(date +%s) - START )) s] $*"; }
S=()
for z in 0 1; do
  FLASHGPT_FLASH3_DQ_ZERO=$z timeout 120 $B/test_gpu --gtest_filter='*flash3*:*Flash3*:*Determin*:RingAttention*' > $OUT/test_z$z.log 2>&1
  S+=("$(t "tests zero=$z rc=$?: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' $OUT/test_z$z.log | tr '\n' ' ')")")
  grep -E "^\[  FAILED  \] [A-Z]" $OUT/test_z$z.log | head -5
done
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 $B/test_gpu \
  --gtest_filter='*flash3_B3_T17_*:*flash3_B1_T1000_NH6*:Flash3.*:*Flash3Determin*' > $OUT/memcheck.log 2>&1
S+=("$(t "memcheck rc=$?: $(grep -E 'ERROR SUMMARY' $OUT/memcheck.log | tail -n 1), $(grep -cE '^\[       OK' $OUT/memcheck.log) ok")")
for z in 0 1; do
  FLASHGPT_FLASH3_DQ_ZERO=$z timeout 60 ncu --cache-control none --clock-control none --metrics gpu__time_duration.sum \
    -k 'regex:flash_bwd_dot|flash_bwd_dq|flash3_bwd' --launch-skip 6 --launch-count 3 $B/flashgpt bench-attention \
    --backends flash3 --hs 128 --seq-lens 4096 --causal 1 --warmup 2 --iters 2 > $OUT/ncu_z$z.log 2>&1
  S+=("$(t "ncu zero=$z HS 128 4K rc=$?: D, main, convert $(grep -E 'gpu__time_duration' $OUT/ncu_z$z.log | awk '{print $3, $2}' | tr '\n' ' ')")")
done
A="--hs 64,128 --seq-lens 4096,16384,65536 --causal 1 --warmup 3 --iters 10 --budget-ms 1500"
for round in 1 2 3; do for z in 1 0; do
  FLASHGPT_FLASH3_DQ_ZERO=$z timeout 60 $B/flashgpt bench-attention --backends flash3 $A > $OUT/bench_z${z}_$round.log 2>&1
  S+=("$(t "bench zero=$z round $round rc=$?")")
done; done
for z in 1 0; do
  FLASHGPT_FLASH3_DQ_ZERO=$z timeout 60 $B/flashgpt bench-attention --backends flash3 $A --deterministic > $OUT/bench_det_z$z.log 2>&1
  S+=("$(t "bench det zero=$z rc=$?: $(grep ^flash3 $OUT/bench_det_z$z.log | awk '{print $2"/"$6, $13}' | tr '\n' ' ')")")
done
echo "== summary =="; printf '%s\n' "${S[@]}"
python3 - $OUT <<'PY'
import sys, glob, statistics as st, collections
d = collections.defaultdict(list)
for f in sorted(glob.glob(sys.argv[1] + "/bench_z*_*.log")):
    v = f.split("bench_z")[1].rsplit("_", 1)[0]
    for line in open(f):
        if line.startswith("flash3"):
            x = line.split()
            d[(v, int(x[1]), int(x[5]))].append((float(x[9]), float(x[12]), float(x[15])))
print("flash3 bwd TFLOP/s per round (median) | f+b median: zero=1 (D kernel zeroes) vs zero=0 (first partial stores)")
for hs in (64, 128):
    for T in (4096, 16384, 65536):
        a, b = d[("1", hs, T)], d[("0", hs, T)]
        if not a or not b: continue
        m = lambda r, i: st.median(x[i] for x in r)
        print("%3d %6d | z1 %s (%.0f) f+b %.0f | z0 %s (%.0f) f+b %.0f | bwd x%.3f f+b x%.3f" % (hs, T,
              "/".join("%.0f" % x[1] for x in a), m(a,1), m(a,2), "/".join("%.0f" % x[1] for x in b), m(b,1), m(b,2), m(b,1)/m(a,1), m(b,2)/m(a,2)))
PY
