#!/bin/bash
# Device run 16 (one GPU): flash3's forward with the L2 rule (row-major while K/V fit L2, else
# head-major): its tests; T = 1M (B 1, 4 heads, HS 64) rows vs heads vs flash; HS 64 T 4K B 4.
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
S=()
timeout 100 $B/test_gpu --gtest_filter='*flash3*:Flash3*' > $OUT/test.log 2>&1
S+=("tests rc=$?: $(tail -n 1 $OUT/test.log)")
grep -E "^\[  FAILED" $OUT/test.log | head
L="--causal 1 --warmup 0 --iters 3 --budget-ms 1000"
for o in rows heads; do
  FLASHGPT_FLASH3_ORDER=$o timeout 100 $B/flashgpt bench-attention --backends flash3 --hs 64 --heads 4 \
    --seq-lens 1048576 $L > $OUT/1m_$o.log 2>&1; S+=("1M $o rc=$?")
  FLASHGPT_FLASH3_ORDER=$o timeout 30 $B/flashgpt bench-attention --backends flash3 --hs 64,128 \
    --seq-lens 4096 --causal 1 --warmup 3 --iters 10 > $OUT/4k_$o.log 2>&1; S+=("4K $o rc=$?")
done
timeout 100 $B/flashgpt bench-attention --backends flash --hs 64 --heads 4 --seq-lens 1048576 $L > $OUT/1m_flash.log 2>&1; S+=("1M flash rc=$?")
echo "== summary ($(( $(date +%s) - START )) s) =="; printf '%s\n' "${S[@]}"
for f in $OUT/1m_*.log $OUT/4k_*.log; do echo "-- $(basename $f)"; grep -E "^flash" $f | cut -c1-110; done
