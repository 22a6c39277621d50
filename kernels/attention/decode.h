// decode — attention of one new query per head against a KV cache (KV-cache sampling).
//   out[h] = softmax(scale q[h] K_g^T) V_g over all n cached positions, g = h / (NH/NKV),
//   scale = 1/sqrt(HS). Causal is implicit: the query is the newest position n-1, whose key
//   and value are already appended, so it sees every cached position.
//   Equals the last row (t = n-1) of causal attention over the n positions
//   (attention_naive_forward_ref with B = 1, T = n).
//   Masks (mask.h) are the caller's choice of keys: the query sees every key it is given, so a
//   document mask or window passes the cache positions lo(n-1)..n-1 (k_cache + lo rows, n - lo).
// Ring (attention_decode_ring*): the cache is a ring of `slots` rows and the n keys the query
// sees are rows first, first+1, ... (mod slots): a sliding window's last W positions (position p
// in row p % slots), or the part of them in the query's document (kernels/attention/mask.h).
// The softmax is over a set, so the rows' order in the ring changes nothing but rounding.
// CPU reference (the oracle): double arithmetic (max-subtracted softmax), rounded once to
// `real`; instantiated for float and double in decode.cpp. CUDA version: decode.cuh.
// Bad shapes (n, NH, NKV or HS < 1, NH % NKV != 0, a ring range outside the ring) throw
// flashgpt::Error.
// Test: build/test_cpu --gtest_filter='AttentionDecodeRef*'  (ring: AttentionDecodeRef.Ring*)
#pragma once
#include <algorithm>
#include <cstddef>

#include "kernels/common.h"

// The CUDA version's pass-1 block shape (decode.cuh; decode.cu has the tuning notes), by GQ =
// query heads of one kv head per block (1, 2 or kDecodeMaxGQ): its threads, KU keys per key group
// per step, and kDecodeLaneDims head dims per lane, so a key group is HS / 8 lanes and a block
// step covers (threads / (HS / 8)) * KU keys. The splits (at most kDecodeMaxSplits) size the
// scratch: per split and query head an un-normalised accumulator (HS fp32) and (m, l).
constexpr int kDecodeMaxGQ = 4;
constexpr int kDecodeLaneDims = 8;
constexpr int kDecodeMaxSplits = 1024;
constexpr int decode_threads(int GQ) { return GQ == 1 ? 128 : 256; }
constexpr int decode_keys_per_group(int GQ) { return GQ == 1 ? 2 : 4; }
constexpr int decode_step(int HS, int GQ) {
  return decode_threads(GQ) / (HS / kDecodeLaneDims) * decode_keys_per_group(GQ);
}
// Smallest step over the GQ variants at this head size (more splits fit); 0: HS unsupported.
constexpr int decode_min_step(int HS) {
  return HS == 32 || HS == 64 || HS == 128 || HS == 256
             ? std::min({decode_step(HS, 1), decode_step(HS, 2), decode_step(HS, kDecodeMaxGQ)})
             : 0;
}
// Scratch bytes for attention_decode with any n <= max_n at this NH and HS. Any plan has
// S <= kDecodeMaxSplits and S <= ceil(n / step) <= ceil(max_n / step) splits.
inline size_t attention_decode_scratch_bytes(int max_n, int NH, int HS) {
  CHECK(max_n >= 1 && NH >= 1, "attention_decode_scratch_bytes: bad max_n=%d NH=%d", max_n, NH);
  const int step = decode_min_step(HS);
  const int cap = step > 0 ? std::min(kDecodeMaxSplits, (max_n + step - 1) / step) : kDecodeMaxSplits;
  const size_t hs = (size_t)std::max(HS, 1);
  return ((size_t)NH * cap * hs * sizeof(float) + 255) / 256 * 256 +
         ((size_t)NH * cap * 2 * sizeof(float) + 255) / 256 * 256;
}

template <typename real>
void attention_decode_ref(real* out,            // (NH, HS)
                          const real* q,        // (NH, HS) the query of the newest position
                          const real* k_cache,  // (n, NKV, HS) positions 0..n-1
                          const real* v_cache,  // (n, NKV, HS)
                          int n, int NH, int NKV, int HS);
// Keys j = 0..n-1 at ring rows (first + j) % slots; 1 <= n <= slots, 0 <= first < slots.
template <typename real>
void attention_decode_ring_ref(real* out,            // (NH, HS)
                               const real* q,        // (NH, HS)
                               const real* k_cache,  // (slots, NKV, HS)
                               const real* v_cache,  // (slots, NKV, HS)
                               int n, int first, int slots, int NH, int NKV, int HS);
