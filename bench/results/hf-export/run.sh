#!/usr/bin/env bash
# hf-export/run.sh — Hugging Face transformers reads `flashgpt export --format hf` as the same
# model: scripts/check_hf_export.py trains a small model (30 CPU steps), exports it, and compares
# GPT2LMHeadModel's loss with `flashgpt eval`'s on the same windows (fp32, CPU). Needs `make`,
# python3 with torch, transformers and safetensors (no GPU); ~1 min.
#   bench/results/hf-export/run.sh [OUT_DIR]   (default: a new runs/results/hf-export-<time>)
set -euo pipefail
source "$(dirname "$0")/../../../scripts/results_lib.sh"
results_start hf-export "${1:-}"
python3 scripts/check_hf_export.py --flashgpt build/flashgpt --out "$OUT/check" > "$OUT/check.log" 2>&1 || true
results_table "Hugging Face export agreement" \
  "python3 scripts/check_hf_export.py --flashgpt build/flashgpt" \
  "$OUT/check/check_hf_export.txt"
