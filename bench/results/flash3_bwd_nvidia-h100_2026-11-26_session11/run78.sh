#!/bin/bash
# Device run 78 (1 GPU), session 11: where the HS 128 / HS 64 4K fwd+bwd time goes, ours (ncu kernel
# durations against the bench's event totals) and cuDNN's (torch profiler kernel list).
cd "$(dirname "$0")/.."
B=.carry/bin
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p build; cp $B/flashgpt build/flashgpt
for hs in 128 64; do
  build/flashgpt bench-attention --backends flash3 --hs $hs --seq-lens 4096,16384 --iters 20 --warmup 5 2>&1 | grep -E "^flash3" | tee -a $OUT/bench_ours.log
  timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum --csv --launch-skip 40 --launch-count 30 \
    build/flashgpt bench-attention --backends flash3 --hs $hs --seq-lens 4096 --iters 20 --warmup 5 > $OUT/ncu_$hs.csv 2>$OUT/ncu_$hs.err
  python3 - $OUT/ncu_$hs.csv $hs <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
hdr = rows[0]; rows = rows[1:]
ki = hdr.index("Kernel Name"); vi = hdr.index("Metric Value"); ui = hdr.index("Metric Unit")
d = collections.defaultdict(list)
for r in rows:
    v = float(r[vi].replace(",", "")); v = v / 1000 if r[ui] == "nsecond" else (v if r[ui] == "usecond" else v * 1000)
    d[r[ki][:60]].append(v)
print("HS", sys.argv[2], "ours, ncu us (median, n):")
for k, v in d.items():
    v.sort(); print("  %-60s %9.1f  %d" % (k, v[len(v)//2], len(v)))
PY
done
python3 - <<'PY' 2>&1 | tee $OUT/cudnn_profile.log
import torch, torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import profile, ProfilerActivity
for hs, NH in ((128, 16), (64, 12)):
  for T in (4096, 16384):
    B = 16384 // T
    qkv = torch.randn(B, T, 3, NH, hs, device="cuda", dtype=torch.bfloat16)
    q, k, v = (qkv[:, :, i].transpose(1, 2).detach().requires_grad_() for i in range(3))
    dout = torch.randn(B, T, NH, hs, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        for _ in range(5): torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, is_causal=True), (q, k, v), dout)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(10): torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, is_causal=True), (q, k, v), dout)
            torch.cuda.synchronize()
    print("== cuDNN f+b HS %d T %d: 10 iterations" % (hs, T))
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12, max_name_column_width=70))
PY
