#!/bin/bash
# Device run 30 (2 GPUs): the backward's full (non-causal) ring pairs now start each block at Q
# tile j mod n (staggered dQ adds) and the ring's comm stream is high priority. GPU tests of the
# ring (virtual ranks and NCCL, against the CPU oracle), the CUDA model's cp tests and the flash
# backward tests; cp 2 at 512K (per-rank ring lines; run 29 before the stagger: bwd [8138, 8955]
# ms rank 0); then T = 1M like for like (cp 2 and one GPU, one --bench step each, one run).
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p build; cp $B/flashgpt $B/test_gpu build/
export NCCL_NVLS_ENABLE=0
t() { echo "[$(( $(date +%s) - START )) s] $*"; }
timeout 200 build/test_gpu --gtest_filter='*RingAttention*:*CudaModelCp*:*FlashGpu*' > $OUT/tests.log 2>&1
t "tests rc=$?: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $OUT/tests.log | tr '\n' ' ')"
grep -E "^\[  FAILED" $OUT/tests.log | head
A=(--bench --model d12 --pos rope --batch 1 --attn flash --seq-len 524288 --recompute layer-but-attn --bench-warmup 1 --bench-steps 1 --cp 2)
timeout 150 scripts/launch.sh --gpus 2 -- "${A[@]}" > $OUT/cp2_512k.log 2>&1
t "cp2 512K rc=$?"
grep -h -E "^bench:|^ring:" $OUT/cp2_512k.log | cut -c1-300
TS=1048576 CP1_MAX_T=1048576 WARMUP=0 STEPS=1 RUN_TIMEOUT=260 OUT=$OUT/bench_cp timeout 480 \
  scripts/bench_cp.sh > $OUT/bench_cp.log 2>&1
t "bench_cp 1M rc=$?"
grep -h -E "^bench:|^ring:" $OUT/bench_cp/*.log | cut -c1-300
grep -E "^\||does not fit|failed|timeout" $OUT/bench_cp.log | cut -c1-260
rm -f $OUT/bench_cp/*.png
