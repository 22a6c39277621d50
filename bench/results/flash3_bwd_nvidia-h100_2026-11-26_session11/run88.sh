#!/bin/bash
# Device run 88 (1 GPU), session 11: the executed-instruction mix by SASS opcode of flash3's HS 128
# backward kernel and of cuDNN's (T 4K, B 4, 16 heads): where flash3's 39% more instructions are.
cd "$(dirname "$0")/.."
B=.carry/bin
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p build; cp $B/flashgpt build/
M="--metrics sass__inst_executed_per_opcode,smsp__inst_executed.sum --print-metric-instances details"
timeout 200 ncu --clock-control none $M -k regex:flash3_bwd_kernel --launch-skip 2 --launch-count 1 \
  build/flashgpt bench-attention --backends flash3 --hs 128 --seq-lens 4096 --iters 3 --warmup 1 > $OUT/mix_ours.txt 2>&1
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
timeout 200 ncu --clock-control none $M -k regex:bprop --launch-skip 2 --launch-count 1 python3 /tmp/cudnn_bwd.py > $OUT/mix_cudnn.txt 2>&1
echo "cudnn rc=$?"
python3 - $OUT <<'PY'
import sys, re
o = sys.argv[1]
def parse(f):
    txt = open(f).read()
    i = txt.find("sass__inst_executed_per_opcode")
    j = txt.find("smsp__inst_executed.sum", i)
    body = txt[i:j]
    return {k: int(v.replace(",", "")) for k, v in re.findall(r"([A-Z][A-Z0-9_.]*)\s*:\s*([\d,]+)", body)}
a, b = parse(o + "/mix_ours.txt"), parse(o + "/mix_cudnn.txt")
keys = sorted(set(a) | set(b), key=lambda k: -(a.get(k, 0) - b.get(k, 0)))
print("%-14s %12s %12s %12s" % ("opcode", "flash3", "cuDNN", "diff"))
for k in keys:
    print("%-14s %12d %12d %+12d" % (k, a.get(k, 0), b.get(k, 0), a.get(k, 0) - b.get(k, 0)))
PY
grep -m2 "sass__inst_executed_per_opcode" $OUT/mix_ours.txt | cut -c1-600
