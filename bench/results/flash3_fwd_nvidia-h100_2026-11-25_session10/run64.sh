#!/bin/bash
# Device run 64 (1 GPU), session 10: why flash3's HS 128 forward drops from T 16K to 64K
# (run 63: 672 -> 561 TFLOP/s while cuDNN holds 596 -> 608). Power/clock (the same T at more
# batches runs as long as 64K B 1) or L2 (one head's K/V: 8 MB at 16K, 32 MB at 64K)? Benches
# with clocks sampled, and ncu's L2 hit rate and DRAM bytes of the forward kernel.
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
t() { echo "[$(( $(date +%s) - START )) s] $*"; }
S=()
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 200 > $OUT/smi.csv 2>&1 &
SMI=$!
A="--backends flash3 --hs 128 --causal 1 --warmup 3 --iters 10 --budget-ms 600"
for order in heads rows; do
for tk in "16384 16384" "16384 65536" "16384 262144" "32768 32768" "65536 65536"; do
  set -- $tk
  FLASHGPT_FLASH3_ORDER=$order timeout 60 $B/flashgpt bench-attention $A --seq-lens $1 --tokens $2 > $OUT/b_${order}_$1_$2.log 2>&1
  S+=("$(t "$order T $1 tokens $2: $(grep ^flash3 $OUT/b_${order}_$1_$2.log | awk '{print "B", $5, "fwd", $8, "ms", $9, "TF | bwd", $12, "| f+b", $15}')")")
done; done
kill $SMI
for T in 16384 65536; do
timeout 150 ncu --kernel-name regex:flash3_fwd_kernel --launch-count 1 --launch-skip 1 \
  --metrics gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sector_hit_rate.pct,lts__t_sectors_srcunit_tex_op_read.sum,sm__cycles_elapsed.avg.per_second,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active \
  $B/flashgpt bench-attention --backends flash3 --hs 128 --seq-lens $T --tokens 16384 --warmup 1 --iters 3 > $OUT/ncu_$T.log 2>&1
S+=("$(t "ncu T $T rc=$?")")
done
echo "== summary =="; printf '%s\n' "${S[@]}"
for T in 16384 65536; do echo "ncu T $T:"; grep -E "gpu__time|dram__bytes|hit_rate|srcunit_tex|per_second|tensor_op" $OUT/ncu_$T.log | sed 's/  */ /g'; done
python3 - $OUT/smi.csv <<'PY'
import sys
rows = [l.strip().split(", ") for l in open(sys.argv[1]) if l[0].isdigit() or l.startswith("20")]
clk = [int(r[1].split()[0]) for r in rows if len(r) > 2 and r[1].split()[0].isdigit()]
pw = [float(r[2].split()[0]) for r in rows if len(r) > 2 and r[2].split()[0].replace('.','',1).isdigit()]
if clk: print("sm clock MHz: min %d median %d max %d; power W: median %.0f max %.0f (%d samples)" % (min(clk), sorted(clk)[len(clk)//2], max(clk), sorted(pw)[len(pw)//2], max(pw), len(clk)))
thr = {}
for r in rows:
    if len(r) > 4: thr[r[4]] = thr.get(r[4], 0) + 1
print("throttle reasons:", thr)
PY
