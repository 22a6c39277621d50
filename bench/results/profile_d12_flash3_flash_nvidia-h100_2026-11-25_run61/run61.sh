#!/bin/bash
# Device run 61 (1 GPU), session 9, the final tree: `flashgpt profile --attn flash3,flash` (d12,
# T 1K..128K, 16384 tokens per point), the README's profile sweep for the two flash backends.
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=16
B=$PWD/.carry/bin
START=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 400 $B/flashgpt profile --attn flash3,flash --out $OUT/profile > $OUT/profile.log 2>&1; echo "profile rc=$?"
echo "== $(( $(date +%s) - START )) s =="
grep -E "^(backend|flash|naive|ceil)" $OUT/profile.log | cut -c1-160 | head -40
