// layernorm — y = (x - mean) * rstd * weight + bias over the last dim C, eps = 1e-5.
// Saves mean and rstd (N) for the backward. N = B*T rows.
// CPU reference (fp32 with double accumulation). CUDA version: layernorm.cuh.
#pragma once
void layernorm_forward_ref(float* out,          // (N, C)
                           float* mean,         // (N)
                           float* rstd,         // (N)
                           const float* inp,    // (N, C)
                           const float* weight, // (C)
                           const float* bias,   // (C)
                           int N, int C);
void layernorm_backward_ref(float* dinp,          // (N, C) accumulates (residual stream)
                            float* dweight,       // (C) accumulates
                            float* dbias,         // (C) accumulates
                            const float* dout,    // (N, C)
                            const float* inp,     // (N, C)
                            const float* weight,  // (C)
                            const float* mean,    // (N)
                            const float* rstd,    // (N)
                            int N, int C);
