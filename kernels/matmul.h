// matmul — out = inp @ weight^T + bias (PyTorch nn.Linear layout).
// CPU reference (element type `real`, double accumulation, OpenMP), instantiated for float and
// double in matmul.cpp. CUDA version: matmul.cuh (cuBLASLt).
#pragma once
template <typename real>
void matmul_forward_ref(real* out,           // (N, OC)
                        const real* inp,     // (N, C)
                        const real* weight,  // (OC, C)
                        const real* bias,    // (OC) or nullptr
                        int N, int C, int OC);
template <typename real>
void matmul_backward_ref(real* dinp,          // (N, C)  overwritten
                         real* dweight,       // (OC, C) accumulates
                         real* dbias,         // (OC) accumulates, or nullptr
                         const real* dout,    // (N, OC)
                         const real* inp,     // (N, C)
                         const real* weight,  // (OC, C)
                         int N, int C, int OC);
