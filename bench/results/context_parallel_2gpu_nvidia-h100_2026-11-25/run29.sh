#!/bin/bash
# Device run 29 (2 GPUs): after the comm stream became high priority: the ring tests (one GPU
# virtual ranks and NCCL) and the CUDA model cp tests; cp 2 at 512K with and without the
# overlapped DP all-reduce (--no-overlap), per-rank ring lines; the ring's compute against the
# plain kernels with 12 heads at 512K on one GPU (virtual ranks). Compare with run 28 (normal
# priority): 26.2 s/step, rank 0 attention 25.2 s, waits 0.53 s. ~5 min.
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p build; cp $B/flashgpt $B/test_gpu build/
export NCCL_NVLS_ENABLE=0
t() { echo "[$(( $(date +%s) - START )) s] $*"; }
timeout 200 build/test_gpu --gtest_filter='RingAttention*:CudaModelCp*' > $OUT/test_ring.log 2>&1
t "ring+model cp tests rc=$?: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $OUT/test_ring.log | tr '\n' ' ')"
grep -E "^\[  FAILED" $OUT/test_ring.log | head
A=(--bench --model d12 --pos rope --batch 1 --attn flash --seq-len 524288 --recompute layer-but-attn --bench-warmup 1 --bench-steps 1 --cp 2)
timeout 150 scripts/launch.sh --gpus 2 -- "${A[@]}" > $OUT/cp2_512k.log 2>&1
t "cp2 512K rc=$?"
timeout 150 scripts/launch.sh --gpus 2 -- "${A[@]}" --no-overlap > $OUT/cp2_512k_no_overlap.log 2>&1
t "cp2 512K --no-overlap rc=$?"
CUDA_VISIBLE_DEVICES=0 timeout 150 build/flashgpt bench-attention --backends flash --hs 64 --heads 12 \
  --seq-lens 524288 --tokens 1 --warmup 1 --iters 1 --cp 2 > $OUT/ring_virtual12.log 2>&1
t "bench-attention 12 heads --cp 2 rc=$?"
for f in cp2_512k cp2_512k_no_overlap; do echo "== $f"; grep -h -E "^bench:|^ring:" $OUT/$f.log | cut -c1-300; done
echo "== virtual ring (12 heads) =="
tail -4 $OUT/ring_virtual12.log | cut -c1-250
