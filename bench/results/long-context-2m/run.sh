#!/usr/bin/env bash
# long-context-2m/run.sh — d12 trained on one sequence of T = 2M tokens (2,097,152) split over 2
# GPUs with --cp 2: RoPE, B 1, --recompute layer-but-attn, flash3, on real text (Debian
# changelogs, scripts/prepare_long_documents.sh with CAP=32768: 2.49M training tokens, so one 2M
# window). Two runs: 20 steps under --mask document, then one causal step (~6 min on 2 H200s).
# Records each step's loss, time and tokens/s, and the measured peak per GPU against the memory
# plan (103 GiB per GPU with GPT-2's vocabulary, 102 with this corpus's 4,096: 2M does not fit
# 80 GB GPUs). Needs 2 GPUs of 141 GB (H200) of one node, `make`; ~9 min.
#   bench/results/long-context-2m/run.sh [OUT_DIR]   (DATA=DIR: a corpus already prepared so)
set -euo pipefail
source "$(dirname "$0")/../../../scripts/results_lib.sh"
results_start long-context-2m "${1:-}" 2
data=${DATA:-$OUT/data}
[ -f "$data/tokenizer.bin" ] || CAP=32768 scripts/prepare_long_documents.sh "$data" > "$OUT/prepare.log"
export NCCL_NVLS_ENABLE=0
run() {  # name mask steps
  # The point first: it names the run even if it fails before its opening lines.
  echo "point: T 2097152, --mask $2, --cp 2" > "$OUT/$1.log"
  scripts/launch.sh --gpus 2 -- --train-pattern "$data/train_*.bin" --tokenizer "$data/tokenizer.bin" \
    --model d12 --pos rope --batch 1 --seq-len 2097152 --cp 2 --recompute layer-but-attn \
    --attn flash3 --mask "$2" --steps "$3" --warmup 2 --eval-every 0 --sample-every 0 \
    --log "$OUT/$1.jsonl" >> "$OUT/$1.log" 2>&1 || true
}
run document document 20
run causal causal 1
results_table "d12 at T = 2M with --cp 2" "bench/results/long-context-2m/run.sh" \
  "documents=$OUT/document.log" "causal=$OUT/causal.log"
