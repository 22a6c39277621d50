// adamw.cuh — AdamW on the GPU (CPU reference: adamw.h), fp32 master weights and moments:
//   g = grad * clip_scale(norm, clip)      (adamw.h; norm = sqrt(norm_squared) from the device)
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p -= lr * ( (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps) + wd * p )
//   params_x = (floatX) p        the copy the forward/backward read (bf16 in the default build)
// Four elements a thread by 128-bit accesses when the pointers allow (else one), fp32 arithmetic
// (the bias corrections 1-b^t are computed on the host in double). Memory-bound: 4 fp32 reads,
// 3 fp32 writes and one floatX write per parameter (3.7 GB per step for GPT-2 124M: 1.11 ms at
// H100 bandwidth). Multi-tensor: one launch updates every piece (the 16 parameter tensors, or
// this rank's ZeRO-1 slices of them), each with its own weight decay; a block of 256 threads
// takes 1024 elements of one piece. The clip scale is computed on the device from the gradient
// norm the GPU summed (adamw.h's grad_norm_from_squared and clip_scale), so the optimizer step
// needs no host round trip between the norm and the update; a non-finite norm leaves every
// buffer as it was.
// Measured (H100, `bench-kernels`, 124M parameters): the d12 model's 16 tensors in one launch
// 1275 us (2.93 TB/s); the one-tensor kernel it replaced, over the same 124M elements in one
// call: 1270 us (the step's 16 calls of it: 1.29 ms under ncu); one element a thread instead of
// 128-bit accesses: 1.34 ms (2.78 TB/s).
// Also here: copy_float_to_floatX, the master -> floatX conversion the model uses at start-up
// and after set_params.
// Test: build/test_gpu --gtest_filter='Kernels.AdamW*'
// Bench: build/flashgpt bench-kernels --only kernels   (adamw at 124M parameters)
#pragma once
#include <cstddef>

#include "kernels/adamw.h"
#include "kernels/cuda_common.cuh"

// A piece: `count` elements from `begin` in params, params_x and grads, and from `opt_offset`
// in m and v.
struct AdamWPiece {
  size_t begin, count, opt_offset;
  float weight_decay;
};
constexpr int kAdamWMaxPieces = 32;

void adamw_update(float* params,               // (P) fp32 master weights
                  floatX* params_x,            // (P) floatX copy of the update, or nullptr
                  const float* grads,          // (P)
                  float* m,                    // (S) first moments
                  float* v,                    // (S) second moments
                  const AdamWPiece* pieces,    // (num_pieces) host memory, <= kAdamWMaxPieces
                  int num_pieces,
                  const double* norm_squared,  // (1) device: the gradients' sum of squares
                  float clip,                  // <= 0: no clipping
                  float lr, float beta1, float beta2, float eps, int t /* step, from 1 */,
                  cudaStream_t stream);

void copy_float_to_floatX(floatX* out, const float* in, size_t n, cudaStream_t stream);
