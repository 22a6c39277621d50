#!/bin/bash
# Device run 84 (1 GPU), session 11: cuDNN's SDPA kernels' launch shapes (grid, block, registers,
# shared memory) from a torch.profiler chrome trace, HS 64 and 128, T 4K and 16K.
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
python3 - $OUT <<'PY' 2>&1 | grep -v Warning | tee $OUT/cudnn_shapes.log
import sys, json, torch, torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import profile, ProfilerActivity
out = sys.argv[1]
for hs, NH in ((128, 16), (64, 12)):
  for T in (4096, 16384):
    B = 16384 // T
    qkv = torch.randn(B, T, 3, NH, hs, device="cuda", dtype=torch.bfloat16)
    q, k, v = (qkv[:, :, i].transpose(1, 2).detach().requires_grad_() for i in range(3))
    dout = torch.randn(B, T, NH, hs, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        for _ in range(3): torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, is_causal=True), (q, k, v), dout)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, is_causal=True), (q, k, v), dout)
            torch.cuda.synchronize()
    f = "%s/trace_%d_%d.json" % (out, hs, T)
    prof.export_chrome_trace(f)
    ev = json.load(open(f))["traceEvents"]
    print("== HS %d T %d B %d" % (hs, T, B))
    for e in ev:
        if e.get("cat") == "kernel":
            a = e.get("args", {})
            print("  %-60s dur %8.1f us grid %s block %s regs %s smem %s+%s blocks/SM %s occ %s" % (
                e["name"][:60], e["dur"], a.get("grid"), a.get("block"), a.get("registers per thread"),
                a.get("shared memory"), a.get("dynamic shared memory", a.get("static shared memory")),
                a.get("blocks per SM"), a.get("est. achieved occupancy %")))
    import os; os.remove(f)
PY
