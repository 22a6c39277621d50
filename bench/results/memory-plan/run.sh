#!/usr/bin/env bash
# memory-plan/run.sh — the memory plan of d12 (RoPE, B 1) without a GPU: `flashgpt profile
# --plan-only` by --recompute mode at 128K and 1M, and per GPU at --cp 1 and 2 from 128K to 2M.
# Host arithmetic over model/memory_plan.h's buffer table; runs on any machine after `make`.
#   bench/results/memory-plan/run.sh [OUT_DIR]   (default: a new runs/results/memory-plan-<time>)
set -euo pipefail
source "$(dirname "$0")/../../../scripts/results_lib.sh"
results_start memory-plan "${1:-}"
plan=(build/flashgpt profile --plan-only --plot=false --model d12 --pos rope --attn flash --batch 1
      --gpu-memory 80)
raws=()
for rec in none gelu layer-but-attn layer; do
  "${plan[@]}" --seq-lens 131072,1048576 --recompute "$rec" --out "$OUT/$rec" > "$OUT/$rec.log"
  raws+=("$rec/cp1=$OUT/$rec/plan.csv")
done
for cp in 1 2; do
  "${plan[@]}" --seq-lens 131072,262144,524288,1048576,2097152 --recompute layer-but-attn --cp "$cp" \
    --out "$OUT/cp$cp" > "$OUT/cp$cp.log"
  raws+=("layer-but-attn/cp$cp=$OUT/cp$cp/plan.csv")
done
results_table "Memory plan of d12 at long context" \
  "${plan[*]} --seq-lens T --recompute R [--cp N]" \
  "${raws[@]}"
