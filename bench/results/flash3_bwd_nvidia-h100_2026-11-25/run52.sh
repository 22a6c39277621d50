#!/bin/bash
# Device run 52 (1 GPU), session 9: flash3 backward in pair groups (flash3_tiles.h
# bwd_pair_group, the smallest group that fills the SMs) and the D / dQ-convert kernels on a
# (t tile, head, sequence) grid (flash_bwd.cu; used by flash and flash3). Every GPU test; ncu
# durations of the three backward kernels (no clock lock, no cache flush); bench against main's
# binary (flashgpt_base), flash3 and flash, 2 interleaved rounds.
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
t() { echo "[$(( $(date +%s) - START )) s] $*"; }
S=()
timeout 330 $B/test_gpu > $OUT/test_gpu.log 2>&1
S+=("$(t "test_gpu rc=$?: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) \] [0-9]' $OUT/test_gpu.log | tr '\n' ' ')")")
grep -E "^\[  FAILED  \] [A-Z]" $OUT/test_gpu.log | head
for bin in flashgpt_base flashgpt; do for cfg in "128 4096" "64 16384"; do set -- $cfg
  timeout 60 ncu --cache-control none --clock-control none --metrics gpu__time_duration.sum \
    -k 'regex:flash_bwd_dot|flash_bwd_dq|flash3_bwd' --launch-skip 6 --launch-count 3 $B/$bin bench-attention \
    --backends flash3 --hs $1 --seq-lens $2 --causal 1 --warmup 2 --iters 2 > $OUT/ncu_${bin}_$1.log 2>&1
  S+=("$(t "ncu $bin HS $1 T $2 rc=$?: D, main, convert $(grep -E 'gpu__time_duration' $OUT/ncu_${bin}_$1.log | awk '{print $3, $2}' | tr '\n' ' ')")")
done; done
A="--hs 64,128 --seq-lens 4096,8192,16384,65536 --causal 1 --warmup 3 --iters 10 --budget-ms 1500"
for round in 1 2; do for bin in flashgpt_base flashgpt; do
  timeout 150 $B/$bin bench-attention --backends flash3,flash $A > $OUT/bench_${bin}_$round.log 2>&1
  S+=("$(t "bench $bin round $round rc=$?")")
done; done
echo "== summary =="; printf '%s\n' "${S[@]}"
python3 - $OUT <<'PY'
import sys, glob, statistics as st, collections
d = collections.defaultdict(list)
for f in sorted(glob.glob(sys.argv[1] + "/bench_*_*.log")):
    v = f.split("bench_")[1].rsplit("_", 1)[0]
    for line in open(f):
        if line.startswith("flash"):
            x = line.split()
            d[(x[0], v, int(x[1]), int(x[5]))].append((float(x[9]), float(x[12]), float(x[15])))
print("TFLOP/s medians of 2 rounds: fwd / bwd / f+b, main (base) -> this tree")
for be in ("flash3", "flash"):
    for hs in (64, 128):
        for T in (4096, 8192, 16384, 65536):
            a, b = d[(be, "flashgpt_base", hs, T)], d[(be, "flashgpt", hs, T)]
            if not a or not b: continue
            m = lambda r, i: st.median(x[i] for x in r)
            print("%-6s %3d %6d | %5.0f %5.0f %5.0f -> %5.0f %5.0f %5.0f | bwd x%.3f f+b x%.3f" % (be, hs, T,
                  m(a,0), m(a,1), m(a,2), m(b,0), m(b,1), m(b,2), m(b,1)/m(a,1), m(b,2)/m(a,2)))
PY
