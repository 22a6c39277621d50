// bench_attention — `flashgpt bench-attention`: times forward, backward and forward+backward of
// the GPU attention backends (the registry in kernels/attention/attention.cuh) over head sizes
// and sequence lengths, printing TFLOP/s and the extra device memory. CUDA builds only.
// scripts/bench_attention.py runs it next to PyTorch's SDPA backends on the same GPU.
#pragma once
#include "bench/options.h"  // BenchAttentionOptions, parse_bench_attention_options

// Runs the sweep that opt describes (parsed and validated). Errors throw flashgpt::Error; the
// CPU-only build's stub (bench/cuda_unavailable.cpp) says it needs the CUDA build.
void run_bench_attention(const BenchAttentionOptions& opt);
