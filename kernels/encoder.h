// encoder — token + learned position embedding.
//   forward:  out[b,t,:] = wte[inp[b,t],:] + wpe[t,:]
//   backward: dwte[inp[b,t],:] += dout[b,t,:];  dwpe[t,:] += dout[b,t,:]
// wpe == nullptr (models without learned positions, e.g. RoPE): out = wte[inp] alone;
// dwpe == nullptr: the backward skips it.
// CPU reference (the oracle), a template on the element type `real`, instantiated for float
// and double in encoder.cpp. CUDA version: encoder.cuh, same names without _ref.
#pragma once
#include <cstddef>

// Scratch of the CUDA backward (encoder.cuh): the sort's token keys, positions and sorted
// positions (three int arrays of N = B*T, each 256-aligned), then CUB's radix-sort temporary
// storage, whose size only CUB knows (encoder_sort_temp_bytes in encoder.cuh asks it). Without
// CUB (--plan-only, CPU builds) it is estimated at 8 bytes per token: a few MiB, under 1% of
// any plan.
inline size_t encoder_backward_scratch_bytes(int B, int T, size_t sort_temp_bytes) {
  const size_t N = (size_t)B * T, ints = (N * sizeof(int) + 255) / 256 * 256;
  return 3 * ints + (sort_temp_bytes + 255) / 256 * 256;
}
inline size_t encoder_sort_temp_bytes_estimate(int B, int T) { return (size_t)B * T * 8; }
template <typename real>
void encoder_forward_ref(real* out,        // (B, T, C)
                         const int* inp,   // (B, T) token ids < Vp
                         const real* wte,  // (Vp, C)
                         const real* wpe,  // (maxT, C) or nullptr
                         int B, int T, int C);
template <typename real>
void encoder_backward_ref(real* dwte,        // (Vp, C)   accumulates
                          real* dwpe,        // (maxT, C) accumulates, or nullptr
                          const real* dout,  // (B, T, C)
                          const int* inp,    // (B, T)
                          int B, int T, int C);
