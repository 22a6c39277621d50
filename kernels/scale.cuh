// scale.cuh — elementwise scalings on the GPU (CPU reference and purpose: scale.h).
// fp32 arithmetic, one rounding to the output type; grid-stride loops, scalar (these run once
// per micro-step over Vp*C and N*C elements: ~0.1 ms at d12, not worth vectorising).
// Test: build/test_gpu --gtest_filter='Kernels.Scale*'
// Bench: build/flashgpt bench-kernels --only step   (inside a d12 training step)
#pragma once
#include <cstddef>

#include "kernels/cuda_common.cuh"

void scale_add(float* y, const float* x, float a, size_t n, cudaStream_t stream);  // y += a x
void scale_floatX(floatX* x, float a, size_t n, cudaStream_t stream);              // x = a x
