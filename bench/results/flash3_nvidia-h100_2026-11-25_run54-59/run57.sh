#!/bin/bash
# Device run 57 (2 GPUs), session 9, the final tree (pair groups + first dQ partial stores):
# issue 11's attention table against SDPA FA2 and cuDNN (GPU 0) and the cost of
# --deterministic; every GPU test (the NCCL ring cases on the 2 GPUs included); SECTIONS=cp
# scripts/test_multigpu.sh (flash3's ring backward runs in pair groups now).
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
t() { echo "[$(( $(date +%s) - START )) s] $*"; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p build; cp $B/flashgpt $B/test_gpu build/
export NCCL_NVLS_ENABLE=0
S=()
CUDA_VISIBLE_DEVICES=0 timeout 120 python3 scripts/bench_attention.py --binary build/flashgpt --backends flash,flash3 \
  --torch-backends flash,cudnn --hs 64,128 --seq-lens 4096,16384,65536 --causal 1 --iters 10 --warmup 3 \
  --budget-ms 1500 --out-dir $OUT --csv $OUT/flash3_attention.csv > $OUT/flash3_attention.log 2>&1
S+=("$(t "bench_attention.py rc=$?")")
for det in "" --deterministic; do
  CUDA_VISIBLE_DEVICES=0 timeout 40 build/flashgpt bench-attention --backends flash3 --hs 64,128 \
    --seq-lens 4096,16384,65536 --iters 10 --warmup 3 --budget-ms 1500 $det > $OUT/flash3_bench${det:+_det}.log 2>&1
  S+=("$(t "bench-attention $det rc=$?: $(grep ^flash3 $OUT/flash3_bench${det:+_det}.log | awk '{print $2"/"$6, $13}' | tr '\n' ' ')")")
done
timeout 260 build/test_gpu > $OUT/test_gpu.log 2>&1
S+=("$(t "test_gpu rc=$?: $(grep -E '^\[==========\] [0-9]+ tests|^\[  PASSED|^\[  FAILED  \] [0-9]|^\[  SKIPPED \] [0-9]' $OUT/test_gpu.log | tr '\n' ' ')")")
grep -E "^\[  FAILED  \] [A-Z]" $OUT/test_gpu.log | head
SECTIONS=cp OUT=$OUT/multigpu_cp DATA=.carry/data/fortunes timeout 170 scripts/test_multigpu.sh > $OUT/multigpu_cp.log 2>&1
S+=("$(t "test_multigpu cp rc=$?")")
rm -rf $OUT/multigpu_cp
echo "== bench_attention.py =="; tail -n 21 $OUT/flash3_attention.log | head -n 19 | cut -c1-200
echo "== cp =="; grep -E "PASS|FAIL|SKIP|failure" $OUT/multigpu_cp.log | cut -c1-200
echo "== summary =="; printf '%s\n' "${S[@]}"
