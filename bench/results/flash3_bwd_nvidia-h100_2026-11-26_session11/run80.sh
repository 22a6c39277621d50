#!/bin/bash
# Device run 80 (1 GPU), session 11: flash3's backward with the dQ convert fused into the last
# partial of each Q tile (ticket at the step's start, the others' sum loaded back, math finishes). Every GPU test, memcheck on flash3's ragged shapes, then the
# backward A/B in one binary (FLASHGPT_FLASH3_DQ_CONVERT=kernel is the convert kernel, as before).
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
t() { echo "[$(( $(date +%s) - START )) s] $*"; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p build; cp $B/flashgpt $B/test_gpu build/
S=()
timeout 240 build/test_gpu > $OUT/test_gpu.log 2>&1
S+=("$(t "test_gpu rc=$?: $(grep -E '^\[==========\] [0-9]+ tests|^\[  PASSED|^\[  FAILED  \] [0-9]|^\[  SKIPPED \] [0-9]' $OUT/test_gpu.log | tr '\n' ' ')")")
grep -E "^\[  FAILED  \] [A-Z]" $OUT/test_gpu.log | head
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 build/test_gpu \
  --gtest_filter='*flash3_B3_T17_*:*flash3_B1_T1000_NH6*:*flash3*T4097*:Flash3.*:Hopper.LastPartialFinishes' > $OUT/memcheck.log 2>&1
S+=("$(t "memcheck rc=$?: $(grep -E 'ERROR SUMMARY' $OUT/memcheck.log | tail -n 1), $(grep -cE '^\[       OK' $OUT/memcheck.log) ok")")
for r in 1 2; do
  for mode in kernel fused; do
    if [ $mode = kernel ]; then export FLASHGPT_FLASH3_DQ_CONVERT=kernel; else unset FLASHGPT_FLASH3_DQ_CONVERT; fi
    timeout 80 build/flashgpt bench-attention --backends flash3 --hs 64,128 --seq-lens 1024,4096,16384,65536 \
      --iters 10 --warmup 3 --budget-ms 1000 > $OUT/ab_${mode}_$r.log 2>&1
    S+=("$(t "$mode r$r rc=$?")")
  done
done
unset FLASHGPT_FLASH3_DQ_CONVERT
timeout 60 build/flashgpt bench-attention --backends flash3 --hs 64,128 --seq-lens 4096,16384 --iters 10 --warmup 3 --deterministic > $OUT/det.log 2>&1
S+=("$(t "det rc=$?: $(grep ^flash3 $OUT/det.log | awk '{print $2"/"$6, $13}' | tr '\n' ' ')")")
echo "== A/B: backward TF/s and f+b TF/s, kernel -> fused per round =="
python3 - $OUT <<'PY'
import sys
o = sys.argv[1]
def rd(f):
    d = {}
    for l in open(f):
        x = l.split()
        if x and x[0] == "flash3" and len(x) > 15: d[(x[1], x[5])] = (float(x[12]), float(x[15]), float(x[9]))
    return d
for r in (1, 2):
    k, f = rd("%s/ab_kernel_%d.log" % (o, r)), rd("%s/ab_fused_%d.log" % (o, r))
    for key in k:
        if key in f:
            print("r%d HS %s T %6s  bwd %6.1f -> %6.1f (%+5.1f%%)  f+b %6.1f -> %6.1f (%+5.1f%%)  fwd %6.1f %6.1f" % (
                r, key[0], key[1], k[key][0], f[key][0], 100 * (f[key][0] / k[key][0] - 1),
                k[key][1], f[key][1], 100 * (f[key][1] / k[key][1] - 1), k[key][2], f[key][2]))
PY
timeout 150 python3 scripts/bench_attention.py --binary build/flashgpt --backends flash3 \
  --torch-backends cudnn --hs 64,128 --seq-lens 4096,16384,65536 --causal 1 --iters 10 --warmup 3 \
  --budget-ms 1500 --out-dir $OUT --csv $OUT/attn.csv > $OUT/attn.log 2>&1
S+=("$(t "bench_attention.py rc=$?")")
grep -E "^ *(64|128) .*(fwd|bwd|fwdbwd) " $OUT/attn.log
echo "== summary =="; printf '%s\n' "${S[@]}"
