#!/bin/bash
# Device run 122 (1 GPU), session 13's final tree: --deterministic's cost again (run 120 read
# flash3 HS 128 T 64K at 430.6 against 548.1), 3 interleaved rounds.
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p build; cp .carry/bin/flashgpt build/
for r in 1 2 3; do
  for det in "" --deterministic; do
    timeout 100 build/flashgpt bench-attention --backends flash3 --hs 64,128 --seq-lens 4096,16384,65536 \
      --iters 10 --warmup 3 --budget-ms 1500 --warmup-ms 500 $det > $OUT/det${det:+_on}_$r.log 2>&1
    echo "round $r ${det:-default} rc=$?: $(grep -E '^flash3 ' $OUT/det${det:+_on}_$r.log | awk '{print $2"/"$6, $13}' | tr '\n' ' ')"
  done
done
