#!/usr/bin/env bash
# gpu-tests/run.sh — the GPU test suites and the sanitizers: build/test_gpu (every CUDA op against
# its CPU reference, the CUDA model against the CPU model, the ring, the trainer); compute-sanitizer
# memcheck, synccheck and initcheck on flash3's ragged shapes, and on the step's other kernels;
# memcheck and racecheck on the HS 64 backward with dQ lagging a step;
# racecheck on the racecheck build (-DFLASHGPT_FLASH3_RACECHECK, built into OUT) and on the
# classifier and LayerNorm; the FP32 build's tests (built into OUT); and with
# 2 GPUs scripts/test_multigpu.sh (data and context parallel against one GPU, resume, a failing
# rank) on DATA (default: the fortunes package's text). Needs a Hopper GPU and `make`; the two
# extra builds take minutes each (SKIP_BUILDS=1 leaves them out).
#   bench/results/gpu-tests/run.sh [OUT_DIR]   (default: a new runs/results/gpu-tests-<time>)
set -euo pipefail
source "$(dirname "$0")/../../../scripts/results_lib.sh"
results_start gpu-tests "${1:-}"
results_need_binary build/test_gpu || exit 1
ragged='*flash3_B3_T17_*:*flash3_B1_T1000_NH6*'
suites=()
build/test_gpu > "$OUT/test_gpu.log" 2>&1 || true
suites+=("bf16=$OUT/test_gpu.log")
compute-sanitizer --tool memcheck build/test_gpu --gtest_filter="$ragged:*flash3*T4097*:Flash3.*" \
  > "$OUT/memcheck.log" 2>&1 || true
suites+=("memcheck, flash3 ragged=$OUT/memcheck.log")
# More work tiles than SMs: each persistent flash3 block runs several, one after another (the
# forward's work tiles; the HS 64 backward's K/V tiles up to T 8192).
tiles='*flash3_B4_T257*:*flash3_B16_T600*:*flash3_B5_T4100*'
# The HS 64 backward with dQ lagging a step (from T 4096 on: kBwdDqLag in flash3_tiles.h), and
# past T 8192, where each head's diagonal step runs apart (flash3_bwd.cu PEEL_DIAG).
lag='*flash3_B1_T4096_NH2_NKV2_HS64*:*flash3_B1_T4097_NH3_NKV1_HS64*:*flash3_B1_T8300*'
lag+=':AttentionMaskGpu/Whole.Matches/random_W0_B1_T4097_NH2_NKV1_HS64'
compute-sanitizer --tool memcheck build/test_gpu --gtest_filter="$tiles" \
  > "$OUT/memcheck_tiles.log" 2>&1 || true
suites+=("memcheck, more work tiles than SMs=$OUT/memcheck_tiles.log")
# The HS 128 forwards' lazy max: the masked kernels and the scores that rise across the thresholds.
compute-sanitizer --tool memcheck build/test_gpu \
  --gtest_filter='AttentionMaskGpu/*HS128:*flash3_jumps*HS128' > "$OUT/memcheck_masks128.log" 2>&1 || true
suites+=("memcheck, HS 128 masks and jump scores=$OUT/memcheck_masks128.log")
compute-sanitizer --tool memcheck build/test_gpu --gtest_filter="$lag" > "$OUT/memcheck_lag.log" 2>&1 || true
suites+=("memcheck, flash3 HS 64 T 4096-8300, causal and documents (backward with dQ lagging)=$OUT/memcheck_lag.log")
for tool in synccheck initcheck; do
  compute-sanitizer --tool "$tool" build/test_gpu --gtest_filter="$ragged" > "$OUT/$tool.log" 2>&1 || true
  suites+=("$tool, flash3 ragged=$OUT/$tool.log")
  # flash3's GQA backward with a block per query head (the turns through global memory)
  compute-sanitizer --tool "$tool" build/test_gpu --gtest_filter='Flash3.QueryHeadBlocks*' \
    > "$OUT/${tool}_query_heads.log" 2>&1 || true
  suites+=("$tool, flash3 GQA query-head blocks=$OUT/${tool}_query_heads.log")
done
# The step's kernels around attention (classifier, AdamW, LayerNorm and its column sums, the
# products' dbias); racecheck leaves out the products: it reports hazards inside cuBLASLt's own
# nvjet kernels.
compute-sanitizer --tool memcheck build/test_gpu \
  --gtest_filter='Kernels.Classifier:Kernels.AdamW:Kernels.LayerNorm*:Kernels.Matmul*' \
  > "$OUT/memcheck_step.log" 2>&1 || true
suites+=("memcheck, step kernels=$OUT/memcheck_step.log")
compute-sanitizer --tool initcheck build/test_gpu --gtest_filter='Kernels.Classifier:Kernels.AdamW' \
  > "$OUT/initcheck_step.log" 2>&1 || true
suites+=("initcheck, classifier and AdamW=$OUT/initcheck_step.log")
compute-sanitizer --tool racecheck build/test_gpu --gtest_filter='Kernels.Classifier:Kernels.LayerNorm' \
  > "$OUT/racecheck_step.log" 2>&1 || true
suites+=("racecheck, classifier and LayerNorm=$OUT/racecheck_step.log")
# The training step replayed as CUDA graphs, every backend (the graphs' kernels are the eager ones).
compute-sanitizer --tool memcheck build/test_gpu --gtest_filter='CudaModel.CudaGraphs*' \
  > "$OUT/memcheck_graphs.log" 2>&1 || true
suites+=("memcheck, CUDA graphs=$OUT/memcheck_graphs.log")
if [ -z "${SKIP_BUILDS:-}" ]; then
  NVCCFLAGS="-O3 -g -lineinfo -DFLASHGPT_FLASH3_RACECHECK" make -j"$(nproc)" BUILD="$OUT/build-racecheck" \
    "$OUT/build-racecheck/test_gpu" > "$OUT/build-racecheck.log" 2>&1
  compute-sanitizer --tool racecheck "$OUT/build-racecheck/test_gpu" --gtest_filter="$ragged" \
    > "$OUT/racecheck.log" 2>&1 || true
  suites+=("racecheck, racecheck build=$OUT/racecheck.log")
  compute-sanitizer --tool racecheck "$OUT/build-racecheck/test_gpu" --gtest_filter="$tiles" \
    > "$OUT/racecheck_tiles.log" 2>&1 || true
  suites+=("racecheck, more work tiles than SMs=$OUT/racecheck_tiles.log")
  compute-sanitizer --tool racecheck "$OUT/build-racecheck/test_gpu" --gtest_filter="$lag" \
    > "$OUT/racecheck_lag.log" 2>&1 || true
  suites+=("racecheck, flash3 HS 64 T 4096-4097, causal and documents (backward with dQ lagging)=$OUT/racecheck_lag.log")
  make -j"$(nproc)" PRECISION=FP32 BUILD="$OUT/build-fp32" "$OUT/build-fp32/test_gpu" > "$OUT/build-fp32.log" 2>&1
  "$OUT/build-fp32/test_gpu" > "$OUT/test_gpu_fp32.log" 2>&1 || true
  suites+=("fp32 build=$OUT/test_gpu_fp32.log")
fi
if results_need_gpus 2 2>/dev/null; then
  data=$(results_corpus "$OUT")
  MULTIGPU_OUT="$OUT/multigpu" DATA="$data" scripts/test_multigpu.sh > "$OUT/test_multigpu.log" 2>&1 || true
  suites+=("test_multigpu.sh=$OUT/multigpu/summary.txt")
fi
results_table "GPU tests and sanitizers" \
  "see run.sh" "${suites[@]}"
