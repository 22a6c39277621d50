#!/bin/bash
# Device run 14 (one GPU): `flashgpt profile` sweep (d12, T 1K..128K) with flash3, flash, naive.
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=16
B=$PWD/.carry/bin
START=$(date +%s)
timeout 520 $B/flashgpt profile --out $OUT/profile > $OUT/profile.log 2>&1; echo "profile rc=$?"
echo "== $(( $(date +%s) - START )) s =="
grep -E "^(backend|flash|naive|ceil)" $OUT/profile.log | cut -c1-150 | head -40
