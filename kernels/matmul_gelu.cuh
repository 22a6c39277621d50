// matmul_gelu.cuh — the MLP's two products that carry GELU, as one Hopper kernel of our own
// (sm_90a: TMA, mbarrier, wgmma), forward and backward together:
//   forward:   pre = inp @ weight^T + bias (kept for the backward), out = gelu(pre)
//   backward:  dinp = alpha (dout @ weight) * gelu'(pre)
// CPU reference: matmul_forward_ref / matmul_backward_ref (matmul.h) with gelu_forward_ref /
// gelu_backward_ref (gelu.h), each checked by finite differences (tests/cpu).
//
// Why our own: at d12's shapes (tokens x 3072 x 768, k = 768) cuBLASLt's GELU epilogues run
// after the product, not under it, and cost it 40-45%: on an H100 the plain product took
// 196-201 us at its fastest, with GELU_AUX_BIAS 283-287 us and with DGELU 288-310 us (every
// candidate the heuristic offers, either operand layout). Here each consumer warpgroup owns a
// whole output tile (ping-pong), so one warpgroup's epilogue (the bias, GELU, the two stores or
// the pre-GELU read) runs while the other's products use the tensor cores.
//
// Algorithm (clusters of 2 x 2 blocks, one block per SM, 384 threads): a cluster computes a
// 256 x 256 super-tile, a block one 128 x 128 tile of it; the cluster's super-tiles are st =
// cluster id, + clusters, ...; super-tile i is consumer warpgroup (i % 2)'s in every block.
//   producer warp: for each k-block of 64, TMA half of the block's A rows (64 x 64) multicast to
//     itself and the block with the same rows, and half of its B tile multicast to itself and the
//     block with the same columns, into one ring of 6 stages of 32 KB; a stage is refilled once
//     the consumers of all 4 blocks released it (remote mbarrier arrivals).
//   2 consumer warpgroups taking turns (named barriers): 2 x m64n128k16 wgmma per 16 of k into
//     128 fp32 accumulators per thread; then the epilogue (the bias, GELU by x sigmoid(2u) or
//     GELU', bf16 pairs transposed across each quad of lanes into 16-byte stores: whole
//     sectors) while the other warpgroup's products run.
// Limits: bf16 build; M (tokens) and N (features) multiples of 256, K a multiple of 64; every
// pointer 16-byte aligned. matmul_gelu_applies() says whether a call qualifies; matmul.cu falls
// back to cuBLASLt's epilogues otherwise. Deterministic (fixed order, no atomics).
// Test:  build/test_gpu --gtest_filter='Kernels.Matmul*'
// Bench: build/flashgpt bench-kernels --only kernels   (fc forward, fcproj backward)
#pragma once
#include "kernels/cuda_common.cuh"

// Does the own kernel take this product? M x N output, inner size K (the pointers' alignment
// too: TMA and the paired stores need 16 bytes).
bool matmul_gelu_applies(int M, int N, int K, const void* a, const void* b, const void* out,
                         const void* aux, const void* bias);

// pre (M, N) = inp (M, K) @ weight (N, K)^T + bias (N) [nullptr: none]; out (M, N) = gelu(pre).
void matmul_gelu_forward(floatX* out, floatX* pre, const floatX* inp, const floatX* weight,
                         const floatX* bias, int M, int N, int K, cudaStream_t stream);

// dinp (M, N) = alpha * (dout (M, K) @ weight (K, N)) * gelu'(pre (M, N)).
void matmul_gelu_backward(floatX* dinp, const floatX* dout, const floatX* weight,
                          const floatX* pre, float alpha, int M, int N, int K,
                          cudaStream_t stream);
