#!/bin/bash
# Device run 100 (1 GPU), session 12: clocks and power while flash3's and cuDNN's HS 128 T 16K
# backward run back to back for ~1.5 s each (the benchmark's regime), nvidia-smi every 50 ms.
cd "$(dirname "$0")/.."
B=.carry/bin
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p build; cp $B/flashgpt build/
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.sw_power_cap,clocks_event_reasons.hw_slowdown,clocks_event_reasons.sw_thermal_slowdown --format=csv,noheader -lms 50 > $OUT/smi.csv &
SMI=$!
cat > /tmp/cudnn_loop.py <<'PY'
import sys, time, torch, torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
B, T, NH, hs = 1, 16384, 16, 128
qkv = torch.randn(B, T, 3, NH, hs, device="cuda", dtype=torch.bfloat16)
q, k, v = (qkv[:, :, i].transpose(1, 2).detach().requires_grad_() for i in range(3))
dout = torch.randn(B, T, NH, hs, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    for _ in range(5): torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.time(); e0.record()
    n = 300
    for _ in range(n): torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
    e1.record(); torch.cuda.synchronize(); t1 = time.time()
    print("cudnn bwd loop: %.3f ms per backward, wall %.3f-%.3f" % (e0.elapsed_time(e1) / n, t0, t1))
PY
sleep 1
for r in 1 2; do
  s=$(date +%s.%N); timeout 60 build/flashgpt bench-attention --backends flash3 --hs 128 --seq-lens 16384 --iters 250 --warmup 3 > $OUT/ours_$r.log 2>&1; e=$(date +%s.%N)
  echo "ours $r $s $e $(grep ^flash3 $OUT/ours_$r.log | awk '{print "fwd", $8, "bwd", $10, "fb", $12}')" | tee -a $OUT/marks.txt
  sleep 2
  s=$(date +%s.%N); timeout 60 python3 /tmp/cudnn_loop.py > $OUT/cudnn_$r.log 2>&1; e=$(date +%s.%N)
  echo "cudnn $r $s $e $(cat $OUT/cudnn_$r.log | tail -1)" | tee -a $OUT/marks.txt
  sleep 2
done
kill $SMI
python3 - $OUT <<'PY'
import sys, datetime
o = sys.argv[1]
smi = []
for l in open(o + "/smi.csv"):
    x = [y.strip() for y in l.split(",")]
    try:
        t = datetime.datetime.strptime(x[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        smi.append((t, float(x[1].split()[0]), float(x[2].split()[0]), float(x[3]), x[4], x[5], x[6]))
    except Exception as e: pass
for l in open(o + "/marks.txt"):
    x = l.split(); s, e = float(x[2]), float(x[3])
    # the busy part: samples with power > 300 W inside the window
    w = [y for y in smi if s <= y[0] <= e and y[2] > 300]
    if not w: print(x[0], x[1], "no samples"); continue
    print("%-5s %s: %3d busy samples, clock %4.0f MHz (min %4.0f), power %3.0f W (max %3.0f), temp %2.0f C, power-cap %d%%  %s" % (x[0], x[1], len(w), sum(y[1] for y in w) / len(w), min(y[1] for y in w), sum(y[2] for y in w) / len(w), max(y[2] for y in w), sum(y[3] for y in w) / len(w), 100 * sum(y[4] == "Active" for y in w) // len(w), " ".join(x[4:])))
PY
