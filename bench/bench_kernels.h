// bench_kernels — `flashgpt bench-kernels`: times the model's kernels besides the attention
// backends (those are `flashgpt bench-attention`'s), decode attention over a KV cache, and a
// whole d12 training step, on the GPU. CUDA builds only (the CPU build says so).
#pragma once
#include "bench/options.h"  // BenchKernelsOptions, parse_bench_kernels_options

// Runs the sections that opt names (parsed and validated). Errors throw flashgpt::Error; the
// CPU-only build's stub (bench/cuda_unavailable.cpp) says it needs the CUDA build.
void run_bench_kernels(const BenchKernelsOptions& opt);
