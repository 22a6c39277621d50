#!/bin/bash
# Device run 95 (1 GPU), session 12: flash3's backward kDqOne (HS 128: one math warpgroup per step
# computes the whole dQ_i as one m64n128 product, the two taking turns; the other only arrives at
# the dS^T meeting) against the default kDqFirst in the same binary (FLASHGPT_FLASH3_BWD).
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
t() { echo "[$(( $(date +%s) - START )) s] $*"; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p build; cp $B/flashgpt $B/test_gpu build/
S=()
FLASHGPT_FLASH3_BWD=dqone timeout 200 build/test_gpu --gtest_filter='*flash3*:*Flash3*:*RingAttention*:*Flash*' > $OUT/test_dqone.log 2>&1
S+=("$(t "test_gpu dqone rc=$?: $(grep -E '^\[==========\] [0-9]+ tests|^\[  PASSED|^\[  FAILED  \] [0-9]|^\[  SKIPPED \] [0-9]' $OUT/test_dqone.log | tr '\n' ' ')")")
grep -E "^\[  FAILED  \] [A-Z]" $OUT/test_dqone.log | head
FLASHGPT_FLASH3_BWD=dqone timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 build/test_gpu \
  --gtest_filter='*flash3_B3_T17_*:*flash3_B1_T1000_NH6*:*flash3*T4097*' > $OUT/memcheck.log 2>&1
S+=("$(t "memcheck dqone rc=$?: $(grep -E 'ERROR SUMMARY' $OUT/memcheck.log | tail -n 1), $(grep -cE '^\[       OK' $OUT/memcheck.log) ok")")
for r in 1 2 3; do
  for v in dqfirst dqone; do
    FLASHGPT_FLASH3_BWD=$v timeout 90 build/flashgpt bench-attention --backends flash3 --hs 128 --seq-lens 1024,4096,16384,65536 \
      --iters 10 --warmup 3 --budget-ms 1000 > $OUT/ab_${v}_$r.log 2>&1
    S+=("$(t "$v r$r rc=$?")")
  done
done
echo "== A/B: median ratio dqone/dqfirst over 3 rounds (fwd, bwd, f+b) =="
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
    a, b = rd("%s/ab_dqfirst_%d.log" % (o, r)), rd("%s/ab_dqone_%d.log" % (o, r))
    for k in a:
        if k in b: rows.setdefault(k, []).append((a[k], b[k]))
for k, v in sorted(rows.items(), key=lambda kv: (kv[0][0], int(kv[0][1]), int(kv[0][2]))):
    med = [sorted(y[i] / x[i] for x, y in v)[len(v) // 2] for i in range(3)]
    base = [sorted(x[i] for x, y in v)[len(v) // 2] for i in range(3)]
    bw = " ".join("%.0f->%.0f" % (x[1], y[1]) for x, y in v)
    print("%-6s HS %3s T %6s  base f/b/fb %4.0f %4.0f %4.0f  ratio %.3f %.3f %.3f  bwd %s" % (k + tuple(base) + tuple(med) + (bw,)))
PY
FLASHGPT_FLASH3_BWD=dqone timeout 150 python3 scripts/bench_attention.py --binary build/flashgpt --backends flash3 \
    --torch-backends cudnn --hs 128 --seq-lens 4096,16384,65536 --causal 1 --iters 10 --warmup 3 \
    --budget-ms 1500 --out-dir $OUT --csv $OUT/attn_dqone.csv > $OUT/attn_dqone.log 2>&1
S+=("$(t "bench_attention.py dqone rc=$?")")
grep -E "^ *128 .*(fwd|bwd|fwdbwd) " $OUT/attn_dqone.log
timeout 100 ncu --clock-control none --metrics smsp__inst_executed.sum,gpu__time_duration.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active -k regex:flash3_bwd_kernel --launch-skip 2 --launch-count 1 build/flashgpt bench-attention --backends flash3 --hs 128 --seq-lens 16384 --iters 3 --warmup 1 2>&1 | grep -E "inst_executed|duration|wavefronts|hmma" | sed 's/^/dqfirst /'
FLASHGPT_FLASH3_BWD=dqone timeout 100 ncu --clock-control none --metrics smsp__inst_executed.sum,gpu__time_duration.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active -k regex:flash3_bwd_kernel --launch-skip 2 --launch-count 1 build/flashgpt bench-attention --backends flash3 --hs 128 --seq-lens 16384 --iters 3 --warmup 1 2>&1 | grep -E "inst_executed|duration|wavefronts|hmma" | sed 's/^/dqone /'
echo "== summary =="; printf '%s\n' "${S[@]}"
