// gelu.cuh — GELU, tanh approximation (GPT-2), on the GPU (CPU reference: gelu.h).
//   y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
//   dinp = dout * (0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3*0.044715 x^2))
// Elementwise in fp32 registers, 128-bit loads/stores (8 bf16 per thread) when every pointer
// is 16-byte aligned, scalar tail. In place is fine (out == inp, dinp == dout).
// The model normally gets GELU from the fc matmul's cuBLASLt epilogue (matmul_forward_gelu);
// these kernels are its fallback and the backward.
// Test: build/test_gpu --gtest_filter='Kernels.Gelu*'
// Bench: build/flashgpt bench-kernels --only kernels   (N x 4C at d12)
#pragma once
#include <cstddef>

#include "kernels/cuda_common.cuh"

void gelu_forward(floatX* out, const floatX* inp, size_t n, cudaStream_t stream);  // (n)
void gelu_backward(floatX* dinp,         // (n) overwritten; may equal dout
                   const floatX* inp,    // (n) the pre-GELU input
                   const floatX* dout,   // (n)
                   size_t n, cudaStream_t stream);
