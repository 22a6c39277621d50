#!/usr/bin/env python3
"""step_breakdown.py — where a training step's GPU time goes, per kernel and per category, from
ncu's per-kernel durations.

  ncu --metrics gpu__time_duration.sum --csv --print-units base \\
      build/flashgpt train --bench ... --bench-warmup 1 --bench-steps 1 > ncu.csv
  python3 scripts/step_breakdown.py ncu.csv [--steps 2] [--bench-log step.log] [--top 12]

--steps: the training steps ncu saw (warm-up + timed: 2 for the command above; by default read
from the program's output, which ncu's CSV holds); every time is divided by it. A kernel launched fewer times than that (the model's set-up, e.g. the first
copy of the master weights to bf16) is not part of a step and is left out, with a line saying
so. --bench-log: a `train --bench` log of the same command without ncu, whose median step and
MFU the table quotes: under ncu kernels run one at a time at locked clocks, so their sum is
longer than the real step.

Categories, by kernel name (the first rule that matches):
  GEMM          cuBLASLt's products (nvjet / xmma / cutlass kernels) and its split-K reduction
  attention     the attention backends' kernels (flash3, flash, flash1, naive, decode)
  classifier    fused softmax + cross-entropy + dlogits, and the mean of the losses
  layernorm     LayerNorm forward and backward (the backward's dgamma/dbeta first stage)
  dbias         matmul_backward_bias's separate pass over dout (bias_partials) and its scaling
  reductions    reduce_partials, the second stage of LayerNorm's and dbias's column sums
  adamw         AdamW and the gradient norm
  other         everything else (embeddings, GELU / residual fallbacks, the sort of tokens, ...)
The script is imported by scripts/results_table.py (the step-breakdown claim).
"""
import argparse
import csv
import io
import re
import sys

CATEGORIES = (
    ("GEMM", re.compile(r"nvjet|xmma_gemm|cutlass|gemm|splitKreduce|cublas", re.I)),
    ("attention", re.compile(r"flash|attention|attn", re.I)),
    ("classifier", re.compile(r"classifier_kernel|mean_loss_kernel")),
    ("layernorm", re.compile(r"layernorm_")),
    ("dbias", re.compile(r"bias_partials_kernel|<unnamed>::scale_kernel\b")),
    ("reductions", re.compile(r"reduce_partials_kernel")),
    ("adamw", re.compile(r"adamw_kernel|norm_partials_kernel|norm_final_kernel")),
)
UNIT_NS = {"ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6,
           "s": 1e9, "second": 1e9}
BENCH = re.compile(r"median (?P<ms>[\d.]+) ms/step \| (?P<tok>\d+) tokens/s.*?MFU (?P<mfu>[\d.]+)%")


def category(name):
    for cat, rule in CATEGORIES:
        if rule.search(name):
            return cat
    return "other"


def short_name(name):
    """The kernel's name without its parameter list (templates kept)."""
    depth, out = 0, []
    for ch in name:
        if ch == "(" and depth == 0 and out and out[-1] not in " <":
            break
        depth += ch in "<"
        depth -= ch in ">"
        out.append(ch)
    name = "".join(out)
    return re.sub(r"^void ", "", name).strip()


def read_ncu(path):
    """[(kernel name, ns)] in launch order, from ncu's --csv output (lines before its header,
    the program's own output, are skipped)."""
    text = open(path, errors="replace").read()
    start = text.find('"ID","Process ID"')
    if start < 0:
        sys.exit("step_breakdown.py: no ncu CSV header in '%s'; was it written by "
                 "`ncu --csv --metrics gpu__time_duration.sum`?" % path)
    launches = []
    for r in csv.DictReader(io.StringIO(text[start:])):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        unit = UNIT_NS.get(r["Metric Unit"].strip())
        if unit is None:
            sys.exit("step_breakdown.py: unknown time unit '%s' in '%s'" % (r["Metric Unit"], path))
        launches.append((r["Kernel Name"], float(r["Metric Value"].replace(",", "")) * unit))
    if not launches:
        sys.exit("step_breakdown.py: no gpu__time_duration.sum rows in '%s'" % path)
    return launches


def steps_seen(path):
    """The steps the profiled `train --bench` ran (M of its last "step k/M" line), or None."""
    found = re.findall(r"^step\s+\d+/(\d+) \|", open(path, errors="replace").read(), re.M)
    return int(found[-1]) if found else None


def breakdown(launches, steps):
    """Per kernel name: {name, category, launches, ms} per step, longest first; and the
    kernels left out as set-up (fewer launches than steps)."""
    per = {}
    for name, ns in launches:
        k = per.setdefault(name, [0, 0.0])
        k[0] += 1
        k[1] += ns
    kernels, setup = [], []
    for name, (n, ns) in per.items():
        row = {"kernel": short_name(name), "category": category(name),
               "launches": n / steps, "ms": ns / 1e6 / steps}
        (setup if n < steps else kernels).append(row)
    kernels.sort(key=lambda r: -r["ms"])
    return kernels, setup


def by_category(kernels):
    """[(category, ms per step, launches per step)] in CATEGORIES order, then other."""
    tot = {}
    for r in kernels:
        t = tot.setdefault(r["category"], [0.0, 0.0])
        t[0] += r["ms"]
        t[1] += r["launches"]
    order = [c for c, _ in CATEGORIES] + ["other"]
    return [(c, tot[c][0], tot[c][1]) for c in order if c in tot]


def bench_numbers(path):
    """(median ms/step, tokens/s, MFU %) from a `train --bench` log, or None."""
    for line in open(path, errors="replace"):
        m = BENCH.search(line)
        if m:
            return float(m["ms"]), int(m["tok"]), float(m["mfu"])
    return None


def table(head, rows, left=1):
    """A markdown table: the first `left` columns left-aligned, the others right-aligned."""
    align = ["---"] * left + ["---:"] * (len(head) - left)
    out = ["| " + " | ".join(head) + " |", "| " + " | ".join(align) + " |"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def report(kernels, setup, bench, top):
    total = sum(r["ms"] for r in kernels)
    lines = []
    if bench:
        lines.append("real step (train --bench, no ncu): %.2f ms, %d tokens/s, MFU %.1f%% "
                     "(llm.c: 6 x params + 6 x L x C x T FLOPs per token)" % bench)
    lines.append("GPU time per step under ncu: %.2f ms in %.0f launches" %
                 (total, sum(r["launches"] for r in kernels)))
    lines.append("")
    lines.append(table(["category", "ms per step", "% of GPU time", "launches per step"],
                       [[c, "%.2f" % ms, "%.1f%%" % (100 * ms / total), "%.0f" % n]
                        for c, ms, n in by_category(kernels)]))
    lines.append("")
    lines.append(table(["kernel", "category", "ms per step", "%", "launches per step"],
                       [[r["kernel"].replace("|", "\\|")[:110], r["category"], "%.3f" % r["ms"],
                         "%.1f%%" % (100 * r["ms"] / total), "%g" % r["launches"]]
                        for r in kernels[:top]], left=2))
    if setup:
        lines.append("")
        lines.append("left out as set-up (fewer launches than steps): " + ", ".join(
            "%s (%.3f ms)" % (r["kernel"], r["ms"]) for r in setup))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ncu_csv", help="ncu --csv output with gpu__time_duration.sum")
    ap.add_argument("--steps", type=int,
                    help="training steps ncu saw (default: read from the program's output in the "
                    "CSV, its last 'step k/M' line)")
    ap.add_argument("--bench-log", help="`train --bench` log of the same step without ncu")
    ap.add_argument("--top", type=int, default=12, help="kernels listed (default 12)")
    args = ap.parse_args()
    launches = read_ncu(args.ncu_csv)
    steps = args.steps or steps_seen(args.ncu_csv)
    if not steps or steps < 1:
        ap.error("give --steps N (at least 1): no 'step k/M' line in %s" % args.ncu_csv)
    kernels, setup = breakdown(launches, steps)
    bench = bench_numbers(args.bench_log) if args.bench_log else None
    if args.bench_log and not bench:
        sys.exit("step_breakdown.py: no 'median ... ms/step ... MFU' line in '%s'" % args.bench_log)
    print(report(kernels, setup, bench, args.top))


if __name__ == "__main__":
    main()
