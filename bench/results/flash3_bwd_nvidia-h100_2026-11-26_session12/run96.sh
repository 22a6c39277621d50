#!/bin/bash
# Device run 96 (1 GPU), session 12: where flash3's HS 128 backward warps wait, against cuDNN's:
# Nsight Compute stall reasons (per issued instruction), tensor pipe and shared-memory wavefronts
# for both main kernels at T 16K (B 1, 16 heads, causal bf16), and flash3's per-SASS-line stall
# samples (SourceCounters).
cd "$(dirname "$0")/.."
B=.carry/bin
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p build; cp $B/flashgpt build/
M="--metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,smsp__inst_executed.sum,gpu__time_duration.sum,sm__cycles_active.avg,smsp__warps_active.avg.per_cycle_active,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum"
timeout 200 ncu --clock-control none $M -k regex:flash3_bwd_kernel --launch-skip 2 --launch-count 1 \
  build/flashgpt bench-attention --backends flash3 --hs 128 --seq-lens 16384 --iters 3 --warmup 1 > $OUT/ncu_ours.txt 2>&1
echo "ours rc=$?"
cat > /tmp/cudnn_bwd.py <<'PY'
import torch, torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
B, T, NH, hs = 1, 16384, 16, 128
qkv = torch.randn(B, T, 3, NH, hs, device="cuda", dtype=torch.bfloat16)
q, k, v = (qkv[:, :, i].transpose(1, 2).detach().requires_grad_() for i in range(3))
dout = torch.randn(B, T, NH, hs, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    for _ in range(4):
        torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, is_causal=True), (q, k, v), dout)
torch.cuda.synchronize()
PY
timeout 200 ncu --clock-control none $M -k regex:bprop --launch-skip 2 --launch-count 1 python3 /tmp/cudnn_bwd.py > $OUT/ncu_cudnn.txt 2>&1
echo "cudnn rc=$?"
python3 - $OUT <<'PY'
import sys, re
o = sys.argv[1]
def parse(f):
    d = {}
    for l in open(f):
        x = l.split()
        if len(x) >= 2 and re.match(r"^[\d,.]+$", x[-1]) and (x[0].startswith("smsp__") or x[0].startswith("sm__") or x[0].startswith("l1tex__") or x[0].startswith("gpu__")):
            d[x[0].replace("smsp__average_warps_issue_stalled_", "stall_").replace("_per_issue_active.ratio", "")] = float(x[-1].replace(",", ""))
    return d
a, b = parse(o + "/ncu_ours.txt"), parse(o + "/ncu_cudnn.txt")
print("%-60s %14s %14s" % ("metric (T 16K HS 128)", "flash3", "cuDNN"))
for k in sorted(set(a) | set(b)):
    va, vb = a.get(k, -1), b.get(k, -1)
    if k.startswith("stall_") and va < 0.05 and vb < 0.05: continue
    print("%-60s %14.3f %14.3f" % (k[:60], va, vb))
PY
timeout 250 ncu --clock-control none --section SourceCounters --section WarpStateStats -k regex:flash3_bwd_kernel --launch-skip 2 --launch-count 1 \
  -o $OUT/src build/flashgpt bench-attention --backends flash3 --hs 128 --seq-lens 16384 --iters 3 --warmup 1 > $OUT/ncu_src_run.txt 2>&1
echo "src rc=$?"
ncu -i $OUT/src.ncu-rep --page source --csv --print-source sass > $OUT/src_sass.csv 2>$OUT/src_err.txt
echo "src csv rc=$? lines $(wc -l < $OUT/src_sass.csv)"; head -c 600 $OUT/src_err.txt
python3 - $OUT <<'PY'
import sys, csv
o = sys.argv[1]
rows = list(csv.reader(open(o + "/src_sass.csv")))
hdr_i = next(i for i, r in enumerate(rows) if any("Source" == c for c in r))
hdr = rows[hdr_i]; data = rows[hdr_i + 1:]
print("columns:", " | ".join(hdr)[:1500])
ci = [i for i, c in enumerate(hdr) if "Warp Stall Sampling (All" in c]
src = hdr.index("Source")
if not ci: sys.exit()
c = ci[0]
def num(s):
    try: return float(s.replace(",", ""))
    except: return 0.0
tot = sum(num(r[c]) for r in data if len(r) > c)
print("total samples", tot)
# keep order: print every line with >= 0.4% of samples, with its index (program order)
reasons = [i for i, h in enumerate(hdr) if h.startswith("stall_") or "smsp__pcsamp" in h]
for idx, r in enumerate(data):
    if len(r) > c and num(r[c]) >= 0.004 * tot:
        top = sorted(((num(r[i]), hdr[i]) for i in reasons), reverse=True)[:3]
        print("%5d %5.1f%%  %-60s %s" % (idx, 100 * num(r[c]) / tot, r[src][:60], " ".join("%s=%.0f" % (h.replace("smsp__pcsamp_warps_issue_stalled_", ""), v) for v, h in top if v > 0)))
PY
