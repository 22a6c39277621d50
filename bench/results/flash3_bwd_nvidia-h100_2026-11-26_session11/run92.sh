#!/bin/bash
# Device run 92 (1 GPU), session 11's final tree (flash3 backward: descriptors stepped per k-step,
# dS^T by stmatrix at HS 128): every GPU test, memcheck on flash3's ragged shapes, two rounds of
# flash3 against SDPA FA2 and cuDNN (run 68's command), and --deterministic's cost.
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
  --gtest_filter='*flash3_B3_T17_*:*flash3_B1_T1000_NH6*:*flash3*T4097*:Flash3.*' > $OUT/memcheck.log 2>&1
S+=("$(t "memcheck rc=$?: $(grep -E 'ERROR SUMMARY' $OUT/memcheck.log | tail -n 1), $(grep -cE '^\[       OK' $OUT/memcheck.log) ok")")
for r in 1 2; do
  timeout 150 python3 scripts/bench_attention.py --binary build/flashgpt --backends flash,flash3 \
    --torch-backends flash,cudnn --hs 64,128 --seq-lens 4096,16384,65536 --causal 1 --iters 10 --warmup 3 \
    --budget-ms 1500 --out-dir $OUT --csv $OUT/flash3_attention_$r.csv > $OUT/flash3_attention_$r.log 2>&1
  S+=("$(t "bench_attention.py round $r rc=$?")")
done
for det in "" --deterministic; do
  timeout 60 build/flashgpt bench-attention --backends flash3 --hs 64,128 \
    --seq-lens 4096,16384,65536 --iters 10 --warmup 3 --budget-ms 1500 $det > $OUT/det${det:+_on}.log 2>&1
  S+=("$(t "bench-attention $det rc=$?: $(grep ^flash3 $OUT/det${det:+_on}.log | awk '{print $2"/"$6, $13}' | tr '\n' ' ')")")
done
python3 - $OUT <<'PY'
import sys
rows = {}
for r in (1, 2):
    for line in open("%s/flash3_attention_%d.log" % (sys.argv[1], r)):
        x = line.split()
        if len(x) > 14 and x[0] in ("64", "128") and x[5] in ("fwd", "bwd", "fwdbwd"):
            rows.setdefault((int(x[0]), int(x[3]), x[5]), []).append((float(x[7]), float(x[9]), float(x[-1].rstrip("x"))))
print("flash3 / cuDNN per round; flash3 TF/s, cuDNN TF/s (round 1)")
for k in sorted(rows):
    v = rows[k]
    print("HS %3d T %6d %-7s %s   %6.1f %6.1f" % (k + (" ".join("%.2f" % c for a, b, c in v), v[0][0], v[0][1])))
PY
echo "== summary =="; printf '%s\n' "${S[@]}"
