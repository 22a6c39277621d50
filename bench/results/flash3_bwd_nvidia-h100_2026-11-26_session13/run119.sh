#!/bin/bash
# Device run 119 (1 GPU), session 13: racecheck with every math thread arriving on empty[s]
# (count 256, new binary, .carry/bin) against run 116's tree (.carry/old: lane 0 of each warp),
# then the backward A/B of the two binaries.
cd "$(dirname "$0")/.."
START=$(date +%s)
t() { echo "[$(( $(date +%s) - START )) s] $*"; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p build old; cp .carry/bin/flashgpt .carry/bin/test_gpu build/; cp .carry/old/flashgpt .carry/old/test_gpu old/
S=()
F='*flash3_B3_T17_*:*flash3_B1_T1000_NH6*'
rc() {  # name, binary, env...
  local name=$1 bin=$2; shift 2
  env "$@" timeout 170 compute-sanitizer --tool racecheck --racecheck-report hazard --error-exitcode 9 $bin --gtest_filter="$F" > $OUT/race_$name.log 2>&1
  local r=$?
  S+=("$(t "racecheck $name rc=$r: $(grep -E 'RACECHECK SUMMARY' $OUT/race_$name.log | tail -n 1) $(grep -cE '^\[       OK' $OUT/race_$name.log) ok; kernels: $(grep -o 'launch_bwd<[^(]*' $OUT/race_$name.log | sort | uniq -c | tr '\n' ' ')")")
}
rc new build/test_gpu X=1
rc new_dqfirst build/test_gpu FLASHGPT_FLASH3_BWD=dqfirst
timeout 200 build/test_gpu --gtest_filter='*flash3*:*Flash3*:*RingAttention*' > $OUT/test_new.log 2>&1
S+=("$(t "test_gpu flash3+ring new rc=$?: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]|^\[  SKIPPED \] [0-9]' $OUT/test_new.log | tr '\n' ' ')")")
for r in 1 2 3; do
  for v in old build; do
    timeout 90 $v/flashgpt bench-attention --backends flash3 --hs 64,128 --seq-lens 4096,16384,65536 \
      --iters 10 --warmup 3 --budget-ms 1500 --warmup-ms 500 > $OUT/ab_${v}_$r.log 2>&1
  done
done
python3 - $OUT <<'PY'
import sys
o = sys.argv[1]
def rd(f):
    d = {}
    for l in open(f):
        x = l.split()
        if x and x[0] == "flash3" and len(x) > 15: d[(x[1], x[5])] = (float(x[9]), float(x[12]), float(x[15]))
    return d
rows = {}
for r in (1, 2, 3):
    a, b = rd("%s/ab_old_%d.log" % (o, r)), rd("%s/ab_build_%d.log" % (o, r))
    for k in a:
        if k in b: rows.setdefault(k, []).append((a[k], b[k]))
print("== new (all arrive) / old, median of 3 rounds: fwd bwd f+b; bwd per round ==")
for k, v in sorted(rows.items(), key=lambda kv: (int(kv[0][0]), int(kv[0][1]))):
    med = [sorted(y[i] / x[i] for x, y in v)[len(v) // 2] for i in range(3)]
    print("HS %3s T %6s  %.3f %.3f %.3f  bwd %s" % (k + tuple(med) + (" ".join("%.0f->%.0f" % (x[1], y[1]) for x, y in v),)))
PY
echo "== summary =="; printf '%s\n' "${S[@]}"
