// global_norm.cuh — sum of squares of an fp32 gradient vector on the GPU (CPU reference:
// global_norm.h). The model takes sqrt on the host and clips with it.
// Algorithm: 264 blocks of 512 threads; each thread sums g^2 over a grid-stride of 128-bit
// loads (4 in flight) in fp32 (~920 terms per thread for GPT-2 124M), the block adds its
// threads' sums in double in a fixed tree order and writes one partial; a one-block second
// kernel adds the partials in order. Fixed grid, no atomics: the same bits on every run.
// Measured at 124M fp32 on an H200: 122 us (4.1 TB/s); one scalar load per step took 359 us.
// Test: build/test_gpu --gtest_filter='Kernels.GlobalNorm*'
// Bench: build/flashgpt bench-kernels --only kernels   (124M fp32)
#pragma once
#include <cstddef>

#include "kernels/cuda_common.cuh"
#include "kernels/global_norm.h"

// global_norm_scratch_bytes(): the per-block partials (double), global_norm.h.
void global_norm_squared(double* out,      // (1) device, overwritten
                         const float* g,   // (n)
                         size_t n,
                         double* scratch,  // global_norm_scratch_bytes()
                         cudaStream_t stream);
