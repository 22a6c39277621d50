#!/usr/bin/env bash
# bench_scaling.sh — data-parallel scaling of `flashgpt train --bench`: tokens/s per GPU for
# d12 (GPT-2 124M) at T=1024, per-GPU batch 32 (SEQ, BATCH to change), on 1, 2 and 4 GPUs (those present), through
# scripts/launch.sh (NCCL, NCCL_NVLS_ENABLE=0). Efficiency = per-GPU tokens/s at N GPUs over
# the 1-GPU figure.
#   scripts/bench_scaling.sh [extra train flags, e.g. --zero 1 or --no-overlap]
# Writes $RESULTS_DIR/scaling_<gpu>_<date>.csv (default runs/bench) with the command, GPU
# and date on its first line; the logs go to $LOGS (default runs/bench_scaling).
set -uo pipefail
cd "$(dirname "$0")/.."
RESULTS_DIR=${RESULTS_DIR:-runs/bench}
LOGS=${LOGS:-runs/bench_scaling}
STEPS=${STEPS:-20}
SEQ=${SEQ:-1024}     # SEQ=8192 BATCH=4 TAG=t8192: a long-context setting
BATCH=${BATCH:-32}
source scripts/log_folder.sh
log_folder bench_scaling.sh "$LOGS" LOGS || exit 2
mkdir -p "$RESULTS_DIR"
export NCCL_NVLS_ENABLE=0
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
NGPU=$(nvidia-smi -L | grep -c '^GPU')
SLUG=$(echo "$GPU" | tr 'A-Z ' 'a-z-' | tr -cd 'a-z0-9-')
DATE=$(date -u +%Y-%m-%d)
CSV="$RESULTS_DIR/scaling_${SLUG}_${DATE}${TAG:+_$TAG}.csv"   # TAG=name: a variant's own file
ARGS=(--bench --bench-steps "$STEPS" --model d12 --seq-len "$SEQ" --batch "$BATCH" --attn flash "$@")
echo "# d12 T=$SEQ per-GPU batch $BATCH, bf16, data parallel (NCCL), $GPU, $DATE, command: scripts/bench_scaling.sh $* (build/flashgpt train ${ARGS[*]} via scripts/launch.sh --gpus N)" > "$CSV"
echo "gpus,ms_per_step,tokens_per_s,tokens_per_s_per_gpu,scaling_efficiency" >> "$CSV"
base=""
for n in 1 2 4; do
  [ "$n" -le "$NGPU" ] || continue
  log="$LOGS/scaling_${n}gpu${TAG:+_$TAG}.log"
  scripts/launch.sh --gpus "$n" -- "${ARGS[@]}" >"$log" 2>&1
  rc=$?
  line=$(grep -E '^bench:' "$log" | tail -n 1)
  if [ $rc -ne 0 ] || [ -z "$line" ]; then
    echo "$n,,,,error rc=$rc" >> "$CSV"
    echo "bench_scaling: $n GPU(s) failed (rc $rc), see $log"; tail -n 5 "$log"
    continue
  fi
  ms=$(echo "$line" | sed -E 's/.*median ([0-9.]+) ms.*/\1/')
  tps=$(echo "$line" | sed -E 's/.*\| ([0-9]+) tokens\/s.*/\1/')
  per=$(echo "$line" | sed -E 's/.*\(([0-9]+) per GPU\).*/\1/')
  [ -n "$base" ] || base=$per
  eff=$(python3 -c "print(f'{$per / $base:.3f}')")
  echo "$n,$ms,$tps,$per,$eff" >> "$CSV"
  echo "$n GPU(s): $line"
done
echo "wrote $CSV"; cat "$CSV"
