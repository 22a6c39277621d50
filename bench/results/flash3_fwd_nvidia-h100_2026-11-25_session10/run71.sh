#!/bin/bash
# Device run 71 (1 GPU), session 10: flash3 forward with the next work tile's first S issued in
# each tile's last turn (two Q buffers; the S runs under the epilogue), against the committed
# tree's binary (flashgpt_base, 76c8a55). Tests, memcheck; benches interleaved, 3 rounds;
# d12 B 32 x T 1024 train --bench both binaries, 2 rounds.
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
t() { echo "[$(( $(date +%s) - START )) s] $*"; }
S=()
timeout 150 $B/test_gpu --gtest_filter='*flash3*:*Flash3*:*Determin*:*Rope*' > $OUT/test.log 2>&1
S+=("$(t "tests rc=$?: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' $OUT/test.log | tr '\n' ' ')")")
grep -E "^\[  FAILED  \] [A-Z]" $OUT/test.log | head -5
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 $B/test_gpu \
  --gtest_filter='*flash3_B3_T17_*:*flash3_B1_T1000_NH6*:*flash3*T4097*:Flash3.*:*RingAttention*Local*flash3*T4_*' > $OUT/memcheck.log 2>&1
S+=("$(t "memcheck rc=$?: $(grep -E 'ERROR SUMMARY' $OUT/memcheck.log | tail -n 1), $(grep -cE '^\[       OK' $OUT/memcheck.log) ok")")
A="--backends flash3 --hs 64,128 --seq-lens 1024,4096,16384,65536 --causal 1 --warmup 3 --iters 10 --budget-ms 400"
for round in 1 2 3; do for v in base new; do
  bin=$B/flashgpt; [ $v = base ] && bin=$B/flashgpt_base
  timeout 60 $bin bench-attention $A > $OUT/bench_${v}_$round.log 2>&1
  S+=("$(t "bench $v round $round rc=$?")")
done; done
for round in 1 2; do for v in base new; do
  bin=$B/flashgpt; [ $v = base ] && bin=$B/flashgpt_base
  timeout 60 $bin train --bench --device cuda --model d12 --batch 32 --seq-len 1024 --attn flash3 \
    --bench-steps 20 --vocab-size 50257 > $OUT/train_${v}_$round.log 2>&1
  S+=("$(t "train d12 $v round $round rc=$?: $(grep -oE 'median [0-9.]+ ms/step \| [0-9]+ tokens/s' $OUT/train_${v}_$round.log)")")
done; done
echo "== summary =="; printf '%s\n' "${S[@]}"
python3 - $OUT <<'PY'
import sys, glob, statistics as st, collections
d = collections.defaultdict(list)
for f in sorted(glob.glob(sys.argv[1] + "/bench_*_*.log")):
    v = f.rsplit("/", 1)[1].split("_")[1]
    for line in open(f):
        if line.startswith("flash3"):
            x = line.split()
            d[(v, int(x[1]), int(x[5]))].append((float(x[9]), float(x[15])))
print("flash3 fwd TFLOP/s rounds (median) | f+b TF median: base (76c8a55) vs new (prefetched S)")
for hs in (64, 128):
    for T in (1024, 4096, 16384, 65536):
        a, b = d[("base", hs, T)], d[("new", hs, T)]
        if not a or not b: continue
        m = lambda r, i: st.median(x[i] for x in r)
        print("%3d %6d | base %s (%.0f) f+b %.0f | new %s (%.0f) f+b %.0f | fwd x%.3f f+b x%.3f" % (hs, T,
              "/".join("%.0f" % x[0] for x in a), m(a,0), m(a,1), "/".join("%.0f" % x[0] for x in b), m(b,0), m(b,1), m(b,0)/m(a,0), m(b,1)/m(a,1)))
PY
