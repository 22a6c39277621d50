// encoder.cuh — token + position embedding on the GPU (CPU reference: encoder.h).
//   forward:  out[b,t,:] = wte[inp[b,t],:] + wpe[t,:]                        (floatX)
//   backward: dwte[inp[b,t],:] += dout[b,t,:];  dwpe[t,:] += dout[b,t,:]      (fp32 grads)
//   wpe == nullptr (no learned positions, e.g. RoPE): out = wte[inp] (an exact copy);
//   dwpe == nullptr: the dwpe kernel is skipped.
//
// Backward is deterministic with no floating-point atomics:
//   dwpe: one thread per (t, 8 channels) sums over b = 0..B-1 in order.
//   dwte: the N = B*T token ids are radix-sorted (CUB, stable) as (token, position) pairs, so
//         each token's positions form one run in increasing position order; the block at the
//         start of a run sums the run's rows of dout in that order in fp32 and adds the sum
//         to dwte[token]. A token repeated k times costs one block k row reads (worst case:
//         every position the same token, one block reads all N rows, ~N*C*2 bytes serially).
// Limits: token ids must be in [0, Vp) (the model checks on the host: ids < V); the 128-bit
// path needs C % 8 == 0 (bf16; % 4 for fp32) and 16-byte aligned pointers, else a scalar path.
// Test: build/test_gpu --gtest_filter='Kernels.Encoder*'
// Bench: build/flashgpt bench-kernels --only kernels   (d12 shapes)
#pragma once
#include "kernels/cuda_common.cuh"
#include "kernels/encoder.h"

void encoder_forward(floatX* out,        // (B, T, C)
                     const int* inp,     // (B, T) device, ids < Vp
                     const floatX* wte,  // (Vp, C)
                     const floatX* wpe,  // (maxT, C) or nullptr
                     int B, int T, int C, cudaStream_t stream);

// CUB's radix-sort temporary for B*T tokens (asks CUB; host code). Scratch for encoder_backward:
// encoder_backward_scratch_bytes(B, T, encoder_sort_temp_bytes(B, T)) (encoder.h).
size_t encoder_sort_temp_bytes(int B, int T);
void encoder_backward(float* dwte,         // (Vp, C)   accumulates
                      float* dwpe,         // (maxT, C) accumulates, or nullptr
                      const floatX* dout,  // (B, T, C)
                      const int* inp,      // (B, T) device
                      int B, int T, int C,
                      void* scratch,       // encoder_backward_scratch_bytes(B, T, ..) above
                      cudaStream_t stream);
