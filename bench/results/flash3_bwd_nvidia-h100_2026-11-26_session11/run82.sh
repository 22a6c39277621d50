#!/bin/bash
# Device run 82 (1 GPU), session 11: flash3's backward with each step's S^T and dP^T issued at the
# end of the step before, under its dK (FLASHGPT_FLASH3_BWD=pipe) against the default (dqfirst),
# one binary; ptxas reports spills for pipe, so also where they are (cuobjdump -sass).
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
t() { echo "[$(( $(date +%s) - START )) s] $*"; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p build; cp $B/flashgpt $B/test_gpu build/
S=()
FLASHGPT_FLASH3_BWD=pipe timeout 200 build/test_gpu --gtest_filter='*flash3*:*Flash3*' > $OUT/test_pipe.log 2>&1
S+=("$(t "test_gpu pipe rc=$?: $(grep -E '^\[==========\] [0-9]+ tests|^\[  PASSED|^\[  FAILED  \] [0-9]' $OUT/test_pipe.log | tr '\n' ' ')")")
grep -E "^\[  FAILED  \] [A-Z]" $OUT/test_pipe.log | head
for r in 1 2 3; do
  for v in dqfirst pipe; do
    FLASHGPT_FLASH3_BWD=$v timeout 80 build/flashgpt bench-attention --backends flash3 --hs 64,128 --seq-lens 1024,4096,16384,65536 \
      --iters 10 --warmup 3 --budget-ms 1000 > $OUT/ab_${v}_$r.log 2>&1
    S+=("$(t "$v r$r rc=$?")")
  done
done
echo "== A/B backward TF/s, dqfirst -> pipe per round =="
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
    a, b = rd("%s/ab_dqfirst_%d.log" % (o, r)), rd("%s/ab_pipe_%d.log" % (o, r))
    for k in a:
        rows.setdefault(k, []).append((a[k], b.get(k, 0)))
for k, v in rows.items():
    rat = sorted(y / x for x, y in v)
    print("HS %4s T %6s  %s  median ratio %.3f" % (k[0], k[1], "  ".join("%6.1f->%6.1f" % p for p in v), rat[len(rat) // 2]))
PY
cuobjdump -sass build/flashgpt 2>&1 | python3 -c "$(cat <<'PY'
import sys,re
cur=None; n={}
for l in sys.stdin:
    m=re.search(r"Function : (\S+)", l)
    if m: cur=m.group(1); n[cur]=[0,0,0]; continue
    if cur and "STL" in l: n[cur][0]+=1
    if cur and "LDL" in l: n[cur][1]+=1
    if cur and "HGMMA" in l: n[cur][2]+=1
for k,v in n.items():
    if "flash3_bwd" in k: print("STL %d LDL %d HGMMA %d  %s" % (v[0], v[1], v[2], k[:90]))
PY
)"
echo "== summary =="; printf '%s\n' "${S[@]}"
