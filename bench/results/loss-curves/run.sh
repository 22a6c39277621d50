#!/usr/bin/env bash
# loss-curves/run.sh — d12 trained 200 steps (B 16 x T 1024, lr 6e-4, same seed) on a corpus
# (DATA, default the fortunes package's text prepared here): flash against naive; flash3 against
# flash, both --deterministic; and with 4 GPUs, 4 GPUs x batch 4 against 1 GPU x batch 16
# (scripts/curve_multigpu.sh). The table: mean and largest per-step |loss difference| of each pair.
# Needs a GPU (4 for the last pair, skipped otherwise) and `make`; ~5 min.
#   bench/results/loss-curves/run.sh [OUT_DIR]   (default: a new runs/results/loss-curves-<time>)
set -euo pipefail
source "$(dirname "$0")/../../../scripts/results_lib.sh"
results_start loss-curves "${1:-}"
data=$(results_corpus "$OUT")
train=(build/flashgpt train --data "$data" --model d12 --seq-len 1024 --batch 16 --steps 200
       --lr 6e-4 --warmup 20 --eval-every 50 --sample-every 0 --seed 1337)
for run in "naive" "flash" "flash3 --deterministic" "flash --deterministic"; do
  read -r attn det <<<"$run"
  name=$attn${det:+_deterministic}
  "${train[@]}" --attn "$attn" ${det:+"$det"} --log "$OUT/$name.jsonl" > "$OUT/$name.log" 2>&1
done
curves=("flash vs naive/flash=$OUT/flash.jsonl" "flash vs naive/naive=$OUT/naive.jsonl"
        "flash3 vs flash, --deterministic/flash3=$OUT/flash3_deterministic.jsonl"
        "flash3 vs flash, --deterministic/flash=$OUT/flash_deterministic.jsonl")
if results_need_gpus 4 2>/dev/null; then
  GPUS=4 B=4 STEPS=200 CURVE_OUT="$OUT/multigpu" DATA="$data" scripts/curve_multigpu.sh > "$OUT/multigpu.log" 2>&1
  curves+=("4 GPUs vs 1 GPU/1 GPU, batch 16=$OUT/multigpu/world1.jsonl"
           "4 GPUs vs 1 GPU/4 GPUs, batch 4=$OUT/multigpu/world4.jsonl")
fi
results_table "Loss curves: backends and GPUs against each other" \
  "${train[*]} --attn A" "${curves[@]}"
