// decode.cuh — attention of one new query per head against a KV cache, on the GPU
// (flash-decoding). CPU reference and exact definition: decode.h.
//   out[h] = softmax(scale q[h] K_g^T) V_g over n positions, g = h / (NH/NKV), scale 1/sqrt(HS)
//
// Algorithm. The n keys are cut into S splits of `chunk` keys (a multiple of the block's step);
// pass 1 runs one block per (split, kv head g, group of GQ of g's query heads; GQ = 1, 2 or 4
// by the GQA group size), so a K/V row is read from HBM once per split and shared by the
// group's query heads (groups of more than 4 query heads re-read it from L2: those blocks are
// adjacent in the grid).
//   block = NG key groups of L = HS/8 lanes; a lane owns 8 head dims.
//   q (scaled by scale*log2 e, fp32) and the accumulators live in registers.
//   for each step of NG*KU keys (KU keys per key group, their 128-bit loads issued first):
//     S_j = q . k_j             partial dot of 8 dims, shuffle-sum over the L lanes
//     m_new = max(m_i, S_j..)   (base 2), c = 2^(m_i - m_new)
//     l_i = c l_i + sum 2^(S_j - m_new);  acc = c acc + sum 2^(S_j - m_new) v_j
//   the NG partials (m_i, l_i, acc[HS]) are merged through shared memory and the block's
//   (m, l, acc[HS]) (acc un-normalised) is written to scratch.
// Pass 2 (one block per query head and 32 dims): M = max_s m_s, w_s = 2^(m_s - M),
//   out = sum_s w_s acc_s / sum_s w_s l_s, rounded once to floatX.
// S: two waves of pass-1 blocks (occupancy x SMs), at most 1024 splits. All in fp32; fixed
// reduction orders, so a run is deterministic on a given GPU (S depends on the SM count).
// Speed (H100, n = 131072, bf16, caches of zeros; measured by the GPU test that
// `flashgpt bench-kernels --only decode` replaced): MHA NH=NKV=12 HS=64 ~147 us for 403 MB
// of K/V (2.7 TB/s, ~80% of HBM peak); GQA NH=12 NKV=4 HS=128 ~127 us (2.1 TB/s); MQA is
// bound by the score arithmetic (tuning notes in decode.cu).
// Limits: n >= 1, NH % NKV == 0, HS in {32, 64, 128, 256} (CHECK with a clear message); q,
// k_cache, v_cache and scratch 16-byte aligned (CHECK); n <= the max_n the scratch was sized for.
// Test: build/test_gpu --gtest_filter='AttentionDecode*'  (the ring: AttentionDecode.Ring*)
// Bench: build/flashgpt bench-kernels --only decode   (n = 131072)
#pragma once
#include <cstddef>

#include "kernels/attention/decode.h"
#include "kernels/cuda_common.cuh"

// Scratch: attention_decode_scratch_bytes(max_n, NH, HS) (decode.h).
void attention_decode(floatX* out,            // (NH, HS) overwritten
                      const floatX* q,        // (NH, HS) the query of the newest position
                      const floatX* k_cache,  // (n, NKV, HS) positions 0..n-1 (newest appended)
                      const floatX* v_cache,  // (n, NKV, HS)
                      int n, int NH, int NKV, int HS,
                      void* scratch,          // attention_decode_scratch_bytes(max_n >= n, NH, HS)
                      cudaStream_t stream);
// The same over a ring (decode.h): key j = 0..n-1 at row (first + j) % slots of the caches,
// 1 <= n <= slots, 0 <= first < slots (CHECK). The row index wraps once per key in pass 1.
void attention_decode_ring(floatX* out, const floatX* q,
                           const floatX* k_cache,  // (slots, NKV, HS)
                           const floatX* v_cache,  // (slots, NKV, HS)
                           int n, int first, int slots, int NH, int NKV, int HS,
                           void* scratch,  // attention_decode_scratch_bytes(max_n >= n, NH, HS)
                           cudaStream_t stream);
