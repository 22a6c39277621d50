#!/bin/bash
# Device run 94 (1 GPU), session 11: flash3's backward with the causal mask's compares only on
# the steps that need them (MASK_BRANCH) against the tree (run 92's build, flashgpt_base): every
# GPU test, 3 interleaved rounds of both binaries, ncu's instruction count at HS 128 T 4K.
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
t() { echo "[$(( $(date +%s) - START )) s] $*"; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p build; cp $B/flashgpt $B/test_gpu $B/flashgpt_base build/
S=()
timeout 240 build/test_gpu > $OUT/test_gpu.log 2>&1
S+=("$(t "test_gpu rc=$?: $(grep -E '^\[==========\] [0-9]+ tests|^\[  PASSED|^\[  FAILED  \] [0-9]|^\[  SKIPPED \] [0-9]' $OUT/test_gpu.log | tr '\n' ' ')")")
grep -E "^\[  FAILED  \] [A-Z]" $OUT/test_gpu.log | head
for r in 1 2 3; do
  for v in base new; do
    bin=build/flashgpt; [ $v = base ] && bin=build/flashgpt_base
    timeout 90 $bin bench-attention --backends flash3 --hs 64,128 --seq-lens 1024,4096,16384,65536 \
      --iters 10 --warmup 3 --budget-ms 1000 > $OUT/ab_${v}_$r.log 2>&1
    S+=("$(t "$v r$r rc=$?")")
  done
done
echo "== A/B: median ratio new/base over 3 rounds (fwd, bwd, f+b) =="
python3 - $OUT <<'PY'
import sys
o = sys.argv[1]
def rd(f):
    d = {}
    for l in open(f):
        x = l.split()
        if x and x[0] in ("flash3", "flash") and len(x) > 15: d[(x[0], x[1], x[5])] = (float(x[9]), float(x[12]), float(x[15]))
    return d
rows = {}
for r in (1, 2, 3):
    a, b = rd("%s/ab_base_%d.log" % (o, r)), rd("%s/ab_new_%d.log" % (o, r))
    for k in a:
        if k in b: rows.setdefault(k, []).append((a[k], b[k]))
for k, v in sorted(rows.items()):
    med = [sorted(y[i] / x[i] for x, y in v)[len(v) // 2] for i in range(3)]
    base = [sorted(x[i] for x, y in v)[len(v) // 2] for i in range(3)]
    print("%-6s HS %3s T %6s  base fwd/bwd/f+b %5.0f %5.0f %5.0f  new/base %.3f %.3f %.3f" % (k + tuple(base) + tuple(med)))
PY
timeout 100 ncu --clock-control none --metrics smsp__inst_executed.sum,gpu__time_duration.sum -k regex:flash3_bwd_kernel --launch-skip 2 --launch-count 1 build/flashgpt bench-attention --backends flash3 --hs 128 --seq-lens 4096 --iters 3 --warmup 1 2>&1 | grep -E "inst_executed|duration"
echo "== summary =="; printf '%s\n' "${S[@]}"
