#!/usr/bin/env bash
# document-masks/run.sh — the document mask and sliding windows on one GPU:
#   attention: flash3 and flash against FlexAttention (flex_attention under torch.compile, the
#     same block mask) and FlashAttention-2 varlen (torch's varlen_attn), same process, bf16,
#     131072 tokens per batch, T 8K/32K/128K; documents of mean 1024 and 4096 tokens (HS 64 and
#     128), windows 1024 and 4096 (HS 64) (scripts/bench_attention.py --mask);
#   training: d12 (RoPE, B 1, --recompute layer-but-attn, flash3) on real documents
#     (scripts/prepare_long_documents.sh: Debian changelogs, mean ~2.8K tokens) at T = 128K with
#     --mask causal and --mask document, and at 1M with --mask document: tokens/s, peak memory;
#     and attention's share of the step (12 layers x bench-attention's forward + backward at the
#     same T on synthetic documents of the corpus's mean length, over the step time).
# Needs a Hopper GPU (80 GB), `make`, python3 with torch; ~15 min.
#   bench/results/document-masks/run.sh [OUT_DIR]   (default: a new runs/results/document-masks-<time>)
set -euo pipefail
source "$(dirname "$0")/../../../scripts/results_lib.sh"
results_start document-masks "${1:-}"
data=${DATA:-runs/data/longdocs}
[ -f "$data/tokenizer.bin" ] || scripts/prepare_long_documents.sh "$data"
attn=(python3 scripts/bench_attention.py --binary build/flashgpt --backends flash3,flash
      --seq-lens 8192,32768,131072 --tokens 131072 --warmup-ms 200 --iters 10 --budget-ms 1000)
raws=()
for hs in 64 128; do
  "${attn[@]}" --hs $hs --mask document --doc-lens 1024,4096 --windows 0 --out-dir "$OUT" \
    --csv "$OUT/attention_document_hs$hs.csv" > "$OUT/attention_document_hs$hs.log" 2>&1
  raws+=("attention=$OUT/attention_document_hs$hs.csv")
done
"${attn[@]}" --hs 64 --mask causal --windows 1024,4096 --out-dir "$OUT" \
  --csv "$OUT/attention_window_hs64.csv" > "$OUT/attention_window_hs64.log" 2>&1
raws+=("attention=$OUT/attention_window_hs64.csv")
# Training: the shards' own documents; at 1M no validation (its split is shorter than a window).
train=(build/flashgpt train --train-pattern "$data/train_*.bin" --tokenizer "$data/tokenizer.bin"
       --model d12 --pos rope --batch 1 --recompute layer-but-attn --attn flash3 --warmup 2
       --eval-every 0 --sample-every 0)
for point in "131072 causal 8" "131072 document 8" "1048576 document 4"; do
  read -r T mask steps <<<"$point"
  log="$OUT/train_T${T}_$mask.log"
  echo "point: T $T, --mask $mask" > "$log"  # names the row even if the run fails at once
  "${train[@]}" --seq-len "$T" --mask "$mask" --steps "$steps" >> "$log" 2>&1 || true
  mean=$(sed -nE 's/.*tokens per document: mean ([0-9]+).*/\1/p' "$log" | head -n 1)
  share="$OUT/attention_T${T}_$mask.log"
  docs=(); [ "$mask" = document ] && docs=(--doc-len "${mean:-2800}")
  build/flashgpt bench-attention --backends flash3 --hs 64 --seq-lens "$T" --tokens "$T" \
    --mask "$mask" "${docs[@]}" --iters 5 --warmup 2 --budget-ms 1500 --warmup-ms 300 \
    > "$share" 2>&1 || true
  raws+=("train=$log" "share=$share")
done
results_table "Document masks and sliding windows" "bench/results/document-masks/run.sh" "${raws[@]}"
