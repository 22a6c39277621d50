#!/bin/bash
# Device run 53 (1 GPU), session 9: the pair-group rule (5 at T 4K, 3 at 8K on an H100) against
# 3, 4, 8 and all pairs at T 4K and 8K, HS 64 and 128, 3 interleaved rounds; compute-sanitizer
# memcheck of flash3's backward with ragged groups (3 pairs a group) and the default rule.
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
t() { echo "[$(( $(date +%s) - START )) s] $*"; }
S=()
for g in 3 0; do
  FLASHGPT_FLASH3_BWD_GROUP=$g timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 $B/test_gpu \
    --gtest_filter='*flash3_B3_T17_*:*flash3_B1_T1000_NH6*:Flash3.*' > $OUT/memcheck_g$g.log 2>&1
  S+=("$(t "memcheck group $g rc=$?: $(grep -E 'ERROR SUMMARY' $OUT/memcheck_g$g.log | tail -n 1), $(grep -cE '^\[       OK' $OUT/memcheck_g$g.log) ok")")
done
A="--hs 64,128 --seq-lens 4096,8192 --causal 1 --warmup 3 --iters 20"
for round in 1 2 3; do
  for g in 0 3 4 5 8 rule; do
    if [ $g = rule ]; then unset FLASHGPT_FLASH3_BWD_GROUP; else export FLASHGPT_FLASH3_BWD_GROUP=$g; fi
    timeout 60 $B/flashgpt bench-attention --backends flash3 $A > $OUT/bench_g${g}_$round.log 2>&1
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
print("backward TFLOP/s per round (median) | f+b median, by pairs per group (0 = all; rule = default)")
for hs in (64, 128):
    for T in (4096, 8192):
        print(hs, T, " | ".join("g%s %s (%.0f) f+b %.0f" % (v, "/".join("%.0f" % r[1] for r in d[(v, hs, T)]), st.median(r[1] for r in d[(v, hs, T)]), st.median(r[2] for r in d[(v, hs, T)])) for v in ("0", "3", "4", "5", "8", "rule") if d[(v, hs, T)]))
PY
