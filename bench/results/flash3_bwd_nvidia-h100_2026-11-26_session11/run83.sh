#!/bin/bash
# Device run 83 (1 GPU), session 11: flash3's HS 128 forward with S = Q K^T's A operand (the
# consumer's 64 Q rows) in registers (ldmatrix once per tile, RS wgmma; Q's buffer freed at once)
# against the tree (Q read from smem by every S), FLASHGPT_FLASH3_FWD_Q=regs, one binary. Tests
# with it; forward and fwd+bwd, 3 interleaved rounds; power and clocks sampled.
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
t() { echo "[$(( $(date +%s) - START )) s] $*"; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p build; cp $B/flashgpt $B/test_gpu build/
S=()
FLASHGPT_FLASH3_FWD_Q=regs timeout 200 build/test_gpu --gtest_filter='*flash3*:*Flash3*:*Ring*' > $OUT/test_qregs.log 2>&1
S+=("$(t "test_gpu qregs rc=$?: $(grep -E '^\[==========\] [0-9]+ tests|^\[  PASSED|^\[  FAILED  \] [0-9]' $OUT/test_qregs.log | tr '\n' ' ')")")
grep -E "^\[  FAILED  \] [A-Z]" $OUT/test_qregs.log | head
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv,noheader -lms 200 > $OUT/smi.csv &
SMI=$!
for r in 1 2 3; do
  for v in smem regs; do
    FLASHGPT_FLASH3_FWD_Q=$v timeout 80 build/flashgpt bench-attention --backends flash3 --hs 128 --seq-lens 1024,4096,16384,65536 \
      --iters 10 --warmup 3 --budget-ms 1000 > $OUT/ab_${v}_$r.log 2>&1
    S+=("$(t "$v r$r rc=$?")")
  done
done
kill $SMI
echo "== A/B HS 128 forward TF/s (and f+b), smem -> regs per round =="
python3 - $OUT <<'PY'
import sys
o = sys.argv[1]
def rd(f):
    d = {}
    for l in open(f):
        x = l.split()
        if x and x[0] == "flash3" and len(x) > 15: d[(x[1], x[5])] = (float(x[9]), float(x[15]))
    return d
rows = {}
for r in (1, 2, 3):
    a, b = rd("%s/ab_smem_%d.log" % (o, r)), rd("%s/ab_regs_%d.log" % (o, r))
    for k in a:
        rows.setdefault(k, []).append((a[k], b.get(k, (0, 0))))
for k, v in rows.items():
    rf = sorted(y[0] / x[0] for x, y in v); rb = sorted(y[1] / x[1] for x, y in v)
    print("HS %4s T %6s fwd %s | median fwd %.3f f+b %.3f" % (k[0], k[1], " ".join("%5.0f->%5.0f" % (x[0], y[0]) for x, y in v), rf[1], rb[1]))
PY
echo "== summary =="; printf '%s\n' "${S[@]}"
