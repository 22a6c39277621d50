// decode — attention of one new query per head against a KV cache (KV-cache sampling).
//   out[h] = softmax(scale q[h] K_g^T) V_g over all n cached positions, g = h / (NH/NKV),
//   scale = 1/sqrt(HS). Causal is implicit: the query is the newest position n-1, whose key
//   and value are already appended, so it sees every cached position.
//   Equals the last row (t = n-1) of causal attention over the n positions
//   (attention_naive_forward_ref with B = 1, T = n).
// CPU reference (the oracle): double arithmetic (max-subtracted softmax), rounded once to
// `real`; instantiated for float and double in decode.cpp. CUDA version: decode.cuh.
// Bad shapes (n, NH, NKV or HS < 1, NH % NKV != 0) throw flashgpt::Error.
// Test: build/test_cpu --gtest_filter='AttentionDecodeRef*'
#pragma once

template <typename real>
void attention_decode_ref(real* out,            // (NH, HS)
                          const real* q,        // (NH, HS) the query of the newest position
                          const real* k_cache,  // (n, NKV, HS) positions 0..n-1
                          const real* v_cache,  // (n, NKV, HS)
                          int n, int NH, int NKV, int HS);
