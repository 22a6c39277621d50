#!/usr/bin/env python3
"""plot_cp.py — the table and plot of scripts/bench_cp.sh (context parallelism).

    python3 scripts/plot_cp.py OUT/runs.csv [MORE/runs.csv ...] --out DIR
    python3 scripts/plot_cp.py runs.csv --real-run 1048576:2:train_1m_cp2.jsonl --out DIR

--real-run T:CP:LOG.jsonl adds a point from a real `flashgpt train --log` run at --seq-len T,
--batch 1, --cp CP (at T = 1M a --bench run costs as much as a real one): the median of its
steps' ms, tokens/s = T / that, and its peak memory; its recompute column says "real run".

Reads the per-run rows bench_cp.sh writes (several files merge: a later row of the same T and
cp replaces an earlier one, and a measured row beats a failed one), and writes into DIR:
  (--name NAME: NAME.png, NAME.csv, NAME_table.md)
  table.md      T | tok/s cp 1 | tok/s cp N | efficiency | peak GiB per GPU cp 1 | cp N |
                comm wait | recompute (also printed)
  bench_cp.csv  the same, one row per T
  bench_cp.png  tokens/s and peak memory per GPU against T, cp 1 and cp N
efficiency = tok/s(cp N) / (N x tok/s(cp 1)): 1.0 is perfect scaling over the N GPUs.
A file already under one of those names is replaced only when it is this script's own earlier
output (scripts/output_files.py); anything else is refused before the first file is written.
"""
import argparse
import csv
import os
import sys

from output_files import check_output, is_own_png, png_software, starts_with_line

SCRIPT = "scripts/plot_cp.py"
TABLE_START = "| T | tok/s cp 1 |"
CSV_START = "T,tokens_per_s_cp1,"


def load(paths):
    runs = {}  # (T, cp) -> row
    for path in paths:
        with open(path) as f:
            for row in csv.DictReader(f):
                key = (int(row["T"]), int(row["cp"]))
                old = runs.get(key)
                if old is None or row["status"] == "ok" or old["status"] != "ok":
                    runs[key] = row
    return runs


def load_real_run(spec, device):
    """T:CP:PATH of a `train --log` jsonl (B 1) -> a runs.csv row."""
    T, cp, path = spec.split(":", 2)
    import json
    steps = [json.loads(l) for l in open(path) if '"ms"' in l]
    if not steps:
        sys.exit(f"plot_cp.py: --real-run {spec}: no steps in {path}")
    ms = sorted(s["ms"] for s in steps)[len(steps) // 2]
    peak = max(s.get("peak_mem_bytes", 0) for s in steps) / 2**30
    return {"T": T, "cp": cp, "recompute": f"real run ({len(steps)} steps)", "status": "ok",
            "ms_per_step": f"{ms:.2f}", "tokens_per_s": f"{int(T) / (ms / 1e3):.0f}",
            "peak_gib_per_gpu": f"{peak:.3f}" if peak else "", "comm_wait_ms": "",
            "device": device, "log": path}


def num(row, field):
    try:
        return float(row[field]) if row and row.get(field) else None
    except ValueError:
        return None


def tokens(T):
    return f"{T // 1048576}M" if T % 1048576 == 0 else f"{T // 1024}K" if T % 1024 == 0 else str(T)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", help="runs.csv files of bench_cp.sh")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--real-run", action="append", default=[], metavar="T:CP:LOG.jsonl",
                    help="a point from a real train run's --log (B 1); replaces a bench row")
    ap.add_argument("--device", default="", help="the GPU of the --real-run logs")
    ap.add_argument("--attn", default="", help="the attention backend, for the plot's title")
    ap.add_argument("--name", default="bench_cp", help="file names: NAME.png, NAME.csv")
    args = ap.parse_args()
    runs = load(args.runs)
    for spec in args.real_run:
        row = load_real_run(spec, args.device)
        runs[(int(row["T"]), int(row["cp"]))] = row
    if not runs:
        sys.exit("plot_cp.py: no runs in " + ", ".join(args.runs))
    cps = sorted({cp for _, cp in runs if cp > 1})
    N = cps[-1] if cps else 2
    Ts = sorted({T for T, _ in runs})
    table_path = os.path.join(args.out, args.name + "_table.md" if args.name != "bench_cp" else "table.md")
    csv_path = os.path.join(args.out, args.name + ".csv")
    png = os.path.join(args.out, args.name + ".png")
    for path, own, what in ((table_path, starts_with_line(TABLE_START), "a table of " + SCRIPT),
                            (csv_path, starts_with_line(CSV_START), "a CSV of " + SCRIPT),
                            (png, is_own_png(SCRIPT), "a plot of " + SCRIPT)):
        check_output(path, own, what, "plot_cp.py")
    os.makedirs(args.out, exist_ok=True)

    def cell(row, field, fmt):
        v = num(row, field)
        if v is not None:
            return fmt.format(v)
        return row["status"] if row else "-"

    head = ["T", "tok/s cp 1", f"tok/s cp {N}", f"efficiency cp{N}/({N}*cp1)",
            "peak GiB/GPU cp 1", f"peak GiB/GPU cp {N}", f"comm wait ms cp {N}", "recompute cp 1 / cp N"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    table = []
    for T in Ts:
        r1, rn = runs.get((T, 1)), runs.get((T, N))
        t1, tn = num(r1, "tokens_per_s"), num(rn, "tokens_per_s")
        eff = tn / (N * t1) if t1 and tn else None
        rec = f"{(r1 or {}).get('recompute') or '-'} / {(rn or {}).get('recompute') or '-'}"
        lines.append("| " + " | ".join([
            tokens(T), cell(r1, "tokens_per_s", "{:.0f}"), cell(rn, "tokens_per_s", "{:.0f}"),
            f"{eff:.1%}" if eff is not None else "-", cell(r1, "peak_gib_per_gpu", "{:.2f}"),
            cell(rn, "peak_gib_per_gpu", "{:.2f}"),
            f"{num(rn, 'comm_wait_ms'):.1f}" if num(rn, "comm_wait_ms") is not None else "-", rec]) + " |")
        table.append({"T": T, "tokens_per_s_cp1": t1, f"tokens_per_s_cp{N}": tn, "efficiency": eff,
                      "peak_gib_per_gpu_cp1": num(r1, "peak_gib_per_gpu"),
                      f"peak_gib_per_gpu_cp{N}": num(rn, "peak_gib_per_gpu"),
                      f"comm_wait_ms_cp{N}": num(rn, "comm_wait_ms"),
                      "status_cp1": r1["status"] if r1 else "", f"status_cp{N}": rn["status"] if rn else "",
                      "recompute_cp1": r1["recompute"] if r1 else "",
                      f"recompute_cp{N}": rn["recompute"] if rn else ""})
    devices = sorted({r["device"] for r in runs.values() if r.get("device")})
    text = "\n".join(lines) + f"\n\ndevice: {', '.join(devices) or 'unknown'}\n"
    print(text)
    with open(table_path, "w") as f:
        f.write(text)
    with open(csv_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(table[0].keys()))
        w.writeheader()
        for row in table:
            w.writerow({k: ("" if v is None else v) for k, v in row.items()})

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_cp.py: no matplotlib; table and CSV written, no plot", file=sys.stderr)
        return
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for cp, style in ((1, "o-"), (N, "s-")):
        pts = [(T, num(runs.get((T, cp)), "tokens_per_s"), num(runs.get((T, cp)), "peak_gib_per_gpu"))
               for T in Ts]
        label = "1 GPU" if cp == 1 else f"cp {cp} ({cp} GPUs)"
        tp = [(T, t) for T, t, _ in pts if t is not None]
        mp = [(T, m) for T, _, m in pts if m is not None]
        if tp:
            ax1.plot([p[0] for p in tp], [p[1] for p in tp], style, label=label)
        if mp:
            ax2.plot([p[0] for p in mp], [p[1] for p in mp], style, label=label)
    for ax, ylabel in ((ax1, "tokens/s (whole run)"), (ax2, "peak memory per GPU (GiB)")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(Ts)
        ax.set_xticklabels([tokens(T) for T in Ts])
        ax.set_xlabel("sequence length T")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        ax.legend()
    attn = f", --attn {args.attn}" if args.attn else ""
    fig.suptitle(f"context parallelism, {', '.join(devices) or ''}: d12 RoPE B=1{attn}")
    fig.tight_layout()
    fig.savefig(png, dpi=120, metadata={"Software": png_software(SCRIPT)})
    print(f"wrote {png}")


if __name__ == "__main__":
    main()
