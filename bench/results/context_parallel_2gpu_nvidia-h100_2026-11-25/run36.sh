#!/bin/bash
# Device run 36 (1 GPU), session 6: is the full chunk pair's backward slower per FLOP than the
# causal one at fixed clocks? ncu at base clocks (its default clock control), duration only (one
# pass), of every flash_bwd_wg_kernel launch of bench-attention --cp 2 (plain causal first, then
# the virtual ring's launches) at T = 512K and 256K, 12 heads, HS 64. If the rectangle matches
# the causal kernel per FLOP at locked clocks, the 2-GPU gap is clocks/power; if not, a kernel
# or memory effect. ~3-4 min.
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p build; cp $B/flashgpt build/
t() { echo "[$(( $(date +%s) - START )) s] $*"; }
for T in 262144 524288; do
  timeout $([ $T = 262144 ] && echo 70 || echo 125) ncu --kernel-name regex:flash_bwd_wg --metrics gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second \
    --csv --print-units base build/flashgpt bench-attention --backends flash --hs 64 --heads 12 --seq-lens $T --tokens 1 \
    --warmup 0 --iters 1 --budget-ms 1 --cp 2 > $OUT/ncu_$T.csv 2> $OUT/ncu_$T.err
  t "ncu T=$T rc=$?"
  python3 - $OUT/ncu_$T.csv $T <<'PY'
import csv, sys
T = int(sys.argv[2]); rows = {}
lines = [l for l in open(sys.argv[1]) if l.startswith('"')]
for r in csv.DictReader(lines):
    k = r['ID']; d = rows.setdefault(k, {'grid': r['Grid Size']})
    d[r['Metric Name']] = float(r['Metric Value'].replace(',', ''))
print(f"T={T}: launch, grid, ms, GHz, ms per unit (unit = one c x c full pair, c = T/4)")
for k, d in rows.items():
    g = [int(x) for x in d['grid'].strip('()').split(',')]
    tiles = g[1] * 128  # key rows of the problem
    ms = d.get('gpu__time_duration.sum', 0) / 1e6
    # plain causal T: 8 units; ring: own causal 2c = 2 units; rect 2c x c or c x 2c = 2 units
    kind = 'plain causal T' if tiles >= T else ('ring 2c keys (own causal or c x 2c)' if tiles >= T // 2 else 'ring c keys (2c x c rect)')
    units = 8 if tiles >= T else 2
    print(f"  {k:>3} {d['grid']:>16} {ms:10.1f} {d.get('sm__cycles_elapsed.avg.per_second', 0)/1e9:5.2f} {ms/units:9.1f}  {kind}")
PY
done
grep -h -E "flash" $OUT/ncu_*.csv | grep -v '^"' | head -8
