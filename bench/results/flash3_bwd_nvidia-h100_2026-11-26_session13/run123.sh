#!/bin/bash
# Device run 123 (1 GPU), session 13: every math thread arriving on empty[s] (.carry/bin, the tree)
# against lane 0 of each math warp (.carry/old, commit 2bbe0a8), HS 128, default and
# --deterministic, 3 interleaved rounds.
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name --format=csv,noheader
for r in 1 2 3; do
  for det in "" --deterministic; do
    for v in old bin; do
      timeout 100 .carry/$v/flashgpt bench-attention --backends flash3 --hs 128 --seq-lens 4096,16384,65536 \
        --iters 10 --warmup 3 --budget-ms 1500 --warmup-ms 500 $det > $OUT/${v}${det:+_det}_$r.log 2>&1
      echo "round $r $v ${det:-default}: $(grep -E '^flash3 ' $OUT/${v}${det:+_det}_$r.log | awk '{print $2"/"$6, $13}' | tr '\n' ' ')"
    done
  done
done
