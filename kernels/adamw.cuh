// adamw.cuh — AdamW on the GPU (CPU reference: adamw.h), fp32 master weights and moments:
//   g = grad * grad_scale
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p -= lr * ( (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps) + wd * p )
//   params_x = (floatX) p        the copy the forward/backward read (bf16 in the default build)
// Four elements a thread by 128-bit accesses when the pointers allow (else one), fp32 arithmetic
// (the bias corrections 1-b^t are computed on the host in double). Memory-bound: 4 fp32 reads,
// 3 fp32 writes and one floatX write per parameter (3.7 GB per step for GPT-2 124M: 1.11 ms at
// H100 bandwidth). Measured (H100, `bench-kernels`, 124M parameters): 1.27 ms (2.93 TB/s);
// one element a thread: 1.34 ms (2.78 TB/s).
// The model calls it once per parameter tensor with that tensor's weight decay (matrices
// only). Deviation from the reference's argument list: `params_x` (the floatX copy, or
// nullptr) follows the fp32 master `params`.
// Also here: copy_float_to_floatX, the master -> floatX conversion the model uses at start-up
// and after set_params.
// Test: build/test_gpu --gtest_filter='Kernels.AdamW*'
// Bench: build/flashgpt bench-kernels --only kernels   (adamw at 124M parameters)
#pragma once
#include <cstddef>

#include "kernels/cuda_common.cuh"

void adamw_update(float* params,        // (n) fp32 master weights
                  floatX* params_x,     // (n) floatX copy written from the updated master, or nullptr
                  const float* grads,   // (n)
                  float* m,             // (n)
                  float* v,             // (n)
                  size_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                  float grad_scale, int t /* step, from 1 */, cudaStream_t stream);

void copy_float_to_floatX(floatX* out, const float* in, size_t n, cudaStream_t stream);
