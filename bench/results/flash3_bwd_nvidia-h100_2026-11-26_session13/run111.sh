#!/bin/bash
# Device run 111 (1 GPU), session 13: flash3 backward kStNext / kStNextSs, rotated (each step issues its S^T
# under the step before's dK; Ss: dK's A from the dS^T in smem) against kDqFirst, one binary.
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
t() { echo "[$(( $(date +%s) - START )) s] $*"; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p build; cp $B/flashgpt $B/test_gpu build/
S=()
for v in stnext stnextss; do
  FLASHGPT_FLASH3_BWD=$v timeout 200 build/test_gpu --gtest_filter='*flash3*:*Flash3*:*RingAttention*' > $OUT/test_$v.log 2>&1
  S+=("$(t "test_gpu $v rc=$?: $(grep -E '^\[==========\] [0-9]+ tests|^\[  PASSED|^\[  FAILED  \] [0-9]|^\[  SKIPPED \] [0-9]' $OUT/test_$v.log | tr '\n' ' ')")")
  grep -E "^\[  FAILED  \] [A-Z]" $OUT/test_$v.log | head
done
for r in 1 2 3; do
  for v in dqfirst stnext stnextss; do
    FLASHGPT_FLASH3_BWD=$v timeout 90 build/flashgpt bench-attention --backends flash3 --hs 64,128 --seq-lens 4096,16384,65536 \
      --iters 10 --warmup 3 --budget-ms 1500 --warmup-ms 500 > $OUT/ab_${v}_$r.log 2>&1
    S+=("$(t "$v r$r rc=$?")")
  done
done
echo "== A/B: median ratio variant/dqfirst over 3 rounds (fwd, bwd, f+b) =="
python3 - $OUT <<'PY'
import sys
o = sys.argv[1]
def rd(f):
    d = {}
    for l in open(f):
        x = l.split()
        if x and x[0] in ("flash3", "flash") and len(x) > 15: d[(x[0], x[1], x[5])] = (float(x[9]), float(x[12]), float(x[15]))
    return d
for var in ("stnext", "stnextss"):
    rows = {}
    for r in (1, 2, 3):
        a, b = rd("%s/ab_dqfirst_%d.log" % (o, r)), rd("%s/ab_%s_%d.log" % (o, var, r))
        for k in a:
            if k in b: rows.setdefault(k, []).append((a[k], b[k]))
    print("--", var)
    for k, v in sorted(rows.items(), key=lambda kv: (int(kv[0][1]), int(kv[0][2]))):
        med = [sorted(y[i] / x[i] for x, y in v)[len(v) // 2] for i in range(3)]
        base = [sorted(x[i] for x, y in v)[len(v) // 2] for i in range(3)]
        bw = " ".join("%.0f->%.0f" % (x[1], y[1]) for x, y in v)
        print("%-6s HS %3s T %6s  tree f/b/fb %4.0f %4.0f %4.0f  ratio %.3f %.3f %.3f  bwd %s" % (k + tuple(base) + tuple(med) + (bw,)))
PY
echo "== summary =="; printf '%s\n' "${S[@]}"
