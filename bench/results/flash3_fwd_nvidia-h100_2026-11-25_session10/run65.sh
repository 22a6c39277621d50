#!/bin/bash
# Device run 65 (1 GPU), session 10: HS 128 forward with 3 consumer warpgroups on K/V tiles of
# 64 keys (FLASHGPT_FLASH3_FWD_WG=3; Br 192, Bc 64: 112 registers of O, S, P per consumer),
# with and without the turns (FLASHGPT_FLASH3_FWD=overlap); HS 64's 3 warpgroups without turns.
# Tests with the HS 128 variant; benches interleaved, 3 rounds.
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
t() { echo "[$(( $(date +%s) - START )) s] $*"; }
S=()
FLASHGPT_FLASH3_FWD_WG=3 timeout 120 $B/test_gpu --gtest_filter='*flash3*:*Flash3*' > $OUT/test_wg3.log 2>&1
S+=("$(t "tests wg=3 rc=$?: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' $OUT/test_wg3.log | tr '\n' ' ')")")
grep -E "^\[  FAILED  \] [A-Z]" $OUT/test_wg3.log | head -5
FLASHGPT_FLASH3_FWD_WG=3 FLASHGPT_FLASH3_FWD=overlap timeout 120 $B/test_gpu --gtest_filter='*flash3_B*:Flash3*' > $OUT/test_wg3_overlap.log 2>&1
S+=("$(t "tests wg=3 overlap rc=$?: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' $OUT/test_wg3_overlap.log | tr '\n' ' ')")")
A="--backends flash3 --seq-lens 4096,16384,65536 --causal 1 --warmup 3 --iters 10 --budget-ms 400"
for round in 1 2 3; do
  timeout 60 $B/flashgpt bench-attention $A --hs 128 > $OUT/b128_A_$round.log 2>&1
  FLASHGPT_FLASH3_FWD_WG=3 timeout 60 $B/flashgpt bench-attention $A --hs 128 > $OUT/b128_B_$round.log 2>&1
  FLASHGPT_FLASH3_FWD_WG=3 FLASHGPT_FLASH3_FWD=overlap timeout 60 $B/flashgpt bench-attention $A --hs 128 > $OUT/b128_C_$round.log 2>&1
  timeout 60 $B/flashgpt bench-attention $A --hs 64 > $OUT/b64_D_$round.log 2>&1
  FLASHGPT_FLASH3_FWD=overlap timeout 60 $B/flashgpt bench-attention $A --hs 64 > $OUT/b64_E_$round.log 2>&1
  S+=("$(t "round $round")")
done
echo "== summary =="; printf '%s\n' "${S[@]}"
python3 - $OUT <<'PY'
import sys, glob, statistics as st, collections
d = collections.defaultdict(list)
for f in sorted(glob.glob(sys.argv[1] + "/b*_*_*.log")):
    v = f.rsplit("/", 1)[1].split("_")[1]
    for line in open(f):
        if line.startswith("flash3"):
            x = line.split()
            d[(v, int(x[1]), int(x[5]))].append(float(x[9]))
names = {"A": "HS128 Br128 Bc128 (tree)", "B": "HS128 3WG Bc64 turns", "C": "HS128 3WG Bc64 overlap",
         "D": "HS64 3WG turns (tree)", "E": "HS64 3WG overlap"}
for v in "ABCDE":
    hs = 128 if v in "ABC" else 64
    base = "A" if hs == 128 else "D"
    print("%-26s" % names[v] + " | ".join("T %5d %s (%.0f) x%.3f" % (T, "/".join("%.0f" % x for x in d[(v, hs, T)]),
          st.median(d[(v, hs, T)]), st.median(d[(v, hs, T)]) / st.median(d[(base, hs, T)])) for T in (4096, 16384, 65536) if d[(v, hs, T)]))
PY
