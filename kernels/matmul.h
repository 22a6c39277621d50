// matmul — out = inp @ weight^T + bias (PyTorch nn.Linear layout).
// CPU reference (element type `real`, double accumulation, OpenMP), instantiated for float and
// double in matmul.cpp. CUDA version: matmul.cuh (cuBLASLt).
#pragma once
#include <algorithm>
#include <cstddef>

// Sizes of the CUDA version (matmul.cuh), which the model plans with the rest of its memory:
//   workspace: cuBLASLt's, 32 MiB as llm.c uses on Hopper (cuBLASLt's larger Hopper kernels want
//     more than 4 MiB);
//   backward scratch: the dbias reduction's fp32 partial rows of OC, one per block-row of
//     ceil(N / 8) blocks, at most kMatmulBiasRowBlocks;
//   tuning scratch (matmul_init's `tune` only): an accumulating product's candidates are timed
//     into a copy of D, the largest D being the widest product's fp32 dweight (max_OC x C).
constexpr size_t kMatmulWorkspaceBytes = 32ull << 20;
constexpr int kMatmulBiasRowBlocks = 256;
inline size_t matmul_workspace_bytes() { return kMatmulWorkspaceBytes; }
inline int matmul_bias_row_blocks(int N) {
  return std::max(1, std::min(kMatmulBiasRowBlocks, (int)(((long long)N + 7) / 8)));
}
inline size_t matmul_backward_scratch_bytes(int N, int OC) {
  return (size_t)matmul_bias_row_blocks(N) * OC * sizeof(float);
}
inline size_t matmul_tune_scratch_bytes(int C, int max_OC) {
  return (size_t)C * max_OC * sizeof(float);
}
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
