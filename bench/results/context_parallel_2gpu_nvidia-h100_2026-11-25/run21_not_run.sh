#!/bin/bash
# Device run 21 (2 GPUs): the NCCL ring tests with the dynamic-smem attribute set per device;
# cp 2 with rank 1 failing at step 3 (the cp communicator aborted first).
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
export NCCL_NVLS_ENABLE=0
timeout 70 $B/test_gpu --gtest_filter='RingShapes/RingAttentionGpu.Nccl/*' > $OUT/nccl.log 2>&1
echo "NCCL ring tests rc=$?: $(tail -n 1 $OUT/nccl.log) ($(( $(date +%s) - START )) s)"
grep -E "^\[ +(OK|FAILED) " $OUT/nccl.log
T=$(mktemp -d)
for r in 0 1; do
  FLASHGPT_TEST_FAIL=1:3 RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r timeout 80 $B/flashgpt train \
    --data .carry/data/fortunes --model d12 --pos rope --seq-len 1024 --batch 2 --steps 10 \
    --eval-every 0 --sample-every 0 --cp 2 --dist-init file://$T/id --dist-timeout 60 > $OUT/fail$r.log 2>&1 &
  eval "p$r=\$!"
done
wait $p0; rc0=$?; wait $p1; rc1=$?
echo "cp failed rank: rc0 $rc0 rc1 $rc1 after $(( $(date +%s) - START )) s total"
tail -n 2 $OUT/fail0.log $OUT/fail1.log | cut -c1-250
