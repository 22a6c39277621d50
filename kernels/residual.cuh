// residual.cuh — out = inp1 + inp2 on the GPU (CPU reference: residual.h). The backward is the
// identity into both inputs; the model does it by accumulating into one gradient buffer.
// 128-bit loads/stores (8 bf16 per thread) when every pointer is 16-byte aligned, scalar tail;
// fp32 add, one rounding to floatX. out may equal either input.
// Test: build/test_gpu --gtest_filter='Kernels.Residual*'
// Bench: build/flashgpt bench-kernels --only kernels
#pragma once
#include <cstddef>

#include "kernels/cuda_common.cuh"

void residual_forward(floatX* out, const floatX* inp1, const floatX* inp2, size_t n,
                      cudaStream_t stream);  // (n)
