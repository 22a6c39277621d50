#!/usr/bin/env python3
"""bench_train.py — flashgpt's training step against PyTorch's on the same GPU, in one run.

Runs `flashgpt train --bench` (random tokens, median ms/step after warm-up) for each of our
attention backends, and a PyTorch GPT-2 of the identical configuration (bf16 autocast, fused
AdamW, grad-norm clipping, tied LM head, GELU-tanh MLP): eager with SDPA's MATH, FLASH or cuDNN
backend, or torch.compile'd ("compile-cudnn", "compile-flash": the SDPA backend chosen by the
global torch.backends.cuda flags, so the compiled graph has no context manager inside;
"compile-max-cudnn": mode="max-autotune-no-cudagraphs", Inductor's own GEMM tuning, minutes of
compile; "compile-graphs-cudnn": mode="reduce-overhead", the compiled step replayed as CUDA
graphs). Ours replays each forward and backward as a CUDA graph by default; "+eager" turns
that off (`train --no-cuda-graphs`). Prints tokens/s and our ratios, and writes runs/bench/train_<gpu>_<date>.csv (--out)
(first lines: the command, the GPU and the date).

  python3 scripts/bench_train.py                       # d12 (GPT-2 124M), B=32, T=1024
  python3 scripts/bench_train.py --model d6 --batch 8 --seq-len 512 --ours naive,flash
  python3 scripts/bench_train.py --ours flash3,flash --torch flash,cudnn,compile-cudnn
  python3 scripts/bench_train.py --ours flash3,flash3+tuned --torch compile-cudnn   # +tuned: --tune-matmul
"""
import argparse
import datetime
import math
import os
import re
import subprocess
import sys
import time

PRESETS = {"tiny": (4, 128, 4), "d6": (6, 384, 6), "d12": (12, 768, 12), "d24": (24, 1024, 16),
           "d36": (36, 1280, 20), "d48": (48, 1600, 25)}


def run_ours(binary, attn, a):
    """attn: a backend, or backend+tuned for `train --tune-matmul` (timed cuBLASLt algorithms), or
    backend+eager for `train --no-cuda-graphs` (every kernel launched, no graph replays)."""
    backend, _, extra = attn.partition("+")
    flags = {"": [], "tuned": ["--tune-matmul"], "eager": ["--no-cuda-graphs"]}
    if extra not in flags:
        sys.exit(f"bench_train.py: --ours {attn}: the suffixes are +tuned and +eager (e.g. flash3+tuned)")
    cmd = [binary, "train", "--bench", "--device", "cuda", "--model", a.model, "--batch", str(a.batch),
           "--seq-len", str(a.seq_len), "--attn", backend, "--bench-steps", str(a.steps),
           "--vocab-size", "50257"] + flags[extra]
    print("$", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True)
    sys.stdout.write(p.stdout[-3000:])
    if p.returncode != 0:
        sys.stdout.write(p.stderr[-2000:])
        return None, p.stderr.strip().splitlines()[-1] if p.stderr.strip() else "failed"
    m = re.search(r"median ([\d.]+) ms/step \| (\d+) tokens/s", p.stdout)
    mem = re.search(r"peak memory ([\d.]+) (GiB|MiB)", p.stdout)
    peak = float(mem.group(1)) * (2**30 if mem.group(2) == "GiB" else 2**20) if mem else None
    return (float(m.group(2)), float(m.group(1)), peak), ""


def torch_gpt(a, backend_name):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    L, C, NH = PRESETS[a.model]
    V, Vp, T, B = 50257, 50304, a.seq_len, a.batch
    compiled = backend_name.startswith("compile-")
    max_autotune = backend_name.startswith("compile-max-")
    graphs = backend_name.startswith("compile-graphs-")  # mode="reduce-overhead": CUDA graphs
    sdpa = backend_name.split("-")[-1]
    backend = {"math": SDPBackend.MATH, "flash": SDPBackend.FLASH_ATTENTION,
               "cudnn": SDPBackend.CUDNN_ATTENTION}[sdpa]
    if compiled:  # the one SDPA backend allowed, globally
        torch.backends.cuda.enable_math_sdp(sdpa == "math")
        torch.backends.cuda.enable_flash_sdp(sdpa == "flash")
        torch.backends.cuda.enable_mem_efficient_sdp(False)
        torch.backends.cuda.enable_cudnn_sdp(sdpa == "cudnn")

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
            self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
            self.fc, self.fcproj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

        def forward(self, x):
            q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, NH, C // NH).permute(2, 0, 3, 1, 4)
            if compiled:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                with sdpa_kernel(backend):
                    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
            return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(Vp, C), nn.Embedding(T, C)
            self.blocks = nn.ModuleList(Block() for _ in range(L))
            self.lnf = nn.LayerNorm(C)

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
            for b in self.blocks:
                x = b(x)
            # nanoGPT's way: cross-entropy over the padded vocabulary (autocast runs it in fp32)
            logits = F.linear(self.lnf(x), self.wte.weight)
            return F.cross_entropy(logits.view(-1, Vp), targets.view(-1))

    torch.manual_seed(0)
    model = GPT().cuda()
    fwd = (torch.compile(model, mode="max-autotune-no-cudagraphs") if max_autotune
           else torch.compile(model, mode="reduce-overhead") if graphs
           else torch.compile(model) if compiled else model)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    x = torch.randint(0, V, (B, T), device="cuda")
    y = torch.randint(0, V, (B, T), device="cuda")
    torch.cuda.reset_peak_memory_stats()

    def step():
        if graphs:
            torch.compiler.cudagraph_mark_step_begin()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = fwd(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    times = []
    try:
        for i in range(3 + a.steps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            step().item()
            torch.cuda.synchronize()
            if i >= 3:
                times.append(time.perf_counter() - t0)
    except torch.cuda.OutOfMemoryError:
        return None, "OOM"
    finally:
        peak = torch.cuda.max_memory_allocated()
        del model, fwd, opt
        torch.cuda.empty_cache()
        if compiled:
            for f in (torch.backends.cuda.enable_math_sdp, torch.backends.cuda.enable_flash_sdp,
                      torch.backends.cuda.enable_mem_efficient_sdp,
                      torch.backends.cuda.enable_cudnn_sdp):
                f(True)
    times.sort()
    med = times[len(times) // 2]
    return (B * T / med, med * 1e3, peak), ""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="d12", choices=sorted(PRESETS))
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--ours", default="naive,flash",
                    help="our attention backends; backend+tuned adds train --tune-matmul")
    ap.add_argument("--torch", default="math,flash",
                    help="SDPA backends: math, flash, cudnn (eager), compile-flash, compile-cudnn, "
                         "compile-max-cudnn (max-autotune), compile-graphs-cudnn (reduce-overhead: "
                         "CUDA graphs)")
    ap.add_argument("--binary", default="build/flashgpt")
    ap.add_argument("--out", default="runs/bench")
    a = ap.parse_args()

    import torch
    gpu = torch.cuda.get_device_name(0)
    date = datetime.date.today().isoformat()
    rows = []
    for attn in [s for s in a.ours.split(",") if s]:
        r, err = run_ours(a.binary, attn, a)
        rows.append(("flashgpt", attn, r[0] if r else None, r[1] if r else None, r[2] if r else None, err))
    for be in [s for s in a.torch.split(",") if s]:
        print(f"pytorch {'torch.compile' if be.startswith('compile-') else 'eager'}, SDPA {be} ...",
              flush=True)
        r, err = torch_gpt(a, be)
        rows.append(("pytorch", be, r[0] if r else None, r[1] if r else None, r[2] if r else None, err))

    def tps(impl, attn):
        for r in rows:
            if r[0] == impl and r[1] == attn and r[2]:
                return r[2]
        return None

    cmd = " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:])
    header = (f"{a.model} B={a.batch} T={a.seq_len}, bf16, {gpu}, torch {torch.__version__}, cuDNN "
              f"{torch.backends.cudnn.version()}, {date}, command: python3 scripts/{cmd}")
    print("\n" + header)
    print("(peak GiB: ours = cudaMemGetInfo delta incl. cuBLAS; torch = max_memory_allocated)")
    torch_rows = [r for r in rows if r[0] == "pytorch" and r[2]]
    best = max(torch_rows, key=lambda r: r[2]) if torch_rows else None
    print(f"{'implementation':<12} {'attention':<14} {'tokens/s':>12} {'ms/step':>10} {'peak GiB':>9}  "
          f"{'vs torch math':>14} {'vs torch flash':>14} {'vs best torch':>14}")
    for impl, attn, t, ms, peak, err in rows:
        if not t:
            print(f"{impl:<12} {attn:<14} {'-':>12} {'-':>10} {'-':>9}  {err}")
            continue
        rm, rf = tps("pytorch", "math"), tps("pytorch", "flash")
        rb = best[2] if best else None
        pk = f"{peak / 2**30:.2f}" if peak else "-"
        print(f"{impl:<12} {attn:<14} {t:>12.0f} {ms:>10.1f} {pk:>9}  "
              f"{(f'{t / rm:.2f}x' if rm else '-'):>14} {(f'{t / rf:.2f}x' if rf else '-'):>14} "
              f"{(f'{t / rb:.3f}x' if rb else '-'):>14}")
    if best:
        print(f"best torch: {best[1]} ({best[2]:.0f} tokens/s)")
    os.makedirs(a.out, exist_ok=True)
    safe = re.sub(r"[^A-Za-z0-9]+", "_", gpu).strip("_")
    shape = "" if (a.batch, a.seq_len) == (32, 1024) else f"_B{a.batch}_T{a.seq_len}"
    path = os.path.join(a.out, f"train_{a.model}{shape}_{safe}_{date}.csv")
    with open(path, "w") as f:
        f.write(f"# {header}\n")
        f.write("implementation,attention,tokens_per_s,ms_per_step,peak_bytes,error\n")
        for impl, attn, t, ms, peak, err in rows:
            f.write(f"{impl},{attn},{t or ''},{ms or ''},{int(peak) if peak else ''},{err}\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
