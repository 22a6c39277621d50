#!/usr/bin/env python3
"""bench_attention.py — our attention backends next to PyTorch's SDPA, same GPU, same run.

Runs `build/flashgpt bench-attention` (our backends: forward, backward, forward+backward with
CUDA events, median) and then, in this process, torch.nn.functional.scaled_dot_product_attention
with each of sdpa_kernel(SDPBackend.FLASH_ATTENTION / CUDNN_ATTENTION / MATH) at the same shapes:
bf16, B = max(1, tokens / T), NH heads (12 for HS 64, 16 for HS 128) and NKV kv heads (--kv-heads;
GQA through SDPA's enable_gqa), q, k, v read through the strides of a packed (B, T, NH + 2 NKV,
HS) qkv buffer as in a GPT (our layout). Times forward, backward (torch.autograd.grad on one saved
forward) and forward+backward with CUDA events after warm-up, median. Two ways to warm up: after
--warmup-ms of sustained load (the default: the clocks a training run sees), or, with --idle-ms N
--warmup-ms 0, from an idle GPU (a burst, as published attention benchmarks time: a fresh process,
a few calls, the median of 10). Points that run out of memory are skipped (the math backend stops
where it no longer fits). FLOPs: forward 4*B*NH*T^2*HS (halved when causal), backward 2.5x forward.

Prints one table (TFLOP/s, our/flash and our/cuDNN ratios) and writes
runs/bench/attention_<gpu>_<date>.csv (--out-dir, --csv) with the exact command, GPU name and date as a header.

Masked cases (--mask document --doc-lens N,..., --windows W,...): each (mean document length N,
window W) is a case. Ours run with bench-attention --mask/--doc-len/--window on its synthetic
documents (bench_attention.cu: token t of sequence b starts a document iff
splitmix64(2^32 * 1234 + b T + t) % N == 0, repeated here), PyTorch's FlexAttention
(torch.nn.attention.flex_attention under torch.compile) with create_block_mask from the same
doc_start and window, and, where this PyTorch has it, torch.nn.attention.varlen.varlen_attn (its
FlashAttention-2 varlen path: one sequence per document, window_size for the window). SDPA has no
document mask or window argument (only a dense attn_mask, T x T), so it is not timed there.
TFLOP/s count the visible (query, key) pairs: forward 4*HS*NH*pairs, backward 2.5x; the table
gives ours / FlexAttention and ours masked / ours causal at the same T (our causal rows are run
too). The CSV is runs/bench/attention_masked_<gpu>_<date>.csv.

  python3 scripts/bench_attention.py                                  # the full sweep
  python3 scripts/bench_attention.py --hs 64 --seq-lens 1024,4096 --causal 1
  python3 scripts/bench_attention.py --backends flash3 --hs 64 --seq-lens 8192,32768,131072 \
      --tokens 131072 --mask document --doc-lens 1024,4096 --windows 0,2048
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
import time

PASSES = ("fwd", "bwd", "fwdbwd")


def parse_list(s, cast=str):
    return [cast(x) for x in s.split(",") if x != ""]


def heads_for(hs, heads):
    return heads if heads > 0 else (12 if hs == 64 else 16 if hs == 128 else max(1, 768 // hs))


def kv_heads_for(args, NH):
    return args.kv_heads if args.kv_heads > 0 else NH


def run_ours(args, causal=None, mask_flags=()):
    """Runs our bench binary; returns rows {source, hs, heads, batch, seq_len, causal, pass: ...}."""
    # Per process: two runs sharing an --out-dir must not read each other's results.
    csv_path = os.path.join(args.out_dir, ".bench_attention_ours_%d.csv" % os.getpid())
    cmd = [args.binary, "bench-attention", "--backends", args.backends, "--hs", args.hs,
           "--seq-lens", args.seq_lens, "--tokens", str(args.tokens),
           "--causal", causal or args.causal,
           "--warmup", str(args.warmup), "--iters", str(args.iters),
           "--budget-ms", str(args.budget_ms), "--warmup-ms", str(args.warmup_ms),
           "--csv", csv_path] + list(mask_flags)
    if args.heads > 0:
        cmd += ["--heads", str(args.heads)]
    if args.kv_heads > 0:
        cmd += ["--kv-heads", str(args.kv_heads)]
    if args.idle_ms > 0:
        cmd += ["--idle-ms", str(args.idle_ms)]
    print("$ " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    subprocess.run(cmd, check=True)
    rows = []
    with open(csv_path) as f:
        lines = [l for l in f if not l.startswith("#")]
    for r in csv.DictReader(io.StringIO("".join(lines))):
        rows.append({
            "source": r["backend"], "hs": int(r["hs"]), "heads": int(r["heads"]),
            "kv_heads": int(r["kv_heads"]),
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

    time_ms = make_timer(args)
    for name in parse_list(args.torch_backends):
        for hs in parse_list(args.hs, int):
            math_oom_at = None  # the math backend needs B*NH*T^2 memory: stop at its first OOM
            for T in parse_list(args.seq_lens, int):
                for causal in parse_list(args.causal, int):
                    NH = heads_for(hs, args.heads)
                    NKV = kv_heads_for(args, NH)
                    B = max(1, args.tokens // T)
                    row = {"source": "torch-" + name, "hs": hs, "heads": NH, "kv_heads": NKV,
                           "batch": B,
                           "seq_len": T, "causal": causal, "ms": {p: 0.0 for p in PASSES},
                           "extra_bytes": 0, "status": "ok"}
                    if name == "math" and math_oom_at is not None and T > math_oom_at:
                        row["status"] = "OOM (skipped: OOM at T=%d)" % math_oom_at
                        rows.append(row)
                        print_torch_row(row)
                        continue
                    try:
                        g = torch.Generator(device="cuda").manual_seed(1234 + T)
                        qkv = torch.randn(B, T, NH + 2 * NKV, hs, device="cuda",
                                          dtype=torch.bfloat16, generator=g)
                        q, k, v = (qkv[:, :, a:a + n].transpose(1, 2).detach().requires_grad_()
                                   for a, n in ((0, NH), (NH, NKV), (NH + NKV, NKV)))
                        dout = torch.randn(B, T, NH, hs, device="cuda", dtype=torch.bfloat16,
                                           generator=g).transpose(1, 2)  # (B, T, NH, HS) memory
                        with sdpa_kernel(kinds[name]):
                            def fwd():
                                return F.scaled_dot_product_attention(
                                    q, k, v, is_causal=bool(causal), enable_gqa=NKV != NH)

                            time_passes(time_ms, fwd, (q, k, v), dout, row)
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


def make_timer(args):
    """time_ms(fn): the median ms of fn with CUDA events, after warm-up (as ours: --warmup runs,
    then until --warmup-ms of GPU time has passed), at most --budget-ms (at least 3 runs)."""
    import torch

    def time_ms(fn):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

        def once():
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end)

        if args.idle_ms > 0:  # a burst from idle clocks (bench-attention --idle-ms)
            torch.cuda.synchronize()
            time.sleep(args.idle_ms / 1e3)
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

    return time_ms


def time_passes(time_ms, fwd, inputs, dout, row):
    """row["ms"]: forward, backward (torch.autograd.grad on one saved forward) and forward +
    backward; row["extra_bytes"]: the peak allocated above what was allocated before."""
    import torch

    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    row["ms"]["fwd"] = time_ms(fwd)
    out = fwd()
    row["ms"]["bwd"] = time_ms(lambda: torch.autograd.grad(out, inputs, dout, retain_graph=True))
    del out
    row["ms"]["fwdbwd"] = time_ms(lambda: torch.autograd.grad(fwd(), inputs, dout))
    row["extra_bytes"] = torch.cuda.max_memory_allocated() - base


def cudnn_version():
    """The cuDNN that PyTorch's SDPA cuDNN backend runs, as torch reports it (91900 = 9.19.0)."""
    import torch
    return torch.backends.cudnn.version()


def write_csv(args, stem, meta, note, columns, lines):
    """--csv, or OUT_DIR/<stem>_<gpu>_<date>.csv: the command, GPU, date and torch version, a note
    on the columns, then the rows."""
    command, gpu, date, torch_version = meta
    path = args.csv or os.path.join(args.out_dir, "%s_%s_%s.csv" % (
        stem, re.sub(r"[^a-z0-9]+", "-", gpu.lower()).strip("-"), date))
    with open(path, "w", newline="") as f:
        f.write("# command: %s\n# gpu: %s\n# date: %s\n# torch: %s\n# cudnn: %s\n" % (
            command, gpu, date, torch_version, cudnn_version()))
        f.write("# %s\n" % note)
        w = csv.writer(f)
        w.writerow(columns)
        w.writerows(lines)
    print("\nwrote " + path)


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


# ---- masked cases (--mask document, --windows) ----

DOC_SEED = 1234  # bench_attention.cu kDocSeed: the same synthetic documents as ours


def document_starts(B, T, doc_len):
    """doc_start (B, T) int64 of bench-attention's synthetic documents of mean length doc_len."""
    import numpy as np

    u64 = np.uint64
    with np.errstate(over="ignore"):
        x = np.arange(B * T, dtype=u64) + u64(DOC_SEED << 32)
        x = x + u64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> u64(30))) * u64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> u64(27))) * u64(0x94D049BB133111EB)
        x = x ^ (x >> u64(31))
    eot = (x % u64(doc_len) == 0).reshape(B, T)
    rows = np.broadcast_to(np.arange(T, dtype=np.int64), (B, T))
    return np.maximum.accumulate(np.where(eot, rows, 0), axis=1)


def visible_pairs(doc_start, B, T, window):
    """The (query, key) pairs the mask leaves, summed over the batch (mask.h visible_pairs)."""
    import numpy as np

    t = np.broadcast_to(np.arange(T, dtype=np.int64), (B, T))
    lo = doc_start if doc_start is not None else np.zeros((B, T), dtype=np.int64)
    if window > 0:
        lo = np.maximum(lo, t - window + 1)
    return int((t - lo + 1).sum())


def mask_flags(case):
    doc_len, window = case
    flags = ["--mask", "document", "--doc-len", str(doc_len)] if doc_len else []
    return flags + ["--window", str(window)]


def case_name(case):
    doc_len, window = case
    return ("doc %d" % doc_len if doc_len else "causal") + (", window %d" % window if window else "")


def flex_mask_mod(doc_start, window):
    """FlexAttention's mask_mod of mask.h's rule: kv <= q, doc_start[b, q] <= kv, q - kv < W."""
    def mask_mod(b, h, q_idx, kv_idx):
        m = kv_idx <= q_idx
        if doc_start is not None:
            m = m & (doc_start[b, q_idx] <= kv_idx)
        if window > 0:
            m = m & (q_idx - kv_idx < window)
        return m
    return mask_mod


def run_masked_torch(args, cases):
    """FlexAttention and (where this PyTorch has it) varlen_attn on each case; rows as run_torch's,
    plus "case" and "pairs"."""
    import torch
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    # Every (case, shape) compiles anew; past dynamo's cache limit it would fall back to eager
    # flex attention, which materialises T x T.
    for knob in ("cache_size_limit", "recompile_limit"):
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, 256)
    # The backward is timed on one saved forward (retain_graph=True), which a compiled backward
    # that donates its saved buffers refuses; donation only saves memory.
    import torch._functorch.config as functorch_config
    if hasattr(functorch_config, "donated_buffer"):
        functorch_config.donated_buffer = False
    flex = torch.compile(flex_attention, dynamic=False)
    # The block mask built by a compiled create_block_mask: uncompiled it evaluates the mask on
    # a T x T grid (its _compile=True switch is deprecated in favour of this).
    block_mask_of = torch.compile(create_block_mask, dynamic=False)
    try:
        from torch.nn.attention.varlen import varlen_attn
        import inspect
        varlen_params = inspect.signature(varlen_attn).parameters
    except ImportError:
        varlen_attn = None
        print("torch %s has no torch.nn.attention.varlen.varlen_attn: FlashAttention-2 varlen "
              "not timed" % torch.__version__, flush=True)
    time_ms = make_timer(args)
    rows = []
    for case in cases:
        doc_len, window = case
        for hs in parse_list(args.hs, int):
            for T in parse_list(args.seq_lens, int):
                NH = heads_for(hs, args.heads)
                B = max(1, args.tokens // T)
                ds = document_starts(B, T, doc_len) if doc_len else None
                pairs = visible_pairs(ds, B, T, window)
                for source in ["torch-flex"] + (["torch-varlen"] if varlen_attn else []):
                    row = {"source": source, "case": case, "hs": hs, "heads": NH, "batch": B,
                           "seq_len": T, "causal": 1, "pairs": pairs,
                           "ms": {p: 0.0 for p in PASSES}, "extra_bytes": 0, "status": "ok"}
                    try:
                        g = torch.Generator(device="cuda").manual_seed(1234 + T)
                        qkv = torch.randn(B, T, 3, NH, hs, device="cuda", dtype=torch.bfloat16,
                                          generator=g)
                        dout = torch.randn(B, T, NH, hs, device="cuda", dtype=torch.bfloat16,
                                           generator=g)
                        if source == "torch-flex":
                            q, k, v = (qkv[:, :, i].transpose(1, 2).detach().requires_grad_()
                                       for i in range(3))
                            dO = dout.transpose(1, 2)
                            d_ds = (torch.from_numpy(ds).to("cuda", torch.int32)
                                    if ds is not None else None)
                            block_mask = block_mask_of(flex_mask_mod(d_ds, window), B, None, T, T,
                                                       device="cuda")

                            def fwd():
                                return flex(q, k, v, block_mask=block_mask)
                        else:
                            # one sequence per document (the document mask); window_size for W
                            import numpy as np

                            starts = (np.flatnonzero((ds == np.arange(T)).reshape(-1))
                                      if ds is not None else np.arange(B) * T)
                            cu = torch.tensor(np.append(starts, B * T), device="cuda",
                                              dtype=torch.int32)
                            max_len = int(np.diff(np.append(starts, B * T)).max())
                            q, k, v = (qkv[:, :, i].reshape(B * T, NH, hs).detach()
                                       .requires_grad_() for i in range(3))
                            dO = dout.reshape(B * T, NH, hs)
                            kw = {}
                            if "window_size" in varlen_params:
                                kw["window_size"] = (window - 1 if window else -1, 0)
                            elif window:
                                raise RuntimeError("varlen_attn here has no window_size")
                            else:
                                kw["is_causal"] = True

                            def fwd():
                                return varlen_attn(q, k, v, cu, cu, max_len, max_len, **kw)
                        time_passes(time_ms, fwd, (q, k, v), dO, row)
                    except torch.OutOfMemoryError:
                        row["status"] = "OOM"
                    except Exception as e:  # no kernel for this shape, no backward, ...
                        row["status"] = "error: " + str(e).splitlines()[0][:100]
                    if row["status"] != "ok":
                        row["ms"] = {p: 0.0 for p in PASSES}
                    q = k = v = qkv = dout = dO = block_mask = fwd = None  # free them
                    torch.cuda.empty_cache()
                    rows.append(row)
                    print("%-12s %-20s HS %3d B %3d T %6d | fwd %8.3f ms %6.1f TF/s | bwd %8.3f ms "
                          "%6.1f | f+b %8.3f ms %6.1f | %s" % (
                              source, case_name(case), hs, B, T, row["ms"]["fwd"],
                              masked_tflops(row, "fwd"), row["ms"]["bwd"],
                              masked_tflops(row, "bwd"), row["ms"]["fwdbwd"],
                              masked_tflops(row, "fwdbwd"), row["status"]), flush=True)
    return rows


def masked_tflops(row, p):
    """TFLOP/s over the visible pairs (causal rows: the convention, T^2/2)."""
    ms = row["ms"][p]
    if ms <= 0:
        return 0.0
    f = 4.0 * row["heads"] * row["hs"] * row["pairs"] * {"fwd": 1.0, "bwd": 2.5, "fwdbwd": 3.5}[p]
    return f / (ms * 1e-3) / 1e12


def run_masked(args, gpu, date, command):
    """The masked cases: ours (each case and plain causal), FlexAttention, varlen_attn."""
    import torch

    windows = parse_list(args.windows, int) or [0]
    if args.mask == "document":
        doc_lens = parse_list(args.doc_lens, int)
        if not doc_lens or min(doc_lens) < 1:
            sys.exit("bench_attention.py: --mask document needs --doc-lens N[,N...] (>= 1)")
        cases = [(n, w) for n in doc_lens for w in windows]
    else:
        cases = [(0, w) for w in windows if w > 0]
    if min(windows) < 0:
        sys.exit("bench_attention.py: --windows takes W >= 0 (0: no window)")
    print("torch SDPA (flash, cuDNN, math) has no document mask or window argument: not timed on "
          "masked cases", flush=True)
    ours_names = parse_list(args.backends)
    rows = []
    for case in [None] + cases:  # None: our causal rows, the reference of "masked / causal"
        for r in run_ours(args, causal="1", mask_flags=mask_flags(case) if case else ()):
            T, B = r["seq_len"], r["batch"]
            doc_len, window = case or (0, 0)
            ds = document_starts(B, T, doc_len) if doc_len else None
            r["case"] = case or (0, 0)
            r["pairs"] = visible_pairs(ds, B, T, window) if case else B * T * T // 2
            rows.append(r)
    rows += run_masked_torch(args, cases)

    by = {(r["source"], r["case"], r["hs"], r["seq_len"]): r for r in rows}
    sources = ours_names + sorted({r["source"] for r in rows if r["source"].startswith("torch-")})
    head = "%-20s %4s %7s %-6s " % ("case", "HS", "T", "pass") + " ".join(
        "%12s" % s for s in sources)
    head += "  | " + " ".join("%12s %12s" % (o + "/flex", o + "/causal") for o in ours_names)
    print("\nTFLOP/s over the visible pairs (0 = skipped: OOM, unsupported, error); ratios of "
          "TFLOP/s: ours / FlexAttention, ours masked / ours causal at the same T")
    print(head)
    print("-" * len(head))
    for case in cases:
        for hs in parse_list(args.hs, int):
            for T in parse_list(args.seq_lens, int):
                for p in PASSES:
                    val = {s: masked_tflops(by[(s, case, hs, T)], p) if (s, case, hs, T) in by
                           else 0.0 for s in sources}
                    line = "%-20s %4d %7d %-6s " % (case_name(case), hs, T, p)
                    line += " ".join("%12.1f" % val[s] for s in sources)
                    ratios = []
                    for o in ours_names:
                        causal = by.get((o, (0, 0), hs, T))
                        c = masked_tflops(causal, p) if causal else 0.0
                        f = val.get("torch-flex", 0.0)
                        ratios.append("%12s %12s" % (
                            "%.2fx" % (val[o] / f) if val[o] > 0 and f > 0 else "-",
                            "%.2f" % (val[o] / c) if val[o] > 0 and c > 0 else "-"))
                    print(line + "  | " + " ".join(ratios))

    write_csv(args, "attention_masked", (command, gpu, date, torch.__version__),
              "tflops over the visible (query, key) pairs: forward 4*HS*NH*pairs, backward 2.5x, "
              "fwd+bwd 3.5x (causal rows: pairs = B*T^2/2); doc_len 0 = no document mask",
              ["source", "doc_len", "window", "hs", "heads", "batch", "seq_len", "pairs", "pass",
               "ms", "tflops", "extra_bytes", "status"],
              [[r["source"], r["case"][0], r["case"][1], r["hs"], r["heads"], r["batch"],
                r["seq_len"], r["pairs"], p, "%.4f" % r["ms"][p], "%.2f" % masked_tflops(r, p),
                r["extra_bytes"], r["status"]] for r in rows for p in PASSES])


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
    ap.add_argument("--kv-heads", type=int, default=0,
                    help="key/value heads (GQA; SDPA's enable_gqa); 0: = --heads")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--budget-ms", type=float, default=3000,
                    help="at most this much GPU time per measurement (at least 3 runs)")
    ap.add_argument("--warmup-ms", type=float, default=500,
                    help="untimed runs before each measurement until this much GPU time has "
                         "passed (ours and torch alike: the clocks of sustained load)")
    ap.add_argument("--idle-ms", type=float, default=0,
                    help="leave the GPU idle this long before each measurement (ours and torch "
                         "alike), so that it starts at its idle clock: a burst, as published "
                         "attention benchmarks time; use with --warmup-ms 0")
    ap.add_argument("--mask", default="causal", choices=["causal", "document"],
                    help="document: the masked cases, one per --doc-lens x --windows")
    ap.add_argument("--doc-lens", default="",
                    help="--mask document: mean document lengths of the synthetic documents")
    ap.add_argument("--windows", default="",
                    help="sliding windows W (0: none); with --mask causal, each W > 0 is a case")
    ap.add_argument("--out-dir", default="runs/bench")
    ap.add_argument("--csv", default="", help="output file (default: OUT_DIR/attention_<gpu>_<date>.csv)")
    args = ap.parse_args()
    for hs in parse_list(args.hs, int):
        NH = heads_for(hs, args.heads)
        if args.kv_heads < 0 or NH % kv_heads_for(args, NH):
            sys.exit("bench_attention.py: --kv-heads %d must divide the %d query heads at HS %d "
                     "(--heads)" % (args.kv_heads, NH, hs))

    import torch
    if not torch.cuda.is_available():
        sys.exit("bench_attention.py: no CUDA device; run it on the GPU machine")
    os.makedirs(args.out_dir, exist_ok=True)
    gpu = torch.cuda.get_device_name()
    date = datetime.date.today().isoformat()
    command = "python3 " + " ".join(shlex.quote(a) for a in sys.argv)
    print("GPU: %s | torch %s | cuDNN %s | %s" % (gpu, torch.__version__, cudnn_version(), date),
          flush=True)
    if args.mask == "document" or any(w > 0 for w in parse_list(args.windows, int)):
        if args.kv_heads > 0:
            sys.exit("bench_attention.py: --kv-heads times causal cases only; drop it or the mask")
        run_masked(args, gpu, date, command)
        return

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

    write_csv(args, "attention", (command, gpu, date, torch.__version__),
              "tflops: forward 4*B*NH*T^2*HS (/2 causal), backward 2.5x, fwd+bwd 3.5x; "
              "extra_bytes: ours saved+scratch, torch peak allocated above the inputs",
              ["source", "hs", "heads", "kv_heads", "batch", "seq_len", "causal", "pass", "ms",
               "tflops", "extra_bytes", "status"],
              [[r["source"], r["hs"], r["heads"], r["kv_heads"], r["batch"], r["seq_len"],
                r["causal"], p, "%.4f" % r["ms"][p], "%.2f" % tflops(r, p), r["extra_bytes"],
                r["status"]]
               for r in rows for p in PASSES])


if __name__ == "__main__":
    main()
