#!/bin/bash
# Device run 81 (1 GPU), session 11: flash3's backward with S^T's A operand (this warpgroup's K
# rows) held in registers (RS wgmma, loaded once per block by ldmatrix) instead of read from
# shared memory every step: FLASHGPT_FLASH3_BWD=kregs against the default (dqfirst), one binary.
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
t() { echo "[$(( $(date +%s) - START )) s] $*"; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p build; cp $B/flashgpt $B/test_gpu build/
S=()
FLASHGPT_FLASH3_BWD=kregs timeout 200 build/test_gpu --gtest_filter='*flash3*:*Flash3*' > $OUT/test_kregs.log 2>&1
S+=("$(t "test_gpu kregs rc=$?: $(grep -E '^\[==========\] [0-9]+ tests|^\[  PASSED|^\[  FAILED  \] [0-9]' $OUT/test_kregs.log | tr '\n' ' ')")")
grep -E "^\[  FAILED  \] [A-Z]" $OUT/test_kregs.log | head
for r in 1 2 3; do
  for v in dqfirst kregs; do
    FLASHGPT_FLASH3_BWD=$v timeout 80 build/flashgpt bench-attention --backends flash3 --hs 64,128 --seq-lens 1024,4096,16384,65536 \
      --iters 10 --warmup 3 --budget-ms 1000 > $OUT/ab_${v}_$r.log 2>&1
    S+=("$(t "$v r$r rc=$?")")
  done
done
echo "== A/B backward TF/s, dqfirst -> kregs per round =="
python3 - $OUT <<'PY'
import sys
o = sys.argv[1]
def rd(f):
    d = {}
    for l in open(f):
        x = l.split()
        if x and x[0] == "flash3" and len(x) > 15: d[(x[1], x[5])] = float(x[12])
    return d
rows = {}
for r in (1, 2, 3):
    a, b = rd("%s/ab_dqfirst_%d.log" % (o, r)), rd("%s/ab_kregs_%d.log" % (o, r))
    for k in a:
        rows.setdefault(k, []).append((a[k], b.get(k, 0)))
for k, v in rows.items():
    rat = sorted(y / x for x, y in v)
    print("HS %4s T %6s  %s  median ratio %.3f" % (k[0], k[1], "  ".join("%6.1f->%6.1f" % p for p in v), rat[len(rat) // 2]))
PY
echo "== summary =="; printf '%s\n' "${S[@]}"
