// naive.cuh — a test hook of the "naive" GPU backend (naive.cu; the registry makes it with
// make_attention("naive")): the same backend with one of its softmax kernels forced, so that
// tests reach every kernel on small T.
#pragma once
#include <memory>

#include "kernels/attention/attention.cuh"

// softmax_config 0..5: 0..4 the register kernels of growing row capacity, 5 the two-pass loop
// kernel (the registry's backend picks by row length).
std::unique_ptr<AttentionBackend> make_naive_attention_with_softmax(int softmax_config);
