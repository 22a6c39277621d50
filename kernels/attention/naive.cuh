// naive.cuh — the "naive" GPU attention backend: materialises P (B, NH, T, T) and saves it for
// the backward (cuBLAS batched GEMMs + causal softmax kernels). Algorithm, memory and limits are
// described at the top of naive.cu.
#pragma once
#include <memory>

#include "kernels/attention/attention.cuh"

// softmax_config: -1 (default) picks the softmax kernels by row length; 0..5 forces one of
// them (0..4 register kernels of growing row capacity, 5 the two-pass loop kernel), so that
// tests reach every kernel on small T. The registry always uses -1.
std::unique_ptr<AttentionBackend> make_naive_attention(int softmax_config = -1);
