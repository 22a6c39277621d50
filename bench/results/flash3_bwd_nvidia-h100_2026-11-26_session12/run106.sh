#!/bin/bash
# Device run 106 (1 GPU), session 12: flash3's HS 128 backward with 3 (Q_i, dO_i, LSE_i, D_i)
# stages and one dQ staging buffer (FLASHGPT_FLASH3_BWD_STAGES=3; session 8's run 48 measured
# 0.89 / 1.02 / 0.99 / 1.03 / 1.02 at T 4K..64K in short measurements) against 2 stages and two
# buffers, same binary, --warmup-ms 500, 3 interleaved rounds.
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
t() { echo "[$(( $(date +%s) - START )) s] $*"; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p build; cp $B/flashgpt $B/test_gpu build/
S=()
FLASHGPT_FLASH3_BWD_STAGES=3 timeout 200 build/test_gpu --gtest_filter='*flash3*:*Flash3*:*RingAttention*' > $OUT/test_s3.log 2>&1
S+=("$(t "test_gpu stages 3 rc=$?: $(grep -E '^\[==========\] [0-9]+ tests|^\[  PASSED|^\[  FAILED  \] [0-9]|^\[  SKIPPED \] [0-9]' $OUT/test_s3.log | tr '\n' ' ')")")
grep -E "^\[  FAILED  \] [A-Z]" $OUT/test_s3.log | head
for r in 1 2 3; do
  for v in 2 3; do
    FLASHGPT_FLASH3_BWD_STAGES=$v timeout 150 build/flashgpt bench-attention --backends flash3 --hs 128 --seq-lens 4096,8192,16384,32768,65536 \
      --iters 10 --warmup 3 --budget-ms 1500 --warmup-ms 500 > $OUT/ab_s${v}_$r.log 2>&1
    S+=("$(t "stages $v r$r rc=$?")")
  done
done
echo "== A/B: median ratio 3 stages / 2 over 3 rounds (fwd, bwd, f+b) =="
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
    a, b = rd("%s/ab_s2_%d.log" % (o, r)), rd("%s/ab_s3_%d.log" % (o, r))
    for k in a:
        if k in b: rows.setdefault(k, []).append((a[k], b[k]))
for k, v in sorted(rows.items(), key=lambda kv: (kv[0][0], int(kv[0][1]), int(kv[0][2]))):
    med = [sorted(y[i] / x[i] for x, y in v)[len(v) // 2] for i in range(3)]
    base = [sorted(x[i] for x, y in v)[len(v) // 2] for i in range(3)]
    bw = " ".join("%.0f->%.0f" % (x[1], y[1]) for x, y in v)
    print("%-6s HS %3s T %6s  2 stages f/b/fb %4.0f %4.0f %4.0f  ratio %.3f %.3f %.3f  bwd %s" % (k + tuple(base) + tuple(med) + (bw,)))
PY
echo "== summary =="; printf '%s\n' "${S[@]}"
