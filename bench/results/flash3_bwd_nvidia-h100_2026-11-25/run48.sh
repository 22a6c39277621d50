#!/bin/bash
# Device run 48 (1 GPU), session 8: flash3 backward with 3 (Q_i, dO_i) stages and one dQ staging
# buffer (FLASHGPT_FLASH3_BWD_STAGES=3, HS 128 only) against 2 stages and two staging buffers (the
# same binary) and HEAD's binary (flashgpt_base), HS 128 T 4K..64K, 3 interleaved rounds; tests.
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
t() { echo "[$(( $(date +%s) - START )) s] $*"; }
S=()
FLASHGPT_FLASH3_BWD_STAGES=3 timeout 200 $B/test_gpu --gtest_filter='*flash3*:*Flash3*' > $OUT/test_s3.log 2>&1
S+=("$(t "tests stages 3 rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' $OUT/test_s3.log | tr '\n' ' ')")")
grep -E "^\[  FAILED" $OUT/test_s3.log | head -5
A="--hs 128 --seq-lens 4096,8192,16384,32768,65536 --causal 1 --warmup 3 --iters 20"
for round in 1 2 3; do
  timeout 100 $B/flashgpt_base bench-attention --backends flash3 $A > $OUT/bench_base_$round.log 2>&1; S+=("$(t "bench base $round rc=$?")")
  timeout 100 $B/flashgpt bench-attention --backends flash3 $A > $OUT/bench_s2_$round.log 2>&1; S+=("$(t "bench s2 $round rc=$?")")
  FLASHGPT_FLASH3_BWD_STAGES=3 timeout 100 $B/flashgpt bench-attention --backends flash3 $A > $OUT/bench_s3_$round.log 2>&1; S+=("$(t "bench s3 $round rc=$?")")
done
echo "== summary =="; printf '%s\n' "${S[@]}"
python3 - $OUT <<'PY'
import sys, glob, statistics as st, collections
d = collections.defaultdict(list)
for f in sorted(glob.glob(sys.argv[1] + "/bench_*_*.log")):
    v = f.split("bench_")[1].rsplit("_", 1)[0]
    for line in open(f):
        if line.startswith("flash3"):
            x = line.split()
            d[(v, int(x[1]), int(x[5]))].append((float(x[9]), float(x[12]), float(x[15])))
print("TFLOP/s bwd per round (median) | f+b median; HS 128")
for T in (4096, 8192, 16384, 32768, 65536):
    print(T, " | ".join("%s %s (%.1f) f+b %.1f" % (v, " ".join("%.1f" % r[1] for r in d[(v, 128, T)]), st.median(r[1] for r in d[(v, 128, T)]), st.median(r[2] for r in d[(v, 128, T)])) for v in ("base", "s2", "s3") if d[(v, 128, T)]))
PY
