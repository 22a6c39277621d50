// layernorm — y = (x - mean) * rstd * weight + bias over the last dim C, eps = 1e-5.
// Saves mean and rstd (N) for the backward. N = B*T rows.
// CPU reference (element type `real`, statistics in double), instantiated for float and double
// in layernorm.cpp. CUDA version: layernorm.cuh.
#pragma once
#include <cstddef>

// Scratch of the CUDA backward (layernorm.cuh): each of kLayerNormBwdBlocks blocks writes one
// fp32 partial row of dweight and dbias (2*C floats), summed afterwards in a fixed order. The
// block count is fixed, not derived from the device, so the summation order of dweight/dbias,
// and the result, are the same on every GPU; 1024 blocks of 4 warps give ~8 resident blocks
// (32 warps) per H100 SM at C = 768 (24.6 KB shared each).
constexpr int kLayerNormBwdBlocks = 1024;
inline size_t layernorm_backward_scratch_bytes(int C) {
  return (size_t)kLayerNormBwdBlocks * 2 * C * sizeof(float);
}
template <typename real>
void layernorm_forward_ref(real* out,           // (N, C)
                           real* mean,          // (N)
                           real* rstd,          // (N)
                           const real* inp,     // (N, C)
                           const real* weight,  // (C)
                           const real* bias,    // (C)
                           int N, int C);
template <typename real>
void layernorm_backward_ref(real* dinp,          // (N, C) accumulates (residual stream)
                            real* dweight,       // (C) accumulates
                            real* dbias,         // (C) accumulates
                            const real* dout,    // (N, C)
                            const real* inp,     // (N, C)
                            const real* weight,  // (C)
                            const real* mean,    // (N)
                            const real* rstd,    // (N)
                            int N, int C);
