#!/bin/bash
# Device run 50 (1 GPU), session 8: the backward's fixed cost. ncu durations (base clocks) of
# flash3's three backward kernels (D + zero dQacc, the main kernel, the dQ convert) at HS 128
# B 4 T 4K and HS 64 (12 heads) B 1 T 16K, final tree.
cd "$(dirname "$0")/.."
B=.carry/bin
nvidia-smi --query-gpu=name --format=csv,noheader
for cfg in "128 4096" "64 16384"; do set -- $cfg
  timeout 100 ncu --metrics gpu__time_duration.sum -k 'regex:flash_bwd_dot|flash_bwd_dq|flash3_bwd' \
    --launch-skip 3 --launch-count 3 $B/flashgpt bench-attention --backends flash3 --hs $1 --seq-lens $2 \
    --causal 1 --warmup 1 --iters 2 > $OUT/ncu_hs$1.log 2>&1
  echo "== HS $1 T $2 rc=$?"
  grep -E "flash_bwd_dot_kernel|flash3_bwd_kernel|flash_bwd_dq_kernel|gpu__time_duration" $OUT/ncu_hs$1.log | grep -v PROF | sed "s/(.*//; s/  */ /g"
done
