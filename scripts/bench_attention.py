#!/usr/bin/env python3
"""bench_attention.py — our attention backends next to PyTorch's SDPA, same GPU, same run.

Runs `build/flashgpt bench-attention` (our backends: forward, backward, forward+backward with
CUDA events, median) and then, in this process, torch.nn.functional.scaled_dot_product_attention
with each of sdpa_kernel(SDPBackend.FLASH_ATTENTION / CUDNN_ATTENTION / MATH) at the same shapes:
bf16, B = max(1, tokens / T), NH heads (12 for HS 64, 16 for HS 128), q, k, v read through the
strides of a packed (B, T, 3, NH, HS) qkv buffer as in a GPT (our layout). Times forward,
backward (torch.autograd.grad on one saved forward) and forward+backward with CUDA events after
warm-up, median. Points that run out of memory are skipped (the math backend stops where it no
longer fits). FLOPs: forward 4*B*NH*T^2*HS (halved when causal), backward 2.5x forward.

Prints one table (TFLOP/s, our/flash and our/cuDNN ratios) and writes
runs/bench/attention_<gpu>_<date>.csv (--out-dir, --csv) with the exact command, GPU name and date as a header.

  python3 scripts/bench_attention.py                                  # the full sweep
  python3 scripts/bench_attention.py --hs 64 --seq-lens 1024,4096 --causal 1
"""
import argparse
import csv
import datetime
import io
import os
import re
import shlex
import subprocess
import sys

PASSES = ("fwd", "bwd", "fwdbwd")


def parse_list(s, cast=str):
    return [cast(x) for x in s.split(",") if x != ""]


def heads_for(hs, heads):
    return heads if heads > 0 else (12 if hs == 64 else 16 if hs == 128 else max(1, 768 // hs))


def run_ours(args):
    """Runs our bench binary; returns rows {source, hs, heads, batch, seq_len, causal, pass: ...}."""
    csv_path = os.path.join(args.out_dir, ".bench_attention_ours.csv")
    cmd = [args.binary, "bench-attention", "--backends", args.backends, "--hs", args.hs,
           "--seq-lens", args.seq_lens, "--tokens", str(args.tokens), "--causal", args.causal,
           "--warmup", str(args.warmup), "--iters", str(args.iters),
           "--budget-ms", str(args.budget_ms), "--warmup-ms", str(args.warmup_ms),
           "--csv", csv_path]
    if args.heads > 0:
        cmd += ["--heads", str(args.heads)]
    print("$ " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    subprocess.run(cmd, check=True)
    rows = []
    with open(csv_path) as f:
        lines = [l for l in f if not l.startswith("#")]
    for r in csv.DictReader(io.StringIO("".join(lines))):
        rows.append({
            "source": r["backend"], "hs": int(r["hs"]), "heads": int(r["heads"]),
            "batch": int(r["batch"]), "seq_len": int(r["seq_len"]), "causal": int(r["causal"]),
            "ms": {p: float(r[p + "_ms"]) for p in PASSES},
            "extra_bytes": int(r["extra_bytes"]), "status": r["status"],
        })
    os.remove(csv_path)
    return rows


def run_torch(args):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    kinds = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
             "math": SDPBackend.MATH}
    rows = []

    def time_ms(fn):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

        def once():
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end)

        warm, warmed = args.warmup, 0.0
        for i in range(warm):
            t = once()
            warmed += t
            if i == 0 and t * warm > args.budget_ms:
                break
        while warmed < args.warmup_ms:  # sustained-load clocks, as ours (bench-attention --warmup-ms)
            t = once()
            if t <= 0:
                break
            warmed += t
        first = once()
        n = args.iters
        if first > 0 and first * n > args.budget_ms:
            n = max(3, int(args.budget_ms / first))
        ts = sorted([first] + [once() for _ in range(n - 1)])
        return ts[len(ts) // 2]

    for name in parse_list(args.torch_backends):
        for hs in parse_list(args.hs, int):
            math_oom_at = None  # the math backend needs B*NH*T^2 memory: stop at its first OOM
            for T in parse_list(args.seq_lens, int):
                for causal in parse_list(args.causal, int):
                    NH = heads_for(hs, args.heads)
                    B = max(1, args.tokens // T)
                    row = {"source": "torch-" + name, "hs": hs, "heads": NH, "batch": B,
                           "seq_len": T, "causal": causal, "ms": {p: 0.0 for p in PASSES},
                           "extra_bytes": 0, "status": "ok"}
                    if name == "math" and math_oom_at is not None and T > math_oom_at:
                        row["status"] = "OOM (skipped: OOM at T=%d)" % math_oom_at
                        rows.append(row)
                        print_torch_row(row)
                        continue
                    try:
                        g = torch.Generator(device="cuda").manual_seed(1234 + T)
                        qkv = torch.randn(B, T, 3, NH, hs, device="cuda", dtype=torch.bfloat16,
                                          generator=g)
                        q, k, v = (qkv[:, :, i].transpose(1, 2).detach().requires_grad_()
                                   for i in range(3))
                        dout = torch.randn(B, T, NH, hs, device="cuda", dtype=torch.bfloat16,
                                           generator=g).transpose(1, 2)  # (B, T, NH, HS) memory
                        with sdpa_kernel(kinds[name]):
                            def fwd():
                                return F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))

                            torch.cuda.reset_peak_memory_stats()
                            base = torch.cuda.memory_allocated()
                            row["ms"]["fwd"] = time_ms(fwd)
                            out = fwd()
                            row["ms"]["bwd"] = time_ms(
                                lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True))
                            del out
                            row["ms"]["fwdbwd"] = time_ms(
                                lambda: torch.autograd.grad(fwd(), (q, k, v), dout))
                            row["extra_bytes"] = torch.cuda.max_memory_allocated() - base
                        del q, k, v, qkv, dout
                    except torch.OutOfMemoryError:
                        row["status"] = "OOM"
                        row["ms"] = {p: 0.0 for p in PASSES}
                        if name == "math":
                            math_oom_at = T
                    except RuntimeError as e:  # e.g. no kernel for this backend/shape
                        msg = str(e).splitlines()[0][:100]
                        row["status"] = "error: " + msg
                        row["ms"] = {p: 0.0 for p in PASSES}
                    torch.cuda.empty_cache()
                    rows.append(row)
                    print_torch_row(row)
    return rows


def flops(row, p):
    f = 4.0 * row["batch"] * row["heads"] * row["seq_len"] ** 2 * row["hs"]
    if row["causal"]:
        f /= 2
    return f * {"fwd": 1.0, "bwd": 2.5, "fwdbwd": 3.5}[p]


def tflops(row, p):
    ms = row["ms"][p]
    return flops(row, p) / (ms * 1e-3) / 1e12 if ms > 0 else 0.0


def print_torch_row(row):
    print("%-12s HS %3d NH %2d B %3d T %6d causal %d | fwd %8.3f ms %6.1f TF/s | bwd %8.3f ms "
          "%6.1f | f+b %8.3f ms %6.1f | %s" % (
              row["source"], row["hs"], row["heads"], row["batch"], row["seq_len"], row["causal"],
              row["ms"]["fwd"], tflops(row, "fwd"), row["ms"]["bwd"], tflops(row, "bwd"),
              row["ms"]["fwdbwd"], tflops(row, "fwdbwd"), row["status"]), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binary", default="build/flashgpt")
    ap.add_argument("--backends", default="naive,flash", help="our backends")
    ap.add_argument("--torch-backends", default="flash,cudnn,math")
    ap.add_argument("--hs", default="64,128")
    ap.add_argument("--seq-lens", default="512,1024,2048,4096,8192,16384,32768,65536,131072")
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--causal", default="1,0")
    ap.add_argument("--heads", type=int, default=0, help="0: 12 for HS 64, 16 for HS 128")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--budget-ms", type=float, default=3000,
                    help="at most this much GPU time per measurement (at least 3 runs)")
    ap.add_argument("--warmup-ms", type=float, default=500,
                    help="untimed runs before each measurement until this much GPU time has "
                         "passed (ours and torch alike: the clocks of sustained load)")
    ap.add_argument("--out-dir", default="runs/bench")
    ap.add_argument("--csv", default="", help="output file (default: OUT_DIR/attention_<gpu>_<date>.csv)")
    args = ap.parse_args()

    import torch
    if not torch.cuda.is_available():
        sys.exit("bench_attention.py: no CUDA device; run it on the GPU machine")
    os.makedirs(args.out_dir, exist_ok=True)
    gpu = torch.cuda.get_device_name()
    date = datetime.date.today().isoformat()
    command = "python3 " + " ".join(shlex.quote(a) for a in sys.argv)
    print("GPU: %s | torch %s | %s" % (gpu, torch.__version__, date), flush=True)

    ours = run_ours(args)
    theirs = run_torch(args)
    rows = ours + theirs

    # One table: per (HS, T, causal, pass), TFLOP/s of every source, then our/flash and our/cuDNN.
    ours_names = parse_list(args.backends)
    torch_names = ["torch-" + n for n in parse_list(args.torch_backends)]
    sources = ours_names + torch_names
    by = {(r["source"], r["hs"], r["seq_len"], r["causal"]): r for r in rows}
    short = {"torch-flash": "t-flash", "torch-cudnn": "t-cudnn", "torch-math": "t-math"}
    ratio_cols = []
    for o in ours_names:
        for t, tn in (("torch-flash", "flash"), ("torch-cudnn", "cudnn")):
            if t in torch_names:
                ratio_cols.append((o, t, "%s/%s" % (o, tn)))
    head = "%4s %3s %4s %7s %3s %-6s " % ("HS", "NH", "B", "T", "cau", "pass")
    head += " ".join("%8s" % short.get(s, s) for s in sources)
    head += "  | " + " ".join("%13s" % c[2] for c in ratio_cols)
    print("\nTFLOP/s (0 = skipped: OOM, unsupported or non-causal for ours); ratios = ours / torch")
    print(head)
    print("-" * len(head))
    for hs in parse_list(args.hs, int):
        for T in parse_list(args.seq_lens, int):
            for causal in parse_list(args.causal, int):
                for p in PASSES:
                    any_row = next((by[k] for k in by if k[1:] == (hs, T, causal)), None)
                    if any_row is None:
                        continue
                    line = "%4d %3d %4d %7d %3d %-6s " % (hs, any_row["heads"], any_row["batch"], T,
                                                          causal, p)
                    vals = {s: (tflops(by[(s, hs, T, causal)], p) if (s, hs, T, causal) in by else 0.0)
                            for s in sources}
                    line += " ".join("%8.1f" % vals[s] for s in sources)
                    line += "  | " + " ".join(
                        "%13s" % ("%.2fx" % (vals[o] / vals[t]) if vals[o] > 0 and vals[t] > 0 else "-")
                        for o, t, _ in ratio_cols)
                    print(line)

    path = args.csv or os.path.join(
        args.out_dir, "attention_%s_%s.csv" % (re.sub(r"[^a-z0-9]+", "-", gpu.lower()).strip("-"), date))
    with open(path, "w", newline="") as f:
        f.write("# command: %s\n# gpu: %s\n# date: %s\n# torch: %s\n" % (command, gpu, date,
                                                                         torch.__version__))
        f.write("# tflops: forward 4*B*NH*T^2*HS (/2 causal), backward 2.5x, fwd+bwd 3.5x; "
                "extra_bytes: ours saved+scratch, torch peak allocated above the inputs\n")
        w = csv.writer(f)
        w.writerow(["source", "hs", "heads", "batch", "seq_len", "causal", "pass", "ms", "tflops",
                    "extra_bytes", "status"])
        for r in rows:
            for p in PASSES:
                w.writerow([r["source"], r["hs"], r["heads"], r["batch"], r["seq_len"], r["causal"],
                            p, "%.4f" % r["ms"][p], "%.2f" % tflops(r, p), r["extra_bytes"],
                            r["status"]])
    print("\nwrote " + path)


if __name__ == "__main__":
    main()
