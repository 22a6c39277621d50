#!/bin/bash
# Device run 46 (1 GPU), session 8: flash3 backward loader issues its TMA loads before the LSE/D
# rows (new binary) against the old order (flashgpt_base = HEAD's kernels), and 3 (Q, dO) stages
# (FLASHGPT_FLASH3_BWD_STAGES=3, HS 128 only) against 2; tests of both; then where the math warps
# stall (ncu source counters, HS 128 T 16K).
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
t() { echo "[$(( $(date +%s) - START )) s] $*"; }
S=()
for st in 2 3; do
  FLASHGPT_FLASH3_BWD_STAGES=$st timeout 200 $B/test_gpu --gtest_filter='*flash3*:*Flash3*' > $OUT/test_s$st.log 2>&1
  S+=("$(t "tests stages $st rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' $OUT/test_s$st.log | tr '\n' ' ')")")
  grep -E "^\[  FAILED" $OUT/test_s$st.log | head -5
done
FLASHGPT_FLASH3_BWD_STAGES=3 timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 $B/test_gpu \
  --gtest_filter='*flash3_B3_T17_*:*flash3_B1_T1000_NH6*' > $OUT/memcheck_s3.log 2>&1
S+=("$(t "memcheck s3 rc=$?: $(grep -E 'ERROR SUMMARY' $OUT/memcheck_s3.log | tail -n 1), $(grep -cE '^\[       OK' $OUT/memcheck_s3.log) ok")")
A="--hs 64,128 --seq-lens 4096,16384,65536 --causal 1 --warmup 3 --iters 20"
for round in 1 2; do
  timeout 100 $B/flashgpt_base bench-attention --backends flash3 $A > $OUT/bench_base_$round.log 2>&1; S+=("$(t "bench base $round rc=$?")")
  timeout 100 $B/flashgpt bench-attention --backends flash3 $A > $OUT/bench_s2_$round.log 2>&1; S+=("$(t "bench s2 $round rc=$?")")
  FLASHGPT_FLASH3_BWD_STAGES=3 timeout 100 $B/flashgpt bench-attention --backends flash3 $A > $OUT/bench_s3_$round.log 2>&1; S+=("$(t "bench s3 $round rc=$?")")
done
timeout 150 ncu --section SourceCounters --section WarpStateStats -k regex:flash3_bwd --launch-skip 1 --launch-count 1 -o $OUT/prof \
  $B/flashgpt bench-attention --backends flash3 --hs 128 --seq-lens 16384 --causal 1 --warmup 1 --iters 1 > $OUT/ncu_run.log 2>&1
S+=("$(t "ncu rc=$?")")
ncu -i $OUT/prof.ncu-rep --page details > $OUT/ncu_details.txt 2>&1
ncu -i $OUT/prof.ncu-rep --page source --csv --print-source sass > $OUT/sass.csv 2>&1
python3 - "$OUT/sass.csv" > $OUT/stalls.txt 2>&1 <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
hdr_i = next(i for i, r in enumerate(rows) if any("Sampling" in c for c in r))
hdr = rows[hdr_i]; body = [r for r in rows[hdr_i + 1:] if len(r) == len(hdr)]
print("columns:", " | ".join(hdr))
ci = next(i for i, c in enumerate(hdr) if "Sampling (All" in c)
src = next((i for i, c in enumerate(hdr) if c.strip().lower() == "source"), 1)
num = lambda x: float(x.replace(",", "") or 0)
tot = sum(num(r[ci]) for r in body) or 1
print("total samples", tot)
stall_cols = [i for i, c in enumerate(hdr) if c.startswith("stall_") or "Stall" in c and i != ci]
for r in sorted(body, key=lambda r: -num(r[ci]))[:40]:
    extra = sorted(((num(r[i]), hdr[i]) for i in stall_cols if r[i].replace('.', '').replace(',', '').isdigit()), reverse=True)[:3]
    print("%5.1f%%  %-60s %s" % (100 * num(r[ci]) / tot, r[src][:60], extra))
PY
rm -f $OUT/prof.ncu-rep $OUT/sass.csv
echo "== summary =="; printf '%s\n' "${S[@]}"
for v in base s2 s3; do for r in 1 2; do echo "-- $v $r"; grep -E "^flash3" $OUT/bench_${v}_$r.log | cut -c1-100; done; done
grep -iE "stall|warp cycles|issued|eligible|active warps" $OUT/ncu_details.txt | head -30
head -45 $OUT/stalls.txt | cut -c1-230
