#!/usr/bin/env python3
"""results_table.py — data.csv and table.md of a bench/results/<claim>/ folder.

Each claim has a collector, which reads what the drivers wrote (bench_attention.py and
bench_train.py CSVs, `flashgpt bench-attention` / `train --bench` output, bench_cp.sh's runs.csv,
profile.csv, training logs, test logs) into rows of one CSV, and a renderer, which turns those
rows into the markdown tables of table.md. A run.sh collects; the committed table.md is the
rendering of the committed data.csv, so the two always agree.

  results_table.py CLAIM --out DIR --env DIR/env.txt RAW...   # DIR/data.csv and DIR/table.md
  results_table.py CLAIM --render data.csv                      # the tables only, to stdout

RAW is a file, or LABEL=file where the claim needs a label (the table says which).
Claims (the folder names of bench/results/): attention-vs-sdpa, training-step, long-context,
memory-plan, context-parallel, data-parallel, determinism, profile-sweep, loss-curves,
fa1-vs-fa2, hf-export, gpu-tests, document-masks, masked-context-parallel,
step-breakdown, long-context-2m, attention-ceilings, attention-bursts.
"""
import argparse
import csv
import io
import json
import os
import re
import statistics
import sys

import step_breakdown

GIB = 1024.0 ** 3
PASSES = ("fwd", "bwd", "fwdbwd")


# ---------------------------------------------------------------------------------------------
# helpers


def read_env(path):
    env = {}
    if path:
        for line in open(path):
            key, sep, value = line.partition(":")
            if sep:
                env[key.strip()] = value.strip()
    return env


def labelled(raw):
    """'LABEL=path' -> (LABEL, path); 'path' -> ('', path)."""
    if "=" in raw and not os.path.exists(raw):
        label, path = raw.split("=", 1)
        return label, path
    return "", raw


def csv_rows(path):
    """A CSV whose comment lines start with '#': (comments, rows)."""
    comments, lines = [], []
    for line in open(path, newline=""):
        (comments if line.startswith("#") else lines).append(line)
    return comments, list(csv.DictReader(io.StringIO("".join(lines))))


def num(x, default=None):
    try:
        return float(x)
    except (TypeError, ValueError):
        return default


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, spec=".1f", none="-"):
    return none if x is None else format(x, spec)


def kt(T):
    T = int(T)
    return "%dM" % (T >> 20) if T >= 1 << 20 and T % (1 << 20) == 0 else (
        "%dK" % (T >> 10) if T >= 1024 and T % 1024 == 0 else str(T))


def md_table(head, rows, align=None):
    align = align or ["---"] + ["---:"] * (len(head) - 1)
    out = ["| " + " | ".join(head) + " |", "| " + " | ".join(align) + " |"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def stamp(rows, env):
    for r in rows:
        r.setdefault("gpu", env.get("gpu", ""))
        r.setdefault("date", env.get("date", ""))
        r.setdefault("commit", env.get("commit", ""))
    return rows


BENCH_LINE = re.compile(
    r"^bench: (?P<gpu>.+?) (?P<model>\S+) attn=(?P<attn>\S+) B=(?P<B>\d+) T=(?P<T>\d+) .*?\| "
    r"median (?P<ms>[\d.]+) ms/step \| (?P<tok>\d+) tokens/s(?: \((?P<per>\d+) per GPU\))?"
    r"(?: \| MFU (?P<mfu>[\d.]+)%)?(?: \| peak memory (?P<peak>[\d.]+) (?P<unit>\w+))?")


def gib(value, unit):
    return num(value) * {"GiB": 1.0, "MiB": 1 / 1024.0, "TiB": 1024.0}.get(unit, 1.0)


def run_status(finished, text):
    """A row's status: ok when the run printed its closing line, else its last line."""
    return "ok" if finished else "failed: " + (text.strip().splitlines() or ["no output"])[-1][:120]


def bench_line(text):
    for line in text.splitlines():
        m = BENCH_LINE.match(line.strip())
        if m:
            return m
    return None


ATTN_LINE = re.compile(
    r"^(?P<backend>[\w-]+)\s+(?P<hs>\d+)\s+(?P<nh>\d+)\s+(?P<nkv>\d+)\s+(?P<b>\d+)\s+(?P<t>\d+)\s+"
    r"(?P<causal>\d)\s+\|\s+(?P<fwd>[\d.]+)\s+[\d.]+\s+\|\s+(?P<bwd>[\d.]+)\s+[\d.]+\s+\|\s+"
    r"(?P<fb>[\d.]+)\s+[\d.]+\s+\|\s+[\d.]+\s+(?P<status>\S+)")


def attention_flops(hs, heads, batch, T, causal, p):
    f = 4.0 * batch * heads * T * T * hs / (2 if causal else 1)
    return f * {"fwd": 1.0, "bwd": 2.5, "fwdbwd": 3.5}[p]


def read_bench_attention(path):
    """`flashgpt bench-attention` results, from its --csv file or its printed table."""
    rows = []
    if path.endswith(".csv"):
        _, recs = csv_rows(path)
        for r in recs:
            rows.append({"backend": r["backend"], "hs": int(r["hs"]), "heads": int(r["heads"]),
                         "kv_heads": int(r.get("kv_heads") or r["heads"]), "batch": int(r["batch"]),
                         "seq_len": int(r["seq_len"]), "causal": int(r["causal"]),
                         "fwd_ms": num(r["fwd_ms"]), "bwd_ms": num(r["bwd_ms"]),
                         "fwdbwd_ms": num(r["fwdbwd_ms"]), "status": r["status"]})
    else:
        for line in open(path):
            m = ATTN_LINE.match(line.strip())
            if m:
                rows.append({"backend": m["backend"], "hs": int(m["hs"]), "heads": int(m["nh"]),
                             "kv_heads": int(m["nkv"]), "batch": int(m["b"]),
                             "seq_len": int(m["t"]), "causal": int(m["causal"]),
                             "fwd_ms": num(m["fwd"]), "bwd_ms": num(m["bwd"]),
                             "fwdbwd_ms": num(m["fb"]), "status": m["status"]})
    for r in rows:
        for p in PASSES:
            ms = r[p + "_ms"]
            r[p + "_tflops"] = round(attention_flops(r["hs"], r["heads"], r["batch"], r["seq_len"],
                                                     r["causal"], p) / (ms * 1e9), 2) if ms else None
    return rows


# ---------------------------------------------------------------------------------------------
# attention: flash3 and flash against PyTorch SDPA (bench_attention.py CSVs, one per round)

def collect_attention(raws, env):
    rows, rounds = [], {}
    for machine, path in map(labelled, raws):
        machine = machine or "a"
        rounds[machine] = rounds.get(machine, 0) + 1
        _, recs = csv_rows(path)
        for r in recs:
            rows.append({"machine": machine, "round": rounds[machine], "source": r["source"],
                         "hs": r["hs"], "heads": r["heads"], "batch": r["batch"],
                         "seq_len": r["seq_len"], "causal": r["causal"], "pass": r["pass"],
                         "ms": r["ms"], "tflops": r["tflops"], "status": r["status"]})
    return stamp(rows, env)


def render_attention(rows):
    sources = list(dict.fromkeys(r["source"] for r in rows))
    ours = [s for s in sources if not s.startswith("torch-")]
    theirs = [s for s in sources if s.startswith("torch-")]
    lead = "flash3" if "flash3" in ours else ours[0]
    ref = "torch-cudnn" if "torch-cudnn" in theirs else theirs[0]
    cell = {}
    for r in rows:
        key = (int(r["hs"]), int(r["seq_len"]), r["pass"], r["source"])
        cell.setdefault(key, {})[(r["machine"], int(r["round"]))] = (num(r["ms"]), num(r["tflops"]))
    shapes = sorted({(k[0], k[1]) for k in cell})
    names = {"torch-flash": "torch FA2", "torch-cudnn": "torch cuDNN", "torch-math": "torch math"}
    head = ["HS", "T", "pass"] + [names.get(s, s) for s in ours + theirs] + [
        "%s / %s, median" % (lead, names.get(ref, ref)), "min - max", "rounds"]
    out = []
    for hs, T in shapes:
        for p in PASSES:
            if (hs, T, p, lead) not in cell:
                continue
            med = [fmt(median([v[1] for v in cell.get((hs, T, p, s), {}).values()])) for s in ours + theirs]
            mine, other = cell[(hs, T, p, lead)], cell.get((hs, T, p, ref), {})
            ratios = [mine[k][1] / other[k][1] for k in mine if k in other and other[k][1]]
            out.append([hs, T, {"fwdbwd": "fwd+bwd"}.get(p, p)] + med + [
                "**%.2f**" % median(ratios) if ratios else "-",
                "%.2f - %.2f" % (min(ratios), max(ratios)) if ratios else "-", len(ratios)])
    text = ["TFLOP/s, median over the rounds (forward 4·B·NH·T²·HS/2 causal, backward 2.5×), and "
            "%s over %s per round:" % (lead, names.get(ref, ref)), "", md_table(head, out)]
    sums = []
    for hs, T in shapes:
        a = {k: v for k, v in cell.get((hs, T, "fwd", lead), {}).items()}
        b = cell.get((hs, T, "bwd", lead), {})
        c, d = cell.get((hs, T, "fwd", ref), {}), cell.get((hs, T, "bwd", ref), {})
        ratios = [(c[k][0] + d[k][0]) / (a[k][0] + b[k][0]) for k in a if k in b and k in c and k in d]
        if ratios:
            sums.append([hs, T, "%.2f" % median(ratios), "%.2f - %.2f" % (min(ratios), max(ratios))])
    if sums:
        text += ["", "Forward time + backward time, %s's over %s's (PyTorch's fused forward-then-"
                 "backward call costs it a little more than its two passes timed apart):" % (
                     names.get(ref, ref), lead), "",
                 md_table(["HS", "T", "median", "min - max"], sums)]
    return "\n".join(text)


# ---------------------------------------------------------------------------------------------
# attention-bursts: bench_attention.py CSVs labelled PROTOCOL.ROUND (burst: --idle-ms, sustained:
# --warmup-ms), each with the nvidia-smi samples of its run beside it (FILE.clocks: "MHz, W" lines)


def clocks_under_load(path):
    """The median SM clock (MHz) and power (W) of the samples taken under load (power at least
    half the file's highest: the idle gaps between measurements left out), or (None, None)."""
    if not os.path.isfile(path):
        return None, None
    samples = []
    for line in open(path):
        parts = [num(x.strip()) for x in line.split(",")]
        if len(parts) == 2 and None not in parts:
            samples.append(parts)
    if not samples:
        return None, None
    top = max(w for _, w in samples)
    loaded = [(mhz, w) for mhz, w in samples if w >= 0.5 * top]
    return median([m for m, _ in loaded]), median([w for _, w in loaded])


def collect_bursts(raws, env):
    rows = []
    for label, path in map(labelled, raws):
        protocol, _, rnd = label.partition(".")
        if protocol not in ("burst", "sustained") or not rnd.isdigit():
            sys.exit("results_table.py: attention-bursts takes burst.N=FILE or sustained.N=FILE, "
                     "not '%s'" % label)
        mhz, watts = clocks_under_load(path + ".clocks")
        _, recs = csv_rows(path)
        for r in recs:
            rows.append({"protocol": protocol, "round": int(rnd), "run": os.path.basename(path),
                         "source": r["source"],
                         "hs": r["hs"], "heads": r["heads"], "kv_heads": r["kv_heads"],
                         "batch": r["batch"], "seq_len": r["seq_len"], "pass": r["pass"],
                         "ms": r["ms"], "tflops": r["tflops"], "status": r["status"],
                         "sm_mhz": fmt(mhz, ".0f", ""), "power_w": fmt(watts, ".0f", "")})
    return stamp(rows, env)


def render_bursts(rows):
    names = {"torch-flash": "torch FA2", "torch-cudnn": "torch cuDNN"}
    ok = [r for r in rows if r["status"] == "ok" and num(r["tflops"])]
    sources = list(dict.fromkeys(r["source"] for r in ok))
    lead = "flash3" if "flash3" in sources else sources[0]
    ref = "torch-cudnn" if "torch-cudnn" in sources else None
    cell = {}
    for r in ok:
        shape = (int(r["hs"]), int(r["heads"]), int(r["kv_heads"]), int(r["batch"]),
                 int(r["seq_len"]))
        cell.setdefault((shape, r["pass"], r["protocol"], r["source"]), {})[int(r["round"])] = \
            num(r["tflops"])
    shapes = sorted({k[0] for k in cell}, key=lambda s: (s[0], s[1], s[4]))
    head = ["HS", "heads (kv)", "B", "T", "pass"]
    for proto in ("burst", "sustained"):
        head += ["%s, %s" % (names.get(s, s), proto) for s in sources]
        if ref:
            head.append("%s / %s, %s" % (lead, names[ref], proto))
    head.append("%s burst / sustained" % lead)
    body = []
    for shape in shapes:
        hs, nh, nkv, b, T = shape
        for p in PASSES:
            if not any((shape, p, proto, lead) in cell for proto in ("burst", "sustained")):
                continue
            line = [hs, "%d (%d)" % (nh, nkv) if nkv != nh else str(nh), b, kt(T),
                    {"fwdbwd": "fwd+bwd"}.get(p, p)]
            for proto in ("burst", "sustained"):
                for src in sources:
                    line.append(fmt(median(list(cell.get((shape, p, proto, src), {}).values()))))
                if ref:
                    a = cell.get((shape, p, proto, lead), {})
                    c = cell.get((shape, p, proto, ref), {})
                    rs = [a[k] / c[k] for k in a if k in c and c[k]]
                    line.append("**%.2f**" % median(rs) if rs else "-")
            bu = median(list(cell.get((shape, p, "burst", lead), {}).values()))
            su = median(list(cell.get((shape, p, "sustained", lead), {}).values()))
            line.append("%.2f" % (bu / su) if bu and su else "-")
            body.append(line)
    rounds = {proto: len({r["round"] for r in ok if r["protocol"] == proto})
              for proto in ("burst", "sustained")}
    out = ["TFLOP/s (forward 4·B·NH·T²·HS/2 causal, backward 2.5×), medians over %d burst and %d "
           "sustained rounds; the ratios are medians of each round's:" % (
               rounds["burst"], rounds["sustained"]), "", md_table(head, body)]
    clocks = []
    for proto in ("burst", "sustained"):
        per_run = {r["run"]: (num(r["sm_mhz"]), num(r["power_w"])) for r in rows
                   if r["protocol"] == proto and num(r["sm_mhz"])}
        if per_run:
            clocks.append([proto, fmt(median([m for m, _ in per_run.values()]), ".0f"),
                           fmt(median([w for _, w in per_run.values()]), ".0f"), len(per_run)])
    if clocks:
        out += ["", "The GPU under load (nvidia-smi every 50 ms; the samples at half the run's "
                "highest power or more, so the idle gaps are left out; medians over the runs):", "",
                md_table(["protocol", "SM clock, MHz", "power, W", "runs"], clocks)]
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------
# train-step: bench_train.py CSVs (ours and PyTorch's, one process)

def collect_train_step(raws, env):
    rows, n = [], 0
    for _, path in map(labelled, raws):
        comments, recs = csv_rows(path)
        m = re.search(r"(\S+) B=(\d+) T=(\d+)", "".join(comments))
        n += 1
        for r in recs:
            rows.append({"round": n, "model": m[1] if m else "", "batch": m[2] if m else "",
                         "seq_len": m[3] if m else "", "implementation": r["implementation"],
                         "attention": r["attention"], "tokens_per_s": r["tokens_per_s"],
                         "ms_per_step": r["ms_per_step"], "peak_bytes": r["peak_bytes"],
                         "error": r["error"]})
    return stamp(rows, env)


def render_train_step(rows):
    groups = {}
    for r in rows:
        groups.setdefault((r["model"], r["batch"], r["seq_len"], r["gpu"], r["date"], r["commit"]),
                          []).append(r)
    text = []
    for (model, B, T, gpu, date, commit), rs in groups.items():
        impls = []
        for r in rs:
            k = (r["implementation"], r["attention"])
            if k not in impls:
                impls.append(k)
        stat = {}
        for k in impls:
            sel = [r for r in rs if (r["implementation"], r["attention"]) == k]
            stat[k] = (median([num(r["tokens_per_s"]) for r in sel]),
                       median([num(r["ms_per_step"]) for r in sel]),
                       median([num(r["peak_bytes"]) for r in sel]),
                       next((r["error"] for r in sel if r["error"]), ""))
        torch_best = max((v[0] or 0 for k, v in stat.items() if k[0] == "pytorch"), default=0)
        out = []
        for k in impls:
            tok, ms, peak, err = stat[k]
            name = {"pytorch": "PyTorch"}.get(k[0], k[0])
            attn = k[1].replace("+tuned", ", `--tune-matmul`").replace("+eager", ", `--no-cuda-graphs`")
            if k[0] == "pytorch":
                name += (" torch.compile max-autotune" if attn.startswith("compile-max-")
                         else " torch.compile reduce-overhead" if attn.startswith("compile-graphs-")
                         else " torch.compile" if attn.startswith("compile-") else " eager")
                sdpa = attn.split("-")[-1]
                attn = "SDPA " + {"cudnn": "cuDNN", "flash": "FA2", "math": "math"}.get(sdpa, sdpa)
            out.append([name, attn, fmt(tok, ",.0f") if tok else err or "-", fmt(ms, ".1f"),
                        fmt(peak / GIB if peak else None, ".2f"),
                        "**%.3f×**" % (tok / torch_best) if tok and torch_best and k[0] == "flashgpt"
                        else ("%.3f×" % (tok / torch_best) if tok and torch_best else "-")])
        text += ["%s, B %s × T %s (%s, %s, %s):" % (model, B, T, gpu, date, commit), "",
                 md_table(["implementation", "attention", "tokens/s", "ms/step", "peak GiB",
                           "vs best PyTorch"], out, ["---", "---"] + ["---:"] * 4), ""]
    return "\n".join(text).rstrip()


# ---------------------------------------------------------------------------------------------
# long-context: `flashgpt train --bench` logs (the memory plan, the bench line)

def collect_long_context(raws, env):
    rows = []
    for _, path in map(labelled, raws):
        text = open(path, errors="replace").read()
        m = bench_line(text)
        rec = re.search(r"recompute: (\S+)", text)
        plan = re.search(r"^\s*total\s+([\d.]+) (\w+)", text, re.M)
        vocab = re.search(r"\bV=(\d+)", text)
        row = {"attention": m["attn"] if m else "", "recompute": rec[1] if rec else "",
               "vocab": vocab[1] if vocab else "", "batch": m["B"] if m else "",
               "seq_len": m["T"] if m else "", "ms_per_step": m["ms"] if m else "",
               "tokens_per_s": m["tok"] if m else "", "mfu_percent": (m["mfu"] or "") if m else "",
               "peak_gib": "%.2f" % gib(m["peak"], m["unit"]) if m and m["peak"] else "",
               "plan_gib": "%.2f" % gib(plan[1], plan[2]) if plan else "",
               "status": run_status(m, text)}
        rows.append(row)
    return stamp(rows, env)


def render_long_context(rows):
    out = [[kt(r["seq_len"]) if r["seq_len"] else "-", r["attention"], r["recompute"], r["vocab"],
            fmt(num(r["ms_per_step"]), ",.0f"), "**%s**" % fmt(num(r["tokens_per_s"]), ",.0f"),
            r["mfu_percent"] and r["mfu_percent"] + "%", r["peak_gib"], r["plan_gib"],
            "%s, %s" % (r["date"], r["commit"])] for r in rows]
    return md_table(["T", "attention", "--recompute", "vocabulary", "ms/step", "tokens/s", "MFU",
                     "peak GiB", "plan GiB", "date, commit"], out,
                    ["---:", "---", "---", "---:", "---:", "---:", "---:", "---:", "---:", "---"])


# ---------------------------------------------------------------------------------------------
# memory-plan: `flashgpt profile --plan-only` CSVs (LABEL = the --recompute mode and cp: "layer/cp2")

PLAN_PARTS = ("mem_parameters", "mem_gradients", "mem_optimizer", "mem_activations",
              "mem_attention_saved", "mem_attention_scratch", "mem_logits", "mem_backward_scratch",
              "mem_other")


def collect_memory_plan(raws, env):
    rows, seen = [], set()
    for label, path in map(labelled, raws):
        recompute, _, cp = label.partition("/")
        cp = cp.replace("cp", "") or "1"
        _, recs = csv_rows(path)
        for r in recs:
            if (recompute, cp, r["seq_len"]) in seen:  # one row per mode, cp and T
                continue
            seen.add((recompute, cp, r["seq_len"]))
            row = {"recompute": recompute, "cp": cp,
                   "backend": r["backend"], "batch": r["batch"], "seq_len": r["seq_len"],
                   "pred_bytes": r["pred_bytes"], "fits": r["fits"],
                   "attn_flops_step": r["attn_flops_step"]}
            row.update({k: r[k] for k in PLAN_PARTS})
            rows.append(row)
    return stamp(rows, env)


def render_memory_plan(rows):
    text = []
    single = [r for r in rows if r["cp"] == "1"]
    modes = list(dict.fromkeys(r["recompute"] for r in single))
    if len(modes) > 1:
        out = []
        for r in sorted(single, key=lambda r: (modes.index(r["recompute"]), int(r["seq_len"]))):
            g = lambda k: num(r[k]) / GIB
            out.append([kt(r["seq_len"]), r["recompute"], "%.2f" % g("pred_bytes"),
                        "%.2f" % g("mem_activations"), "%.2f" % g("mem_attention_saved"),
                        "%.2f" % g("mem_attention_scratch"),
                        "%.2f" % (g("mem_parameters") + g("mem_gradients") + g("mem_optimizer")),
                        "%.2f" % (g("mem_logits") + g("mem_backward_scratch") + g("mem_other")),
                        "{:,.0f}".format(num(r["attn_flops_step"]) / 1e12)])
        text += ["One GPU, by `--recompute` mode (GiB; attention work per training step, all "
                 "layers, forward 4·B·NH·T²·HS/2 and backward 2.5×):", "",
                 md_table(["T", "--recompute", "total", "activations", "attention saved",
                           "attention scratch", "parameters + gradients + AdamW",
                           "logits chunk + backward scratch + other", "attention TFLOP/step"], out,
                          ["---:", "---"] + ["---:"] * 7), ""]
    cps = sorted({r["cp"] for r in rows if r["recompute"] == "layer-but-attn"}, key=int)
    if len(cps) > 1:
        by = {(r["seq_len"], r["cp"]): r for r in rows if r["recompute"] == "layer-but-attn"}
        Ts = sorted({int(r["seq_len"]) for r in rows if r["recompute"] == "layer-but-attn"})
        out = [[kt(T)] + ["%.2f" % (num(by[(str(T), c)]["pred_bytes"]) / GIB) if (str(T), c) in by
                          else "-" for c in cps] for T in Ts]
        text += ["Per GPU with `--recompute layer-but-attn`, by `--cp` (GiB):", "",
                 md_table(["T"] + ["cp %s" % c for c in cps], out)]
    return "\n".join(text).rstrip()


# ---------------------------------------------------------------------------------------------
# context-parallel: bench_cp.sh runs.csv (LABEL = the attention backend)

def collect_context_parallel(raws, env):
    rows = []
    for attn, path in map(labelled, raws):
        _, recs = csv_rows(path)
        for r in recs:
            rows.append({"attention": attn or "auto", "seq_len": r["T"], "cp": r["cp"],
                         "recompute": r["recompute"], "status": r["status"],
                         "ms_per_step": r["ms_per_step"], "tokens_per_s": r["tokens_per_s"],
                         "peak_gib_per_gpu": r["peak_gib_per_gpu"],
                         "comm_wait_ms": r["comm_wait_ms"], "gpu": r.get("device") or env.get("gpu", "")})
    return stamp(rows, env)


def gpu_model(name):
    """'NVIDIA H100 80GB HBM3' -> 'H100'."""
    m = re.search(r"\b([A-Z]\d{2,4}\w*)", name or "")
    return m[1] if m else (name or "-")


def render_context_parallel(rows):
    text = []
    cps = sorted({r["cp"] for r in rows if r["cp"] != "1"}, key=int)
    for attn in sorted({r["attention"] for r in rows}, key=lambda a: a != "flash3"):
        for cp in cps:
            out = []
            gpus = list(dict.fromkeys(r["gpu"] for r in rows))  # a row per T and GPU model
            for T in sorted({int(r["seq_len"]) for r in rows if r["attention"] == attn}):
                for gpu in gpus:
                    one = [r for r in rows if r["attention"] == attn and int(r["seq_len"]) == T
                           and r["cp"] == "1" and r["status"] == "ok" and r["gpu"] == gpu]
                    many = [r for r in rows if r["attention"] == attn and int(r["seq_len"]) == T
                            and r["cp"] == cp and r["status"] == "ok" and r["gpu"] == gpu]
                    if not one or not many:
                        continue
                    a, b = one[-1], many[-1]
                    eff = num(b["tokens_per_s"]) / (int(cp) * num(a["tokens_per_s"]))
                    wait, ms = num(b["comm_wait_ms"]), num(b["ms_per_step"])
                    out.append([kt(T), fmt(num(a["tokens_per_s"]), ",.0f"),
                                fmt(num(b["tokens_per_s"]), ",.0f"), "**%.1f%%**" % (100 * eff),
                                fmt(num(a["peak_gib_per_gpu"]), ".2f"), fmt(num(b["peak_gib_per_gpu"]), ".2f"),
                                "%s (%.1f%%)" % (fmt(wait, ",.1f"), 100 * wait / ms) if wait else "-",
                                "%s, %s, %s" % (gpu_model(b["gpu"]), b["date"], b["commit"])])
            if out:
                text += ["`--attn %s`, cp %s against one GPU (efficiency = tokens/s at cp %s / "
                         "(%s × tokens/s on one GPU)):" % (attn, cp, cp, cp), "",
                         md_table(["T", "tok/s 1 GPU", "tok/s cp %s" % cp, "efficiency",
                                   "peak GiB/GPU 1 GPU", "peak GiB/GPU cp %s" % cp,
                                   "comm wait ms/step (rank 0)", "GPU, date, commit"], out,
                                  ["---:"] * 7 + ["---"]), ""]
    return "\n".join(text).rstrip()


# ---------------------------------------------------------------------------------------------
# data-parallel: bench_scaling.sh CSVs

def collect_data_parallel(raws, env):
    rows = []
    for _, path in map(labelled, raws):
        comments, recs = csv_rows(path)
        c = "".join(comments)
        T = re.search(r"T=(\d+)", c)
        B = re.search(r"per-GPU batch (\d+)", c)
        flags = re.search(r"bench_scaling\.sh ?([^(]*)\(", c)
        for r in recs:
            rows.append({"seq_len": T[1] if T else "", "batch_per_gpu": B[1] if B else "",
                         "flags": flags[1].strip() if flags else "", "gpus": r["gpus"],
                         "ms_per_step": r["ms_per_step"], "tokens_per_s": r["tokens_per_s"],
                         "tokens_per_s_per_gpu": r["tokens_per_s_per_gpu"],
                         "scaling_efficiency": r["scaling_efficiency"]})
    return stamp(rows, env)


def render_data_parallel(rows):
    out = [[r["seq_len"], r["batch_per_gpu"], r["flags"] or "-", r["gpus"],
            fmt(num(r["ms_per_step"]), ".2f"), fmt(num(r["tokens_per_s"]), ",.0f"),
            fmt(num(r["tokens_per_s_per_gpu"]), ",.0f"),
            "**%.1f%%**" % (100 * num(r["scaling_efficiency"])) if r["gpus"] != "1" else "100%",
            "%s, %s, %s" % (r["gpu"], r["date"], r["commit"])] for r in rows]
    return md_table(["T", "batch per GPU", "flags", "GPUs", "ms/step", "tokens/s",
                     "tokens/s per GPU", "scaling efficiency", "GPU, date, commit"], out,
                    ["---:", "---:", "---"] + ["---:"] * 5 + ["---"])


# ---------------------------------------------------------------------------------------------
# determinism and backends: `flashgpt bench-attention` results (LABEL = plain | deterministic)

def collect_backends(raws, env):
    rows = []
    for mode, path in map(labelled, raws):
        for r in read_bench_attention(path):
            r["mode"] = mode or "plain"
            rows.append(r)
    return stamp(rows, env)


def render_determinism(rows):
    plain = {(r["backend"], int(r["hs"]), int(r["seq_len"])): num(r["bwd_tflops"])
             for r in rows if r["mode"] == "plain"}
    det = {(r["backend"], int(r["hs"]), int(r["seq_len"])): num(r["bwd_tflops"])
           for r in rows if r["mode"] == "deterministic"}
    out = [[k[0], k[1], k[2], fmt(plain[k]), fmt(det[k]), "%.0f%%" % (100 * (1 - det[k] / plain[k]))]
           for k in sorted(plain) if k in det]
    return md_table(["backend", "HS", "T", "backward TFLOP/s", "with --deterministic", "cost"], out,
                    ["---"] + ["---:"] * 5)


def render_backends(rows):
    names = list(dict.fromkeys(r["backend"] for r in rows))
    by = {(r["backend"], int(r["hs"]), int(r["seq_len"])): num(r["fwdbwd_tflops"]) for r in rows}
    shapes = sorted({(int(r["hs"]), int(r["seq_len"])) for r in rows})
    head = ["HS", "T"] + names
    pair = ("flash", "flash1") if "flash" in names and "flash1" in names else None
    out = []
    for hs, T in shapes:
        line = [hs, T] + [fmt(by.get((n, hs, T))) for n in names]
        if pair and by.get((pair[0], hs, T)) and by.get((pair[1], hs, T)):
            line.append("%.1f×" % (by[(pair[0], hs, T)] / by[(pair[1], hs, T)]))
        out.append(line)
    if pair:
        head.append("flash / flash1")
    return "Causal forward+backward TFLOP/s:\n\n" + md_table(head, out)


# ---------------------------------------------------------------------------------------------
# profile: profile.csv of `flashgpt profile` (the data.csv keeps profile.csv's columns)

def collect_profile(raws, env):
    rows = []
    for _, path in map(labelled, raws):
        _, recs = csv_rows(path)
        rows += recs
    return stamp(rows, env)


def render_profile(rows):
    names = list(dict.fromkeys(r["backend"] for r in rows))
    by = {(r["backend"], int(r["seq_len"])): r for r in rows}
    out = []
    for T in sorted({int(r["seq_len"]) for r in rows}):
        line = [T]
        for n in names:
            r = by.get((n, T))
            ok = r is not None and r["status"] == "ok"
            line.append(fmt(num(r["tokens_per_s"]), ",.0f") if ok else (r["status"].split(":")[0] if r else "-"))
        for n in names:
            r = by.get((n, T))
            frac = num(r["attn_gemm_fraction"]) if r is not None and r["status"] == "ok" else None
            line.append("%.0f%%" % (100 * frac) if frac else "-")
        out.append(line)
    measured = [num(r["mem_ratio"]) for r in rows if num(r.get("mem_ratio"))]
    text = ["Tokens/s and attention's rate as a share of the measured bf16 GEMM ceiling, by T "
            "(B = 16384 / T from 16K down, B 1 above):", "",
            md_table(["T"] + ["%s tok/s" % n for n in names] + ["%s GEMM %%" % n for n in names], out)]
    if measured:
        text += ["", "Measured peak / memory plan over the %d points that ran: %.3f - %.3f." % (
            len(measured), min(measured), max(measured))]
    return "\n".join(text)


# ---------------------------------------------------------------------------------------------
# loss-curves: --log JSONL files (LABEL = curve/run, two runs per curve)

def collect_loss_curves(raws, env):
    rows = []
    for label, path in map(labelled, raws):
        curve, _, run = label.partition("/")
        for line in open(path):
            if '"loss"' not in line:
                continue
            j = json.loads(line)
            rows.append({"curve": curve, "run": run or os.path.basename(path), "step": j["step"],
                         "loss": j["loss"], "val_loss": j.get("val_loss", "")})
    return stamp(rows, env)


def render_loss_curves(rows):
    out = []
    for curve in dict.fromkeys(r["curve"] for r in rows):
        runs = list(dict.fromkeys(r["run"] for r in rows if r["curve"] == curve))
        if len(runs) != 2:
            continue
        a = {int(r["step"]): r for r in rows if r["curve"] == curve and r["run"] == runs[0]}
        b = {int(r["step"]): r for r in rows if r["curve"] == curve and r["run"] == runs[1]}
        steps = sorted(set(a) & set(b))
        d = [abs(num(a[s]["loss"]) - num(b[s]["loss"])) for s in steps]
        worst = steps[d.index(max(d))]
        va = [s for s in steps if a[s]["val_loss"] not in ("", None) and b[s]["val_loss"] not in ("", None)]
        last = va[-1] if va else None
        out.append([curve, "%s / %s" % tuple(runs), len(steps),
                    "%.3f → %.3f / %.3f" % (num(a[steps[0]]["loss"]), num(a[steps[-1]]["loss"]),
                                           num(b[steps[-1]]["loss"])),
                    "%.3f / %.3f (step %d)" % (num(a[last]["val_loss"]), num(b[last]["val_loss"]), last)
                    if last else "-",
                    "**%.4f**" % (sum(d) / len(d)), "%.4f (step %d)" % (max(d), worst),
                    "%s, %s" % (a[steps[0]]["date"], a[steps[0]]["commit"])])
    return md_table(["curve", "runs", "steps", "loss first → last (each run)", "val loss",
                     "mean abs. difference", "largest abs. difference", "date, commit"], out,
                    ["---", "---", "---:", "---", "---", "---:", "---", "---"])


# ---------------------------------------------------------------------------------------------
# hf-export: scripts/check_hf_export.py's report

def collect_hf_export(raws, env):
    rows = []
    for _, path in map(labelled, raws):
        for line in open(path):
            line = line.strip()
            m = re.match(r"(flashgpt eval of the export \(our reader\)|flashgpt eval|GPT2LMHeadModel)"
                         r"\s+loss ([\d.]+)", line)
            if m:
                rows.append({"key": m[1], "value": m[2]})
            m = re.match(r"\|difference\| / loss = (\S+)", line)
            if m:
                rows.append({"key": "relative difference", "value": m[1]})
            if line in ("PASS", "FAIL"):
                rows.append({"key": "result", "value": line})
            m = re.match(r"check_hf_export: (.*)", line)
            if m:
                rows.append({"key": "versions", "value": m[1]})
    return stamp(rows, env)


def render_hf_export(rows):
    return md_table(["", "value"], [[r["key"], r["value"]] for r in rows], ["---", "---:"])


# ---------------------------------------------------------------------------------------------
# gpu-tests: test logs (LABEL = the suite: bf16, fp32, memcheck, ..., multigpu)

# The kernels of a racecheck report: "Race reported between Read access at KERNEL+0x..." and
# the next line's "and Write access at KERNEL+0x..." (a demangled name may hold spaces).
RACE_KERNEL = re.compile(r"(?:between|and) \w+ access at (.+?)\+0x[0-9a-fA-F]+")


def collect_gpu_tests(raws, env):
    rows = []
    for suite, path in map(labelled, raws):
        text = open(path, errors="replace").read()
        counts = re.findall(r"^(\d+) passed, (\d+) failed, (\d+) skipped", text, re.M)
        sanit = re.findall(r"(ERROR SUMMARY: \d+ errors?|RACECHECK SUMMARY: \d+ hazards? displayed.*)", text)
        checks = re.findall(r"^(PASS|FAIL|SKIP) ([^:]+)(?::(.*))?$", text, re.M)
        if counts:
            p, f, s = counts[-1]
            rows.append({"suite": suite, "check": "tests", "result": "PASS" if f == "0" else "FAIL",
                         "detail": "%s passed, %s failed, %s skipped" % (p, f, s)})
        if sanit:
            ok = all(re.search(r": 0 (errors|hazards)", x) for x in sanit)
            detail = sanit[-1]
            # racecheck's hazards inside cuBLAS's own kernels (nvjet_*, closed source; the tests'
            # naive products) are counted apart: the check is on flashgpt's kernels. One hazard
            # in any other kernel fails it.
            racers = RACE_KERNEL.findall(text)
            if not ok and racers and all(k.startswith("nvjet_") for k in racers):
                ok = True
                detail += "; every hazard in cuBLAS's nvjet kernels, none in flashgpt's"
            rows.append({"suite": suite, "check": "compute-sanitizer", "result": "PASS" if ok else "FAIL",
                         "detail": detail})
        for res, name, detail in checks:
            m = re.search(r"max \|loss diff\| (\S+) .*?\(tolerance ([\d.]+)\)", detail or "")
            rows.append({"suite": suite, "check": name.strip(), "result": res,
                         "detail": "%s (tolerance %s)" % (m[1], m[2]) if m else (detail or "").strip()[:160]})
    return stamp(rows, env)


def render_gpu_tests(rows):
    out = [[r["suite"], r["check"], r["result"], r["detail"].replace("|", "\\|"),
            "%s, %s, %s" % (r["gpu"], r["date"], r["commit"])] for r in rows]
    return md_table(["suite", "check", "result", "detail", "GPU, date, commit"], out,
                    ["---", "---", "---", "---", "---"])


# ---------------------------------------------------------------------------------------------

# ---------------------------------------------------------------------------------------------
# document-masks: bench_attention.py --mask CSVs (attention=), `flashgpt train` logs on real
# documents (train=) and `flashgpt bench-attention` at each training point's T (share=)

DONE_LINE = re.compile(r"^done: (\d+) steps, (\d+) tokens/s, peak memory ([\d.]+) (\w+)", re.M)
START_LINE = re.compile(r"^model: L=(\d+) .*?\n.*?\| attention: ([^|]*)\|.*?batch (\d+) x (\d+)",
                        re.M | re.S)
# run.sh's first line of each training log, so that a run that fails before its opening lines
# still names its row.
POINT_LINE = re.compile(r"^point: T (\d+), --mask (\w+)(?:, --window (\d+))?(?:, --cp (\d+))?", re.M)


def collect_document_masks(raws, env):
    rows, last_train = [], None
    for label, path in map(labelled, raws):
        if label == "attention":
            _, recs = csv_rows(path)
            for r in recs:
                rows.append({"kind": "attention", "source": r["source"], "doc_len": r["doc_len"],
                             "window": r["window"], "hs": r["hs"], "heads": r["heads"],
                             "batch": r["batch"], "seq_len": r["seq_len"], "pairs": r["pairs"],
                             "pass": r["pass"], "ms": r["ms"], "tflops": r["tflops"],
                             "status": r["status"]})
        elif label == "train":
            text = open(path, errors="replace").read()
            done, start = DONE_LINE.search(text), START_LINE.search(text)
            point = POINT_LINE.search(text)
            docs = re.search(r"tokens per document: mean ([\d.]+)", text)
            left = re.search(r"leaves ([\d.]+)% of causal attention's work", text)
            T = int(start[4]) if start else (int(point[1]) if point else "")
            tok = int(done[2]) if done else 0
            mask = ("document" if "document" in start[2] else "causal") if start else (
                point[2] if point else "")
            last_train = {"kind": "train", "layers": start[1] if start else "",
                          "mask": mask, "batch": start[3] if start else "", "seq_len": T,
                          "tokens_per_s": tok or "",
                          "ms_per_step": "%.1f" % (1e3 * int(start[3]) * T / tok) if done and start else "",
                          "peak_gib": "%.2f" % gib(done[3], done[4]) if done else "",
                          "doc_mean": docs[1] if docs else "",
                          "work_left_percent": left[1] if left else ("100" if start else ""),
                          "attention_share_percent": "",
                          "status": run_status(done, text)}
            rows.append(last_train)
        elif label == "share" and last_train is not None:
            # 12 layers x (forward + backward) of one attention call at the step's shape, over
            # the step time: --recompute layer-but-attn runs attention once each way.
            att = [r for r in read_bench_attention(path) if r["status"].startswith("ok")]
            if att and last_train["ms_per_step"]:
                ms = float(last_train["ms_per_step"])
                last_train["attention_share_percent"] = "%.0f" % (
                    100.0 * int(last_train["layers"]) * att[0]["fwdbwd_ms"] / ms)
    return stamp(rows, env)


def render_document_masks(rows):
    att = [r for r in rows if r["kind"] == "attention"]
    train = [r for r in rows if r["kind"] == "train"]
    tf = {(r["source"], r["doc_len"], r["window"], r["hs"], r["seq_len"], r["pass"]):
          (num(r["tflops"]) if r["status"].startswith("ok") and num(r["tflops"]) else None)
          for r in att}
    cases = sorted({(r["doc_len"], r["window"], r["hs"]) for r in att
                    if (r["doc_len"], r["window"]) != ("0", "0")},
                   key=lambda c: (int(c[2]), int(c[0]) == 0, int(c[0]), int(c[1])))
    Ts = sorted({int(r["seq_len"]) for r in att})
    out = []
    for doc_len, window, hs in cases:
        name = ("documents %s" % doc_len if doc_len != "0" else "causal") + (
            ", window %s" % window if window != "0" else "")
        for T in Ts:
            for p in PASSES:
                k = lambda src, d=doc_len, w=window: tf.get((src, d, w, hs, str(T), p))
                f3, fl, flex, var = k("flash3"), k("flash"), k("torch-flex"), k("torch-varlen")
                causal = k("flash3", "0", "0")
                out.append([name, hs, kt(T), {"fwdbwd": "fwd+bwd"}.get(p, p), fmt(f3), fmt(fl),
                            fmt(flex), fmt(var),
                            "**%.2fx**" % (f3 / flex) if f3 and flex else "-",
                            "%.2fx" % (f3 / var) if f3 and var else "-",
                            "%.0f%%" % (100 * f3 / causal) if f3 and causal else "-"])
    text = ("TFLOP/s over the (query, key) pairs the mask leaves (forward 4·HS·NH·pairs, backward "
            "2.5x); `-`: not run (FlexAttention fails or runs out of memory there). Last column: "
            "flash3 masked against flash3 causal at the same T, both in TFLOP/s.\n\n")
    text += md_table(["mask", "HS", "T", "pass", "flash3", "flash", "FlexAttention",
                      "FA2 varlen", "flash3 / Flex", "flash3 / varlen", "flash3 masked / causal"],
                     out, ["---", "---:", "---:", "---"] + ["---:"] * 7)
    if train:
        tout = [[kt(r["seq_len"]) if r["seq_len"] else "-", r["mask"] or "-", r["doc_mean"] or "-",
                 r["work_left_percent"] + "%" if r["work_left_percent"] else "-",
                 fmt(num(r["ms_per_step"]), ",.0f"), "**%s**" % fmt(num(r["tokens_per_s"]), ",.0f"),
                 r["attention_share_percent"] and r["attention_share_percent"] + "%",
                 r["peak_gib"], r["status"]] for r in train]
        text += "\n\nd12 training on real documents (B 1, RoPE, --recompute layer-but-attn, flash3):\n\n"
        text += md_table(["T", "--mask", "mean document", "attention work left", "ms/step",
                          "tokens/s", "attention's share of the step", "peak GiB", "status"], tout,
                         ["---:", "---", "---:", "---:", "---:", "---:", "---:", "---:", "---"])
    return text


def collect_masked_cp(raws, env):
    # LABEL=log: the schedule that ran ("straight": this tree; "ring": the baseline binary, whose
    # masked ring passed every block round); the log's own lines give the mask, T and cp.
    rows = []
    for label, path in map(labelled, raws):
        text = open(path, errors="replace").read()
        done, start = DONE_LINE.search(text), START_LINE.search(text)
        point = POINT_LINE.search(text)
        cp = re.search(r"context parallel: cp=(\d+)", text)
        balance = re.search(r"busiest / mean ([\d.]+)", text)
        if start:
            window = re.search(r"window (\d+)", start[2])
            mask, window, T = ("document" if "document" in start[2] else "causal",
                               window[1] if window else "0", start[4])
        else:  # failed before its opening lines: the point run.sh wrote first
            mask, window, T = (point[2], point[3] or "0", point[1]) if point else ("", "", "")
        rows.append({"schedule": label, "mask": mask, "window": window, "seq_len": T,
                     "cp": cp[1] if cp else ((point[4] or "1") if point else "1"),
                     "tokens_per_s": done[2] if done else "",
                     "peak_gib": "%.2f" % gib(done[3], done[4]) if done else "",
                     "busiest_over_mean": balance[1] if balance else "",
                     "status": run_status(done, text)})
    return stamp(rows, env)


def render_masked_cp(rows):
    tok = {(r["schedule"], r["mask"], r["window"], r["seq_len"], r["cp"]): num(r["tokens_per_s"])
           for r in rows if r["status"] == "ok"}
    out = []
    points = {(r["mask"], r["window"], r["seq_len"], r["cp"]) for r in rows if r["seq_len"]}
    for mask, window, T, cp in sorted(points,
                                      key=lambda k: (k[0], int(k[1]), int(k[2]), int(k[3]))):
        if cp == "1":
            continue
        one = tok.get(("straight", mask, window, T, "1"))
        st, ring = tok.get(("straight", mask, window, T, cp)), tok.get(("ring", mask, window, T, cp))
        peak = [r["peak_gib"] for r in rows if (r["schedule"], r["mask"], r["window"], r["seq_len"], r["cp"])
                == ("straight", mask, window, T, cp)]
        bal = [r["busiest_over_mean"] for r in rows if (r["mask"], r["window"], r["seq_len"], r["cp"])
               == (mask, window, T, cp) and r["busiest_over_mean"]]
        name = ("documents" if mask == "document" else "causal") + (", window %s" % window if window != "0" else "")
        out.append([name, kt(int(T)), cp, fmt(one, ",.0f"), "**%s**" % fmt(st, ",.0f"),
                    "%.0f%%" % (100 * st / (int(cp) * one)) if st and one else "-",
                    fmt(ring, ",.0f"), "**%.2fx**" % (st / ring) if st and ring else "-",
                    bal[0] if bal else "-", peak[0] if peak and peak[0] else "-"])
    text = ("tokens/s of `train` (the `done:` line); efficiency = tokens/s at cp N / (N x tokens/s "
            "on one GPU); ring = the same run with the baseline binary, whose masked ring passed "
            "every K/V block round; busiest / mean: the start line's load balance of the mask's "
            "work over the first windows.\n\n")
    text += md_table(["mask", "T", "cp", "tok/s 1 GPU", "tok/s straight", "efficiency",
                      "tok/s ring", "straight / ring", "busiest / mean", "peak GiB/GPU"], out,
                     ["---", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:"])
    return text


# ---------------------------------------------------------------------------------------------
# long-context-2m: `flashgpt train` logs of d12 at T = 2M with --cp 2 (LABEL=log, the label
# naming the run); every step's line, the memory plan's total and the `done:` line

STEP_LINE = re.compile(r"^step\s+(\d+)/(\d+) \| loss ([\d.]+) \|.*?\| ([\d.]+) ms \| (\d+) tok/s", re.M)


def collect_long_context_2m(raws, env):
    rows = []
    for label, path in map(labelled, raws):
        text = open(path, errors="replace").read()
        done, start = DONE_LINE.search(text), START_LINE.search(text)
        plan = re.search(r"^\s*total\s+([\d.]+) (\w+)", text, re.M)
        cp = re.search(r"context parallel: cp=(\d+)", text)
        steps = STEP_LINE.findall(text)
        for st, _, loss, ms, tok in steps:
            rows.append({"kind": "step", "run": label, "step": st, "loss": loss, "ms": ms,
                         "tokens_per_s": tok})
        ms, tok = [num(x[3]) for x in steps], [num(x[4]) for x in steps]
        point = POINT_LINE.search(text)  # run.sh's first line: the run even if it failed at once
        if start:
            mask, T = "document" if "document" in start[2] else "causal", start[4]
        else:
            mask, T = (point[2], point[1]) if point else ("", "")
        rows.append({"kind": "run", "run": label, "mask": mask, "seq_len": T,
                     "cp": cp[1] if cp else ((point[4] or "1") if point else "1"),
                     "steps": str(len(steps)), "loss_first": steps[0][2] if steps else "",
                     "loss_last": steps[-1][2] if steps else "",
                     # the first step also pays the start-up (cuBLAS heuristics, first touches)
                     "ms_per_step": "%.0f" % median(ms[1:] or ms) if ms else "",
                     "tokens_per_s": "%.0f" % median(tok[1:] or tok) if tok else "",
                     "peak_gib": "%.2f" % gib(done[3], done[4]) if done else "",
                     "plan_gib": "%.2f" % gib(plan[1], plan[2]) if plan else "",
                     "status": run_status(done, text)})
    return stamp(rows, env)


def render_long_context_2m(rows):
    runs = [r for r in rows if r["kind"] == "run"]
    out = [[r["run"], kt(int(r["seq_len"])) if r["seq_len"] else "-", r["cp"], r["steps"],
            "%s -> %s" % (r["loss_first"], r["loss_last"]) if r["loss_first"] else "-",
            fmt(num(r["ms_per_step"]), ",.0f"), "**%s**" % fmt(num(r["tokens_per_s"]), ",.0f"),
            r["peak_gib"] or "-", r["plan_gib"] or "-", r["status"]] for r in runs]
    text = ("ms/step and tokens/s: the median of the steps after the first (the only step when "
            "there is one; tokens/s count the whole sequence, both GPUs); peak: rank 0's "
            "measured peak; plan: the memory plan's total per GPU, printed at the start (NCCL's "
            "buffers come on top).\n\n")
    text += md_table(["run", "T", "cp", "steps", "loss, first -> last step", "ms/step", "tokens/s",
                      "peak GiB/GPU", "plan GiB/GPU", "status"], out,
                     ["---", "---:", "---:", "---:", "---", "---:", "---:", "---:", "---:", "---"])
    steps = [[r["run"], r["step"], r["loss"], fmt(num(r["ms"]), ",.0f"), fmt(num(r["tokens_per_s"]), ",.0f")]
             for r in rows if r["kind"] == "step"]
    text += "\n\nEvery step:\n\n" + md_table(["run", "step", "loss", "ms", "tokens/s"], steps,
                                               ["---", "---:", "---:", "---:", "---:"])
    return text


# ---------------------------------------------------------------------------------------------
# step-breakdown: ncu's per-kernel durations of a `train --bench` step (ncu=, grouped by
# scripts/step_breakdown.py) and the same step without ncu (bench=)

def collect_step_breakdown(raws, env):
    rows = []
    for label, path in map(labelled, raws):
        if label == "ncu":
            steps = step_breakdown.steps_seen(path)
            if not steps:
                sys.exit("results_table.py: no 'step k/M' line in '%s'" % path)
            kernels, setup = step_breakdown.breakdown(step_breakdown.read_ncu(path), steps)
            for kind, rs in (("kernel", kernels), ("setup", setup)):
                rows += [{"kind": kind, "kernel": r["kernel"], "category": r["category"],
                          "launches_per_step": "%g" % r["launches"],
                          "ms_per_step": "%.4f" % r["ms"]} for r in rs]
        elif label == "bench":
            b = step_breakdown.bench_numbers(path)
            if not b:
                sys.exit("results_table.py: no 'median ... MFU' line in '%s'" % path)
            rows.append({"kind": "step", "ms_per_step": b[0], "tokens_per_s": b[1],
                         "mfu_percent": b[2]})
        else:
            sys.exit("results_table.py: step-breakdown takes ncu=FILE and bench=FILE, not '%s'" % label)
    return stamp(rows, env)


def render_step_breakdown(rows):
    def of(kind):
        return [{"kernel": r["kernel"], "category": r["category"],
                 "launches": num(r["launches_per_step"]), "ms": num(r["ms_per_step"])}
                for r in rows if r["kind"] == kind]
    step = next((r for r in rows if r["kind"] == "step"), None)
    bench = (num(step["ms_per_step"]), int(num(step["tokens_per_s"])),
             num(step["mfu_percent"])) if step else None
    return step_breakdown.report(of("kernel"), of("setup"), bench, 12)


# ---------------------------------------------------------------------------------------------
# attention-ceilings: the wgmma and MUFU.EX2 rates alone (`bench-kernels --only tensor`, tensor=,
# one file per round) and the flash3 kernels' pipe shares under ncu (ncu=, one kernel each,
# `--csv --print-units base`, T 16K, B 1)

RATE = re.compile(r"^  (?P<what>\S.*?)\s{2,}(?P<wgs>\d|-)\s+(?P<rate>[\d.]+)\s+(?P<clk>[\d.]+)\s+(?P<pct>[\d.]+)%")
NCU_METRICS = {"gpu__time_duration.sum": "duration_us",
               "sm__cycles_elapsed.avg.per_second": "clock_ghz",
               "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active": "tensor_pct",
               "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active": "mufu_pct",
               "smsp__issue_active.avg.pct_of_peak_sustained_active": "issue_pct",
               "smsp__warps_eligible.avg.per_cycle_active": "eligible_warps",
               "l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed":
                   "smem_pct"}
# Where the warps wait: cycles stalled per issued instruction, by reason (ncu's warp states; the
# column names of the claim's data.csv, then its table's headings).
NCU_STALLS = [("wait", "stall_wait", "fixed-latency dependency"),
              ("long_scoreboard", "stall_long_sb", "long scoreboard"),
              ("barrier", "stall_barrier", "barrier"),
              ("dispatch_stall", "stall_dispatch", "dispatch"),
              ("mio_throttle", "stall_mio", "MIO throttle"),
              ("short_scoreboard", "stall_short_sb", "short scoreboard"),
              ("gmma", "stall_gmma", "wgmma"),
              ("not_selected", "stall_not_selected", "not selected")]
NCU_METRICS.update({"smsp__average_warps_issue_stalled_%s_per_issue_active.ratio" % m: key
                    for m, key, _ in NCU_STALLS})


def read_ncu_metrics(path):
    """{metric: value} of the one kernel in an `ncu --csv --print-units base` file; its name."""
    text = open(path, errors="replace").read()
    start = text.find('"ID","Process ID"')
    if start < 0:
        sys.exit("results_table.py: no ncu CSV header in '%s'" % path)
    vals, kernel = {}, None
    for r in csv.DictReader(io.StringIO(text[start:])):
        key = NCU_METRICS.get(r.get("Metric Name"))
        if key is None:
            continue
        if kernel is not None and r["Kernel Name"] != kernel:
            sys.exit("results_table.py: '%s' holds more than one kernel" % path)
        kernel = r["Kernel Name"]
        v = float(r["Metric Value"].replace(",", ""))
        unit = r["Metric Unit"].strip()
        if key == "duration_us":
            if unit not in step_breakdown.UNIT_NS:
                sys.exit("results_table.py: unknown time unit '%s' in '%s'" % (unit, path))
            v = v * step_breakdown.UNIT_NS[unit] / 1e3
        elif key == "clock_ghz":
            v = v / 1e9 if v > 1e6 else v  # base units: cycles per second
        vals[key] = v
    missing = [k for k in NCU_METRICS.values() if k not in vals]
    if missing:
        sys.exit("results_table.py: '%s' lacks %s" % (path, ", ".join(missing)))
    return kernel, vals


def collect_attention_ceilings(raws, env):
    rows, rnd = [], 0
    for label, path in map(labelled, raws):
        if label == "tensor":
            rnd += 1
            text = open(path, errors="replace").read()
            sms = re.search(r"\((\d+) SMs\)", text)
            found = 0
            for line in text.splitlines():
                m = RATE.match(line)
                if not m:
                    continue
                found += 1
                mufu = m["what"].startswith("MUFU")
                rows.append({"kind": "rate", "what": m["what"], "wgs": "" if mufu else m["wgs"],
                             "round": rnd, "rate": m["rate"],
                             "unit": "Gop/s" if mufu else "TFLOP/s", "per_sm_clock": m["clk"],
                             "pct_of_peak": m["pct"], "sms": sms[1] if sms else ""})
            if not found:
                sys.exit("results_table.py: no rate lines in '%s'; was it written by "
                         "`flashgpt bench-kernels --only tensor`?" % path)
        elif label == "ncu":
            kernel, v = read_ncu_metrics(path)
            m = re.search(r"flash3_(fwd|bwd)_kernel<(?:flash3::)?(?:Fwd3|Bwd3)Tile<(\d+)", kernel)
            if not m:
                sys.exit("results_table.py: '%s' is not a flash3 kernel" % kernel)
            rows.append({"kind": "kernel", "what": "flash3 " + ("forward" if m[1] == "fwd" else "backward"),
                         "hs": m[2], "duration_us": "%.1f" % v["duration_us"],
                         "clock_ghz": "%.3f" % v["clock_ghz"], "tensor_pct": v["tensor_pct"],
                         "mufu_pct": v["mufu_pct"], "issue_pct": v["issue_pct"],
                         "eligible_warps": v["eligible_warps"], "smem_pct": v["smem_pct"],
                         **{key: v[key] for _, key, _ in NCU_STALLS}})
        else:
            sys.exit("results_table.py: attention-ceilings takes tensor=FILE and ncu=FILE, not '%s'" % label)
    return stamp(rows, env)


def render_attention_ceilings(rows, T=16384, B=1):
    rates = [r for r in rows if r["kind"] == "rate"]
    out, seen = [], []
    for r in rates:
        key = (r["what"], r["wgs"])
        if key not in seen:
            seen.append(key)
    sms = next((int(num(r["sms"])) for r in rates if num(r.get("sms"))), None)
    body = []
    for what, wgs in seen:
        rs = [r for r in rates if (r["what"], r["wgs"]) == (what, wgs)]
        body.append([what, wgs or "-", "%s %s" % (fmt(median([num(r["rate"]) for r in rs])), rs[0]["unit"]),
                     fmt(median([num(r["per_sm_clock"]) for r in rs]), ".0f" if wgs else ".2f"),
                     fmt(median([num(r["pct_of_peak"]) for r in rs])) + "%"])
    if body:
        out.append("Each unit alone (`bench-kernels --only tensor`: a product's k-steps issued back to "
                   "back, then waited for; no loads, no softmax; medians of %d rounds; the peak per SM "
                   "and clock: 4096 bf16 FLOP, 16 EX2):\n" % len({r["round"] for r in rates}))
        out.append(md_table(["product", "warpgroups per SM", "rate", "per SM and clock", "of peak"],
                            body))
    kernels = [r for r in rows if r["kind"] == "kernel"]
    if kernels:
        body = []
        for r in kernels:
            hs = int(num(r["hs"]))
            nh = 12 if hs == 64 else 16
            flops = 2.0 * B * nh * T * T * hs * (1.0 if r["what"].endswith("forward") else 2.5)
            us, ghz = num(r["duration_us"]), num(r["clock_ghz"])
            tf = flops / (us * 1e-6) / 1e12
            peak = 4096.0 * sms * ghz * 1e9 / 1e12 if sms else None
            body.append([r["what"], str(hs), fmt(us), fmt(ghz, ".2f"), fmt(tf),
                         fmt(100.0 * tf / peak) + "%" if peak else "-",
                         fmt(num(r["tensor_pct"])) + "%", fmt(num(r["mufu_pct"])) + "%",
                         fmt(num(r["issue_pct"])) + "%"])
        out.append("\nThe flash3 kernels under ncu (T %s, B %d, causal; ncu locks the clocks; "
                   "TFLOP/s by DESIGN.md's count, the causal half, at that clock):\n" % (kt(T), B))
        out.append(md_table(["kernel", "HS", "us", "GHz", "TFLOP/s", "of the tensor peak",
                             "tensor pipe busy", "MUFU busy", "issue slots busy"], body))
        out.append("\nWhere their warps wait (the same profiles): warps eligible to issue per "
                   "scheduler and cycle, the shared-memory pipe's wavefronts against its peak, "
                   "and the cycles a warp stalls per issued instruction by reason (ncu's warp "
                   "states, every warp counted: the producers' waits for free stages too):\n")
        out.append(md_table(["kernel", "HS", "eligible warps", "shared-memory pipe"] +
                            [title for _, _, title in NCU_STALLS],
                            [[r["what"], r["hs"], fmt(num(r["eligible_warps"]), ".2f"),
                              fmt(num(r["smem_pct"])) + "%"] +
                             [fmt(num(r[key]), ".2f") for _, key, _ in NCU_STALLS]
                             for r in kernels]))
    return "\n".join(out)


CLAIMS = {
    "attention-vs-sdpa": (collect_attention, render_attention),
    "training-step": (collect_train_step, render_train_step),
    "long-context": (collect_long_context, render_long_context),
    "memory-plan": (collect_memory_plan, render_memory_plan),
    "context-parallel": (collect_context_parallel, render_context_parallel),
    "data-parallel": (collect_data_parallel, render_data_parallel),
    "determinism": (collect_backends, render_determinism),
    "fa1-vs-fa2": (collect_backends, render_backends),
    "profile-sweep": (collect_profile, render_profile),
    "loss-curves": (collect_loss_curves, render_loss_curves),
    "hf-export": (collect_hf_export, render_hf_export),
    "gpu-tests": (collect_gpu_tests, render_gpu_tests),
    "document-masks": (collect_document_masks, render_document_masks),
    "masked-context-parallel": (collect_masked_cp, render_masked_cp),
    "step-breakdown": (collect_step_breakdown, render_step_breakdown),
    "long-context-2m": (collect_long_context_2m, render_long_context_2m),
    "attention-ceilings": (collect_attention_ceilings, render_attention_ceilings),
    "attention-bursts": (collect_bursts, render_bursts),
}


def write_csv(path, rows):
    keys = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys, lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({k: "" if r.get(k) is None else r.get(k) for k in keys})


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("claim", choices=sorted(CLAIMS))
    ap.add_argument("raw", nargs="*", help="driver outputs (LABEL=file where the claim needs one)")
    ap.add_argument("--out", help="folder for data.csv and table.md (its run.sh's folder)")
    ap.add_argument("--env", help="env.txt of scripts/results_lib.sh's results_env")
    ap.add_argument("--title", default="", help="table.md's first line")
    ap.add_argument("--command", default="", help="the command that made the raw files")
    ap.add_argument("--render", metavar="DATA_CSV", help="print the tables of a data.csv")
    args = ap.parse_intermixed_args()  # the raw files may follow the options
    collect, render = CLAIMS[args.claim]
    if args.render:
        print(render(csv_rows(args.render)[1]))
        return
    if not args.out or not args.raw:
        ap.error("give --out DIR and the raw files (or --render data.csv)")
    for raw in args.raw:
        if not os.path.isfile(labelled(raw)[1]):
            sys.exit("results_table.py: '%s' not found; did the driver run?" % labelled(raw)[1])
    env = read_env(args.env)
    rows = collect(args.raw, env)
    if not rows:
        sys.exit("results_table.py: nothing to tabulate in %s" % " ".join(args.raw))
    data = os.path.join(args.out, "data.csv")
    write_csv(data, rows)
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write("# %s\n\n" % (args.title or args.claim))
        for key in ("gpu", "gpus", "driver", "cuda", "torch", "cudnn", "commit", "date"):
            if key in env:
                f.write("- %s: %s\n" % (key, env[key]))
        if args.command:
            f.write("- command: `%s`\n" % args.command)
        f.write("\n" + render(csv_rows(data)[1]) + "\n")
    print("wrote %s and %s" % (data, os.path.join(args.out, "table.md")))


if __name__ == "__main__":
    main()
