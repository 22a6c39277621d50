// layernorm — y = (x - mean) * rstd * weight + bias over the last dim C, eps = 1e-5.
// Saves mean and rstd (N) for the backward. N = B*T rows.
// CPU reference (element type `real`, statistics in double), instantiated for float and double
// in layernorm.cpp. CUDA version: layernorm.cuh.
#pragma once
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
