#!/bin/bash
# Device run 15 (one GPU): flash3 forward work order, row-major (longest rows of every head
# first) vs head-major (one head at a time), T 16K..512K; flash at 256K/512K beside.
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
S=()
FLASHGPT_FLASH3_ORDER=heads timeout 100 $B/test_gpu --gtest_filter='*flash3*:Flash3*' > $OUT/test_heads.log 2>&1
S+=("tests (head-major) rc=$?: $(tail -n 1 $OUT/test_heads.log)")
grep -E "^\[  FAILED" $OUT/test_heads.log | head
L="--causal 1 --warmup 1 --iters 3 --budget-ms 2000"
for o in rows heads; do
  FLASHGPT_FLASH3_ORDER=$o timeout 200 $B/flashgpt bench-attention --backends flash3 --hs 64 \
    --seq-lens 16384,65536,131072,262144,524288 $L > $OUT/order_${o}_hs64.log 2>&1; S+=("$o hs64 rc=$?")
  FLASHGPT_FLASH3_ORDER=$o timeout 60 $B/flashgpt bench-attention --backends flash3 --hs 128 \
    --seq-lens 4096,16384,65536,131072 $L > $OUT/order_${o}_hs128.log 2>&1; S+=("$o hs128 rc=$?")
done
timeout 120 $B/flashgpt bench-attention --backends flash --hs 64 --seq-lens 262144,524288 $L > $OUT/flash_hs64_long.log 2>&1; S+=("flash long rc=$?")
echo "== summary ($(( $(date +%s) - START )) s) =="; printf '%s\n' "${S[@]}"
for f in $OUT/order_*.log $OUT/flash_hs64_long.log; do echo "-- $(basename $f)"; grep -E "^flash" $f | cut -c1-110; done
