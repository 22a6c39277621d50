// matmul — out = inp @ weight^T + bias (PyTorch nn.Linear layout).
// CPU reference (fp32, double accumulation, OpenMP). CUDA version: matmul.cuh (cuBLASLt).
#pragma once
void matmul_forward_ref(float* out,           // (N, OC)
                        const float* inp,     // (N, C)
                        const float* weight,  // (OC, C)
                        const float* bias,    // (OC) or nullptr
                        int N, int C, int OC);
void matmul_backward_ref(float* dinp,          // (N, C)  overwritten
                         float* dweight,       // (OC, C) accumulates
                         float* dbias,         // (OC) accumulates, or nullptr
                         const float* dout,    // (N, OC)
                         const float* inp,     // (N, C)
                         const float* weight,  // (OC, C)
                         int N, int C, int OC);
