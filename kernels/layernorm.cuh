// layernorm.cuh — LayerNorm over the last dim C on the GPU (CPU reference: layernorm.h).
//   forward:  mean = sum(x)/C; var = sum((x-mean)^2)/C; rstd = 1/sqrt(var + 1e-5)
//             y = (x - mean) * rstd * weight + bias;  mean, rstd saved in fp32
//   backward: xhat = (x - mean) * rstd; g = weight * dy
//             dx += rstd * (g - mean(g) - xhat * mean(g * xhat))           (floatX, accumulates)
//             dweight += sum_rows dy * xhat;  dbias += sum_rows dy         (fp32, accumulates)
//
// Algorithm: one warp per row, statistics in fp32, two-pass variance (sum, then squared
// deviations from the mean). Rows up to 8 chunks per lane (C <= 2048 bf16) are held in
// registers: one DRAM read and one write per element; longer rows loop over L1.
// Backward: blocks of 4 warps, grid-stride over rows; per row one pass for the two reductions
// and one for dinp, the second re-reading x, dy, weight from L1. Each warp keeps its own fp32
// partial dweight/dbias row in shared memory (lane-owned channels: no atomics); at the end
// the block adds its 4 warp rows in order and writes one partial row to `scratch`;
// reduce_partials then sums the 1024 partial rows in a fixed order. Deterministic, no float
// atomics.
// Measured (H200, N = 32768, C = 768, bf16): forward 33.6 us (3.0 TB/s) with the row in
// registers vs 38.4 us re-reading it from L1; backward 83.8 us (2.4 TB/s). Holding x, dy and
// dinp in registers in the backward (100 registers, 20 warps/SM) was slower, 103.5 us.
// Limits: 128-bit path when C % 8 == 0 (bf16; % 4 fp32) and pointers 16-byte aligned, else a
// scalar path. Backward shared memory 4 warps * 2 * C (rounded up to 256) * 4 bytes: C <= ~7000 on H100.
// Test: build/test_gpu --gtest_filter='Kernels.LayerNorm*'
// Bench: build/flashgpt bench-kernels --only kernels   (N = 32768, C = 768)
#pragma once
#include "kernels/cuda_common.cuh"
#include "kernels/layernorm.h"

void layernorm_forward(floatX* out,           // (N, C)
                       float* mean,           // (N) or nullptr
                       float* rstd,           // (N) or nullptr
                       const floatX* inp,     // (N, C)
                       const floatX* weight,  // (C)
                       const floatX* bias,    // (C)
                       int N, int C, cudaStream_t stream);

// Scratch for layernorm_backward: layernorm_backward_scratch_bytes(C) (layernorm.h).
void layernorm_backward(floatX* dinp,          // (N, C) accumulates
                        float* dweight,        // (C) accumulates
                        float* dbias,          // (C) accumulates
                        const floatX* dout,    // (N, C)
                        const floatX* inp,     // (N, C)
                        const floatX* weight,  // (C)
                        const float* mean,     // (N)
                        const float* rstd,     // (N)
                        int N, int C,
                        float* scratch,        // layernorm_backward_scratch_bytes(C)
                        cudaStream_t stream);
