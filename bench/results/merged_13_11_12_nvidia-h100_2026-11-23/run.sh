#!/bin/bash
# lead run 1: merged main (issues 13, 11, 12 phase 1) — full GPU tests + HF export check
cd "$(dirname "$0")"
export OMP_NUM_THREADS=16
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
timeout -s KILL 240 ./test_gpu > $OUT/test_gpu.log 2>&1; echo "test_gpu rc=$?"
grep -E "^\[  FAILED" $OUT/test_gpu.log | head -30
timeout -s KILL 150 python3 ../../scripts/check_hf_export.py --flashgpt ./flashgpt --out /tmp/hf_check > $OUT/hf_check.log 2>&1; echo "hf rc=$?"
cp /tmp/hf_check/check_hf_export.txt $OUT/ 2>/dev/null
tail -n 15 $OUT/hf_check.log
tail -n 3 $OUT/test_gpu.log
