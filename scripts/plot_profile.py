#!/usr/bin/env python3
"""Plots of `flashgpt profile` (bench/profile.h): reads profile.csv (or plan.csv from
--plan-only) and writes PNGs into the output directory.

  memory_vs_T.png             peak device memory vs T, log-log: measured (solid, one line per
                              backend), predicted by the memory plan (dashed), points that did
                              not fit marked x at their predicted need, the device's capacity as
                              a horizontal line
  tokens_per_s_vs_T.png       training throughput vs T (measured)
  predicted_vs_measured.png   memory (plan vs measured peak, with the 5% band) and attention time
                              per step (roofline vs CUDA events), one point per (backend, T)

usage: python3 scripts/plot_profile.py runs/profile/profile.csv [--out DIR]
       python3 scripts/plot_profile.py runs/profile            (profile.csv, else plan.csv)
`flashgpt profile` runs this itself at the end (--plot=false: it does not).
A PNG already there is replaced only when it is one of this script's own (its "Software" text
says so: scripts/output_files.py); any other file under those names is refused before the
first plot is drawn.
"""
import argparse
import csv
import os
import sys

from output_files import check_output, is_own_png, png_software

SCRIPT = "scripts/plot_profile.py"
MEMORY_PNG, TOKENS_PNG, PRED_PNG = "memory_vs_T.png", "tokens_per_s_vs_T.png", "predicted_vs_measured.png"
GIB = float(1 << 30)
COLORS = {"flash3": "tab:purple", "flash": "tab:blue", "naive": "tab:red", "flash1": "tab:green"}


def read_profile(path):
    meta, lines = {}, []
    with open(path, newline="") as f:
        for line in f:
            if line.startswith("#"):
                key, _, value = line[1:].partition(":")
                meta[key.strip()] = value.strip()
            elif line.strip():
                lines.append(line)
    rows = list(csv.DictReader(lines))
    for r in rows:
        for k, v in list(r.items()):
            if k in ("backend", "status"):
                continue
            try:
                r[k] = float(v) if v not in ("", None) else None
            except ValueError:
                r[k] = None
    return meta, rows


def by_backend(rows):
    out = {}
    for r in rows:
        out.setdefault(r["backend"], []).append(r)
    for v in out.values():
        v.sort(key=lambda r: r["seq_len"])
    return out


def color(backend):
    return COLORS.get(backend, None)


def capacity_bytes(meta):
    for key in ("gpu_total_bytes", "capacity_bytes"):
        try:
            v = float(meta.get(key, ""))
            if v > 0:
                return v
        except ValueError:
            pass
    return None


def title_suffix(meta):
    gpu = meta.get("gpu")
    model = meta.get("model", "").split(" (")[0]
    if not gpu or gpu == "none":
        return f"{model}, plan only (no GPU)" if model else "plan only (no GPU)"
    return f"{model} on {gpu}" if model else gpu


def set_log2_x(ax, rows):
    ts = sorted({int(r["seq_len"]) for r in rows})
    ax.set_xscale("log", base=2)
    ax.set_xticks(ts)
    ax.set_xticklabels([f"{t // 1024}K" if t >= 1024 and t % 1024 == 0 else str(t) for t in ts])
    ax.set_xlabel("sequence length T")


def plot_memory(plt, meta, rows, out):
    fig, ax = plt.subplots(figsize=(8, 5.5))
    backends = by_backend(rows)
    for i, (be, rs) in enumerate(backends.items()):
        c = color(be)
        rs = [r for r in rs if r.get("pred_bytes")]  # a point whose plan failed has none
        # Earlier backends drawn wider: equal plans (flash and flash1) stay visible, one
        # inside the other.
        width = 1.5 + 1.5 * (len(backends) - 1 - i)
        ax.plot([r["seq_len"] for r in rs], [r["pred_bytes"] / GIB for r in rs], "--", color=c,
                alpha=0.8, linewidth=width, label=f"{be} predicted (memory plan)")
        ran = [r for r in rs if r.get("peak_bytes")]
        if ran:
            ax.plot([r["seq_len"] for r in ran], [r["peak_bytes"] / GIB for r in ran], "o-",
                    color=c, label=f"{be} measured peak")
        oom = [r for r in rs if r["status"].startswith("OOM")]
        if oom:
            ax.plot([r["seq_len"] for r in oom], [r["pred_bytes"] / GIB for r in oom], "x",
                    color=c, markersize=10, mew=2, linestyle="none",
                    label=f"{be} does not fit (predicted need)")
    ax.set_yscale("log")
    set_log2_x(ax, rows)
    cap = capacity_bytes(meta)
    if cap:
        ax.axhline(cap / GIB, color="black", linewidth=1.2)
        ax.text(0.99, cap / GIB * 1.06, f"device capacity {cap / GIB:.0f} GiB", fontsize=9,
                ha="right", va="bottom", transform=ax.get_yaxis_transform())
    ax.set_ylabel("device memory (GiB)")
    ax.set_title(f"Peak training memory vs context length, {title_suffix(meta)}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = os.path.join(out, MEMORY_PNG)
    fig.savefig(path, dpi=120, metadata={"Software": png_software(SCRIPT)})
    plt.close(fig)
    return path


def plot_tokens(plt, meta, rows, out):
    ran = [r for r in rows if r.get("tokens_per_s")]
    if not ran:
        return None
    fig, ax = plt.subplots(figsize=(8, 5.5))
    for be, rs in by_backend(ran).items():
        ax.plot([r["seq_len"] for r in rs], [r["tokens_per_s"] / 1e3 for r in rs], "o-",
                color=color(be), label=be)
    set_log2_x(ax, rows)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("training throughput (k tokens/s)")
    ax.set_title(f"Tokens per second vs context length, {title_suffix(meta)}")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path = os.path.join(out, TOKENS_PNG)
    fig.savefig(path, dpi=120, metadata={"Software": png_software(SCRIPT)})
    plt.close(fig)
    return path


def plot_pred_vs_meas(plt, meta, rows, out):
    mem = [r for r in rows if r.get("peak_bytes") and r.get("pred_bytes")]
    att = [r for r in rows if r.get("attn_ms") and r.get("roofline_attn_ms")]
    spd = [r for r in rows if r.get("pred_speedup_vs_naive")]
    if not mem and not att:
        return None
    fig, axes = plt.subplots(1, 3 if spd else 2, figsize=(17 if spd else 12, 5.5))
    a1, a2 = axes[0], axes[1]
    # memory: measured peak / plan vs T, with the 5% band the plan must hold
    for be, rs in by_backend(mem).items():
        a1.plot([r["seq_len"] for r in rs], [r["peak_bytes"] / r["pred_bytes"] for r in rs], "o-",
                color=color(be), label=be)
    a1.axhspan(0.95, 1.05, color="gray", alpha=0.2, label="within 5%")
    a1.axhline(1.0, color="black", linewidth=0.8)
    if mem:
        set_log2_x(a1, mem)
    lo = min([0.9] + [r["peak_bytes"] / r["pred_bytes"] * 0.98 for r in mem])
    hi = max([1.1] + [r["peak_bytes"] / r["pred_bytes"] * 1.02 for r in mem])
    a1.set_ylim(lo, hi)
    a1.set_ylabel("measured peak / memory plan")
    a1.set_title("memory: measured peak vs plan")
    a1.grid(True, alpha=0.3)
    a1.legend(fontsize=8)
    # attention time per step: CUDA events vs the roofline
    if att:
        for be, rs in by_backend(att).items():
            xs = [r["roofline_attn_ms"] for r in rs]
            ys = [r["attn_ms"] for r in rs]
            a2.plot(xs, ys, "o", color=color(be), label=be)
            for r, x, y in zip(rs, xs, ys):
                t = int(r["seq_len"])
                a2.annotate(f"{t // 1024}K" if t >= 1024 else str(t), (x, y), fontsize=7,
                            xytext=(3, 3), textcoords="offset points")
        lo = min(min(r["roofline_attn_ms"], r["attn_ms"]) for r in att) / 1.5
        hi = max(max(r["roofline_attn_ms"], r["attn_ms"]) for r in att) * 1.5
        a2.plot([lo, hi], [lo, hi], "k-", linewidth=0.8, label="measured = roofline")
        a2.set_xscale("log")
        a2.set_yscale("log")
        a2.set_xlim(lo, hi)
        a2.set_ylim(lo, hi)
        a2.legend(fontsize=8)
    else:
        a2.text(0.5, 0.5, "no attention timings", ha="center", transform=a2.transAxes)
    a2.set_xlabel("roofline (ms per step)")
    a2.set_ylabel("measured, CUDA events (ms per step)")
    a2.set_title("attention time: measured vs roofline (a floor)")
    a2.grid(True, which="both", alpha=0.3)
    # flash-over-naive speedup of the attention time, predicted and measured
    if spd:
        a3 = axes[2]
        for be, rs in by_backend(spd).items():
            a3.plot([r["seq_len"] for r in rs], [r["pred_speedup_vs_naive"] for r in rs], "--",
                    color=color(be), label=f"{be} predicted (roofline)")
            m = [r for r in rs if r.get("meas_speedup_vs_naive")]
            if m:
                a3.plot([r["seq_len"] for r in m], [r["meas_speedup_vs_naive"] for r in m], "o-",
                        color=color(be), label=f"{be} measured")
        a3.axhline(1.0, color="black", linewidth=0.8)
        set_log2_x(a3, spd)
        a3.set_yscale("log")
        a3.set_ylabel("naive attention time / backend's")
        a3.set_title("speedup over naive (attention time)")
        a3.grid(True, which="both", alpha=0.3)
        a3.legend(fontsize=8)
    fig.suptitle(f"Predicted vs measured, {title_suffix(meta)}")
    fig.tight_layout()
    path = os.path.join(out, PRED_PNG)
    fig.savefig(path, dpi=120, metadata={"Software": png_software(SCRIPT)})
    plt.close(fig)
    return path


def main():
    ap = argparse.ArgumentParser(description="plots of `flashgpt profile`")
    ap.add_argument("csv", nargs="?", default="runs/profile",
                    help="profile.csv / plan.csv, or the directory holding one")
    ap.add_argument("--out", default=None, help="directory for the PNGs (default: the CSV's)")
    args = ap.parse_args()
    path = args.csv
    if os.path.isdir(path):
        for name in ("profile.csv", "plan.csv"):
            if os.path.exists(os.path.join(path, name)):
                path = os.path.join(path, name)
                break
    if not os.path.isfile(path):
        sys.exit(f"plot_profile: no profile CSV at '{args.csv}'; run `flashgpt profile` first")
    out = args.out or os.path.dirname(os.path.abspath(path))
    for name in (MEMORY_PNG, TOKENS_PNG, PRED_PNG):
        check_output(os.path.join(out, name), is_own_png(SCRIPT), f"a plot of {SCRIPT}", "plot_profile")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot_profile: matplotlib is missing; install it with "
                 "`apt-get install python3-matplotlib` (or `pip install matplotlib`)")
    meta, rows = read_profile(path)
    if not rows:
        sys.exit(f"plot_profile: '{path}' has no points")
    os.makedirs(out, exist_ok=True)
    made = [plot_memory(plt, meta, rows, out)]
    for fn in (plot_tokens, plot_pred_vs_meas):
        p = fn(plt, meta, rows, out)
        if p:
            made.append(p)
    missing = 3 - len(made)
    note = f" ({missing} need measurements: run without --plan-only)" if missing else ""
    print("plots: " + ", ".join(made) + note)


if __name__ == "__main__":
    main()
