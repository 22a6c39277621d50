#!/bin/bash
# Device run 87 (1 GPU), session 11: Nsight Compute on flash3's HS 128 backward kernel and on
# cuDNN's (T 4K, B 4, 16 heads, causal bf16), the same sections, clocks left alone: what differs.
cd "$(dirname "$0")/.."
B=.carry/bin
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p build; cp $B/flashgpt build/
SEC="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats --section InstructionStats --section SchedulerStats --section LaunchStats --section Occupancy"
timeout 200 ncu --clock-control none $SEC -k regex:flash3_bwd_kernel --launch-skip 2 --launch-count 1 \
  build/flashgpt bench-attention --backends flash3 --hs 128 --seq-lens 4096 --iters 3 --warmup 1 > $OUT/ncu_ours.txt 2>&1
echo "ours rc=$?"
cat > /tmp/cudnn_bwd.py <<'PY'
import torch, torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
B, T, NH, hs = 4, 4096, 16, 128
qkv = torch.randn(B, T, 3, NH, hs, device="cuda", dtype=torch.bfloat16)
q, k, v = (qkv[:, :, i].transpose(1, 2).detach().requires_grad_() for i in range(3))
dout = torch.randn(B, T, NH, hs, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    for _ in range(4):
        torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, is_causal=True), (q, k, v), dout)
torch.cuda.synchronize()
PY
timeout 200 ncu --clock-control none $SEC -k regex:bprop --launch-skip 2 --launch-count 1 python3 /tmp/cudnn_bwd.py > $OUT/ncu_cudnn.txt 2>&1
echo "cudnn rc=$?"
python3 - $OUT <<'PY'
import sys, re
o = sys.argv[1]
def parse(f):
    d = {}
    for l in open(f):
        m = re.match(r"\s{4,}(\S.*?\S)\s{2,}(\S+)\s+([\d,.]+)\s*$", l)
        if m: d.setdefault(m.group(1) + " [" + m.group(2) + "]", m.group(3))
        else:
            m = re.match(r"\s{4,}(\S.*?\S)\s{2,}([\d,.]+)\s*$", l)
            if m: d.setdefault(m.group(1), m.group(2))
    return d
a, b = parse(o + "/ncu_ours.txt"), parse(o + "/ncu_cudnn.txt")
print("%-58s %14s %14s" % ("metric", "flash3", "cuDNN"))
for k in a:
    if k in b: print("%-58s %14s %14s" % (k[:58], a[k], b[k]))
PY
