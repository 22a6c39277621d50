// flash1.cuh — the "flash1" GPU attention backend: FlashAttention-1's schedule (K/V tiles in
// the outer loop, Q tiles inner, O/m/l accumulators in device memory; one thread block per
// head), kept beside our FlashAttention-2 ("flash") so the cost of that loop order can be
// measured. Kernels and the algorithm: kernels/attention/flash1.cu.
#pragma once
#include <memory>

#include "kernels/attention/attention.cuh"

std::unique_ptr<AttentionBackend> make_flash1_attention();
