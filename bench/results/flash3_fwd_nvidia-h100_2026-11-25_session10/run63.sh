#!/bin/bash
# Device run 63 (1 GPU), session 10: flash3 forward with 3 consumer warpgroups at HS 64 (Br 192,
# FlashAttention-3's tile there) and end-aligned row tiles (a ragged tile first); 
# FLASHGPT_FLASH3_FWD_WG=2 runs Br 128 in the same binary. Tests both ways, memcheck; benches
# interleaved, 3 rounds; bench_attention.py with cuDNN (HS 64 and 128).
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
t() { echo "[$(( $(date +%s) - START )) s] $*"; }
S=()
for v in 3 2; do
FLASHGPT_FLASH3_FWD_WG=$v timeout 120 $B/test_gpu --gtest_filter='*flash3*:*Flash3*:*Determin*:*Rope*' > $OUT/test_wg$v.log 2>&1
S+=("$(t "tests wg=$v rc=$?: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' $OUT/test_wg$v.log | tr '\n' ' ')")")
grep -E "^\[  FAILED  \] [A-Z]" $OUT/test_wg$v.log | head -5
done
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 $B/test_gpu \
  --gtest_filter='*flash3_B3_T17_*:*flash3_B1_T1000_NH6*:*flash3*T4097*:Flash3.*' > $OUT/memcheck.log 2>&1
S+=("$(t "memcheck wg=3 rc=$?: $(grep -E 'ERROR SUMMARY' $OUT/memcheck.log | tail -n 1), $(grep -cE '^\[       OK' $OUT/memcheck.log) ok")")
A="--hs 64 --seq-lens 1024,4096,8192,16384,65536 --causal 1 --warmup 3 --iters 10 --budget-ms 600"
for round in 1 2 3; do for v in 2 3; do
  FLASHGPT_FLASH3_FWD_WG=$v timeout 60 $B/flashgpt bench-attention --backends flash3 $A > $OUT/bench_wg${v}_$round.log 2>&1
  S+=("$(t "bench wg=$v round $round rc=$?")")
done; done
timeout 240 python3 scripts/bench_attention.py --binary $B/flashgpt --backends flash3 --torch-backends cudnn \
  --hs 64,128 --seq-lens 4096,16384,65536 --causal 1 --iters 10 --warmup 3 --budget-ms 1000 \
  --csv $OUT/torch.csv > $OUT/torch.log 2>&1
S+=("$(t "bench_attention.py rc=$?")")
echo "== summary =="; printf '%s\n' "${S[@]}"
grep -E "^torch-cudnn|^flash3" $OUT/torch.log | awk '$1=="flash3"{print $1, "HS", $2, "T", $6, "fwd", $9, "bwd", $12, "f+b", $15} $1!="flash3"{print $1, "HS", $3, "T", $9, "fwd", $16, "bwd", $21, "f+b", $26}'
python3 - $OUT <<'PY'
import sys, glob, statistics as st, collections
d = collections.defaultdict(list)
for f in sorted(glob.glob(sys.argv[1] + "/bench_wg*_*.log")):
    v = f.split("bench_wg")[1].rsplit("_", 1)[0]
    for line in open(f):
        if line.startswith("flash3"):
            x = line.split()
            d[(v, int(x[1]), int(x[5]))].append((float(x[9]), float(x[12]), float(x[15])))
print("flash3 HS 64 fwd TFLOP/s rounds (median) | f+b median: wg=2 (Br 128) vs wg=3 (Br 192)")
for T in (1024, 4096, 8192, 16384, 65536):
    a, b = d[("2", 64, T)], d[("3", 64, T)]
    if not a or not b: continue
    m = lambda r, i: st.median(x[i] for x in r)
    print("%6d | wg2 %s (%.0f) f+b %.0f | wg3 %s (%.0f) f+b %.0f | fwd x%.3f f+b x%.3f" % (T,
          "/".join("%.0f" % x[0] for x in a), m(a,0), m(a,2), "/".join("%.0f" % x[0] for x in b), m(b,0), m(b,2), m(b,0)/m(a,0), m(b,2)/m(a,2)))
PY
