#!/bin/bash
# Device run 101 (1 GPU), session 12: bench_attention.py with the time-based warm-up
# (--warmup-ms 500, ours and torch alike) against the old count-only warm-up (--warmup-ms 0),
# flash3 against SDPA FA2 and cuDNN, run 68's shapes; rounds interleaved old/new/new.
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
t() { echo "[$(( $(date +%s) - START )) s] $*"; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p build; cp $B/flashgpt build/
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms 200 > $OUT/smi.csv &
SMI=$!
S=()
for cfg in old0:0 new1:500 new2:500; do
  name=${cfg%%:*}; wms=${cfg##*:}
  timeout 280 python3 scripts/bench_attention.py --binary build/flashgpt --backends flash3 \
    --torch-backends flash,cudnn --hs 64,128 --seq-lens 4096,16384,65536 --causal 1 --iters 10 --warmup 3 \
    --budget-ms 1500 --warmup-ms $wms --out-dir $OUT --csv $OUT/attn_$name.csv > $OUT/attn_$name.log 2>&1
  S+=("$(t "bench_attention.py $name (--warmup-ms $wms) rc=$?")")
done
kill $SMI
python3 - $OUT <<'PY'
import sys
o = sys.argv[1]
rows = {}
names = ("old0", "new1", "new2")
for n in names:
    for line in open("%s/attn_%s.log" % (o, n)):
        x = line.split()
        if len(x) > 12 and x[0] in ("64", "128") and x[5] in ("fwd", "bwd", "fwdbwd"):
            rows.setdefault((int(x[0]), int(x[3]), x[5]), {})[n] = (float(x[6]), float(x[8]), float(x[-1].rstrip("x")))
print("flash3 / cuDNN (flash3 TF/s, cuDNN TF/s): old = --warmup-ms 0, new = 500")
for k in sorted(rows):
    v = rows[k]
    print("HS %3d T %6d %-7s " % k + "  ".join("%s %.2f (%5.1f %5.1f)" % (n, v[n][2], v[n][0], v[n][1]) for n in names if n in v))
PY
echo "== summary =="; printf '%s\n' "${S[@]}"
