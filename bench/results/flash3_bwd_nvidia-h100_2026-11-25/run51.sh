#!/bin/bash
# Device run 51 (1 GPU), session 9: flash3 backward block order in groups of (batch, kv head)
# pairs (FLASHGPT_FLASH3_BWD_GROUP=N; 0 = all pairs = the j-major order of main). Tests at
# groups all / 4 / 1 (ragged last groups, the fixed dQ order); realistic ncu durations of the
# three backward kernels (no clock lock, no cache flush); benches HS 64 and 128, 2 rounds.
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
t() { echo "[$(( $(date +%s) - START )) s] $*"; }
S=()
for g in 0 4 1; do
  FLASHGPT_FLASH3_BWD_GROUP=$g timeout 150 $B/test_gpu --gtest_filter='*flash3*:*Flash3*:*Determin*' > $OUT/test_g$g.log 2>&1
  S+=("$(t "tests group $g rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' $OUT/test_g$g.log | tr '\n' ' ')")")
  grep -E "^\[  FAILED" $OUT/test_g$g.log | head -5
done
for g in 0 4; do
  FLASHGPT_FLASH3_BWD_GROUP=$g timeout 100 ncu --cache-control none --clock-control none --metrics gpu__time_duration.sum \
    -k 'regex:flash_bwd_dot|flash_bwd_dq|flash3_bwd' --launch-skip 6 --launch-count 3 $B/flashgpt bench-attention \
    --backends flash3 --hs 128 --seq-lens 4096 --causal 1 --warmup 2 --iters 2 > $OUT/ncu_g$g.log 2>&1
  S+=("$(t "ncu group $g rc=$?: $(grep -E 'gpu__time_duration' $OUT/ncu_g$g.log | awk '{print $2, $3}' | tr '\n' ' ')")")
done
A="--hs 64,128 --seq-lens 4096,8192,16384,65536 --causal 1 --warmup 3 --iters 10 --budget-ms 1500"
for round in 1 2; do
  for g in 0 16 8 4 2 1; do
    FLASHGPT_FLASH3_BWD_GROUP=$g timeout 100 $B/flashgpt bench-attention --backends flash3 $A > $OUT/bench_g${g}_$round.log 2>&1
    S+=("$(t "bench group $g round $round rc=$?")")
  done
done
echo "== summary =="; printf '%s\n' "${S[@]}"
python3 - $OUT <<'PY'
import sys, glob, statistics as st, collections
d = collections.defaultdict(list)
for f in sorted(glob.glob(sys.argv[1] + "/bench_g*_*.log")):
    v = f.split("bench_g")[1].rsplit("_", 1)[0]
    for line in open(f):
        if line.startswith("flash3"):
            x = line.split()
            d[(v, int(x[1]), int(x[5]))].append((float(x[9]), float(x[12]), float(x[15])))
print("backward TFLOP/s per round | f+b median, by group (0 = all pairs)")
for hs in (64, 128):
    for T in (4096, 8192, 16384, 65536):
        print(hs, T, " | ".join("g%s %s f+b %.1f" % (v, "/".join("%.0f" % r[1] for r in d[(v, hs, T)]), st.median(r[2] for r in d[(v, hs, T)])) for v in ("0", "16", "8", "4", "2", "1") if d[(v, hs, T)]))
PY
