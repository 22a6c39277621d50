#!/bin/bash
# Device run 99 (1 GPU), session 12: why flash3's HS 128 forward falls from 1.08x cuDNN at T 16K
# to 0.99x at 64K (and the backward from ~1.0 to 0.98): DRAM bytes, L2 hit rate, SM clock and
# tensor-pipe activity of both main kernels at T 16K and 64K (B 1, 16 heads, causal bf16).
cd "$(dirname "$0")/.."
B=.carry/bin
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p build; cp $B/flashgpt build/
M="--metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,sm__cycles_elapsed.avg.per_second,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__cycles_active.avg,smsp__inst_executed.sum"
cat > /tmp/cudnn.py <<'PY'
import sys, torch, torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
T = int(sys.argv[1]); B, NH, hs = 1, 16, 128
qkv = torch.randn(B, T, 3, NH, hs, device="cuda", dtype=torch.bfloat16)
q, k, v = (qkv[:, :, i].transpose(1, 2).detach().requires_grad_() for i in range(3))
dout = torch.randn(B, T, NH, hs, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    for _ in range(3):
        torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, is_causal=True), (q, k, v), dout)
torch.cuda.synchronize()
PY
for T in 16384 65536; do
  timeout 150 ncu --clock-control none $M -k regex:flash3_fwd --launch-skip 2 --launch-count 1 build/flashgpt bench-attention --backends flash3 --hs 128 --seq-lens $T --iters 3 --warmup 1 > $OUT/fwd_ours_$T.txt 2>&1
  timeout 150 ncu --clock-control none $M -k regex:fprop --launch-skip 1 --launch-count 1 python3 /tmp/cudnn.py $T > $OUT/fwd_cudnn_$T.txt 2>&1
  timeout 150 ncu --clock-control none $M -k regex:flash3_bwd_kernel --launch-skip 1 --launch-count 1 build/flashgpt bench-attention --backends flash3 --hs 128 --seq-lens $T --iters 2 --warmup 1 > $OUT/bwd_ours_$T.txt 2>&1
  timeout 150 ncu --clock-control none $M -k regex:bprop --launch-skip 1 --launch-count 1 python3 /tmp/cudnn.py $T > $OUT/bwd_cudnn_$T.txt 2>&1
done
python3 - $OUT <<'PY'
import sys, re, os
o = sys.argv[1]
def parse(f):
    d = {}
    if not os.path.exists(f): return d
    for l in open(f):
        x = l.split()
        if len(x) >= 2 and re.match(r"^[\d,.]+$", x[-1]) and re.match(r"^(gpu|dram|lts|sm|smsp)__", x[0]):
            d[x[0]] = (x[1] if len(x) > 2 else "", float(x[-1].replace(",", "")))
    return d
for T in (16384, 65536):
    for pas in ("fwd", "bwd"):
        a, b = parse("%s/%s_ours_%d.txt" % (o, pas, T)), parse("%s/%s_cudnn_%d.txt" % (o, pas, T))
        print("== %s T %d: metric, unit, flash3, cuDNN" % (pas, T))
        for k in sorted(set(a) | set(b)):
            print("  %-70s %-8s %16.3f %16.3f" % (k, (a.get(k) or b.get(k))[0], a.get(k, ("", -1))[1], b.get(k, ("", -1))[1]))
PY
grep -h "==PROF==\|Error\|error" $OUT/*.txt | sort | uniq -c | head
