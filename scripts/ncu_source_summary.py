#!/usr/bin/env python3
"""ncu_source_summary.py — what one kernel issues and where its warps wait, instruction by
instruction, from Nsight Compute's source page at the SASS level:

  ncu --section SourceCounters --section WarpStateStats --kernel-name regex:flash3_fwd_kernel \\
      --launch-skip 2 --launch-count 1 -o prof build/flashgpt bench-attention --backends flash3 \\
      --hs 64 --seq-lens 16384 --tokens 16384 --warmup 2 --iters 1 --warmup-ms 0
  ncu --import prof.ncu-rep --page source --csv --print-source sass > src.csv
  python3 scripts/ncu_source_summary.py src.csv [--per OPCODE:K] [--top N]

Prints the warp-state samples by stall reason, the executed instructions by opcode (with each
opcode's share of the samples), and the N instructions that hold the most samples with their
main reasons. `--per OPCODE:K` divides every count by (executions of OPCODE) / K: with
`HGMMA.64x128x16.F32.BF16:4` on flash3's HS 64 forward (4 k-steps of S = Q K^T per K/V tile),
the counts are per warp and K/V tile. docs/notes/flash3.md reads the forward's profile this way.
The samples count every warp, the producer's waits too; ncu's source-counter replay also runs the
kernel slower than a plain launch, so polling loops execute more often there than in a real run.
"""
import argparse
import collections
import csv
import re
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def read(path):
    """(rows as dicts, the stall-reason columns) of an `ncu --page source --csv` file."""
    try:
        lines = open(path, errors="replace").read().splitlines()
    except OSError as e:
        sys.exit("ncu_source_summary.py: cannot read '%s': %s" % (path, e.strerror))
    start = next((i for i, l in enumerate(lines) if l.startswith('"Address","Source"')), None)
    if start is None:
        sys.exit("ncu_source_summary.py: '%s' has no \"Address\",\"Source\" header; write it with "
                 "`ncu --import REPORT --page source --csv --print-source sass`" % path)
    rows = list(csv.DictReader(lines[start:]))
    header = rows[0].keys() if rows else []
    if SAMPLES not in header or EXECUTED not in header:
        sys.exit("ncu_source_summary.py: '%s' lacks the '%s' or '%s' column; profile with "
                 "--section SourceCounters" % (path, SAMPLES, EXECUTED))
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    return rows, reasons


def opcode(source):
    """SASS opcode with its modifiers, without the predicate: '@!P0 BRA 0x..' -> 'BRA'."""
    return re.sub(r"^@!?U?P[T0-9]+\s+", "", source.strip()).split(" ")[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", help="`ncu --page source --csv --print-source sass` output")
    ap.add_argument("--per", help="OPCODE:K: counts per (executions of OPCODE) / K")
    ap.add_argument("--top", type=int, default=15, help="instructions with the most samples")
    args = ap.parse_args()
    rows, reasons = read(args.csv)

    samples = sum(number(r[SAMPLES]) for r in rows)
    executed = collections.Counter()
    sampled = collections.Counter()
    for r in rows:
        executed[opcode(r["Source"])] += number(r[EXECUTED])
        sampled[opcode(r["Source"])] += number(r[SAMPLES])
    unit, per = "", 1.0
    if args.per:
        name, _, k = args.per.rpartition(":")
        if not name or not k.isdigit() or int(k) < 1:
            sys.exit("ncu_source_summary.py: --per takes OPCODE:K with K >= 1, not '%s'" % args.per)
        if executed[name] == 0:
            sys.exit("ncu_source_summary.py: --per: no opcode '%s' was executed (run without "
                     "--per to list the executed opcodes)" % name)
        per = executed[name] / int(k)
        unit = " per %s / %s (%.0f)" % (name, k, per)

    print("%s: %.0f samples, %.0f instructions executed%s: %.1f" %
          (args.csv, samples, sum(executed.values()), unit, sum(executed.values()) / per))
    if samples == 0:
        sys.exit("ncu_source_summary.py: '%s' holds no samples" % args.csv)
    by_reason = {k: sum(number(r[k]) for r in rows) for k in reasons}
    print("samples by reason: " + ", ".join(
        "%s %.1f%%" % (k[len("stall_"):], 100 * v / samples)
        for k, v in sorted(by_reason.items(), key=lambda kv: -kv[1]) if v >= 0.005 * samples))
    print("\n%-40s %12s %10s" % ("opcode", "executed" + (" per" if args.per else ""), "samples"))
    for name, n in executed.most_common():
        if n == 0 and sampled[name] == 0:
            continue
        print("%-40s %12.1f %9.1f%%" % (name, n / per, 100 * sampled[name] / samples))
    print("\nthe %d instructions with the most samples:" % args.top)
    for r in sorted(rows, key=lambda r: -number(r[SAMPLES]))[:args.top]:
        s = number(r[SAMPLES])
        if s == 0:
            break
        top = sorted(reasons, key=lambda k: -number(r[k]))[:3]
        why = " ".join("%s %.0f%%" % (k[len("stall_"):], 100 * number(r[k]) / s)
                       for k in top if number(r[k]) >= 0.005 * s)
        print("  %5.2f%%  %-58s %s" % (100 * s / samples, r["Source"].strip()[:58], why))


if __name__ == "__main__":
    main()
