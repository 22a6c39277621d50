// test_attention_decode_ref — the CPU reference of single-query KV-cache attention
// (kernels/attention/decode.h), the oracle of decode.cu (its GPU test:
// tests/gpu/test_attention_decode.cu).
//
//   AttentionDecodeRef.EqualsLastRowOfCausalAttention   vs attention_naive_forward_ref's row
//                                           t = n-1 (n = 1, 2, 17, 100; MHA, GQA, MQA)
//   AttentionDecodeRef.EqualsLastRowOfMaskedAttention  decode over the keys the mask leaves the
//                                           newest position vs the masked attention's last row
//   AttentionDecodeRef.FloatIsDoubleRoundedOnce, RejectsBadShapes
//
// Every check prints its error and tolerance; outputs are poisoned with NaN beforehand.
// Run: build/test_cpu --gtest_filter='AttentionDecodeRef*'
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention/attention_ref.h"
#include "kernels/attention/decode.h"
#include "kernels/common.h"
#include "tests/test_common.h"

namespace {

using Vec = std::vector<double>;
const double kNaN = std::numeric_limits<double>::quiet_NaN();

Vec normal(size_t n, double sd = 1.0) {
  std::mt19937_64& rng = iteration_rng(0x6465636full);  // fresh inputs for every check
  std::normal_distribution<double> d(0.0, sd);
  Vec v(n);
  for (double& x : v) x = d(rng);
  return v;
}

// Splits a (1, n, NH + 2*NKV, HS) qkv into the decode inputs: q of position n-1, the caches.
void split_qkv(const Vec& qkv, int n, int NH, int NKV, int HS, Vec& q, Vec& k, Vec& v) {
  const int H3 = NH + 2 * NKV;
  q.assign(qkv.begin() + (size_t)(n - 1) * H3 * HS, qkv.begin() + ((size_t)(n - 1) * H3 + NH) * HS);
  k.resize((size_t)n * NKV * HS);
  v.resize((size_t)n * NKV * HS);
  for (int j = 0; j < n; j++) {
    const auto row = qkv.begin() + (size_t)j * H3 * HS;
    std::copy(row + (size_t)NH * HS, row + (size_t)(NH + NKV) * HS, k.begin() + (size_t)j * NKV * HS);
    std::copy(row + (size_t)(NH + NKV) * HS, row + (size_t)H3 * HS, v.begin() + (size_t)j * NKV * HS);
  }
}

TEST(AttentionDecodeRef, EqualsLastRowOfCausalAttention) {
  const int heads[3][2] = {{4, 4}, {6, 2}, {4, 1}};  // NH, NKV: MHA, GQA, MQA
  for (int n : {1, 2, 17, 100})
    for (const auto& hd : heads)
      for (int HS : {8, 16}) {
        const int NH = hd[0], NKV = hd[1];
        const AttnShape s{1, n, NH, NKV, HS};
        const Vec qkv = normal((size_t)n * (NH + 2 * NKV) * HS, 2.0);  // sd 2: peaked softmax
        Vec out_full((size_t)n * NH * HS, kNaN), P((size_t)NH * n * n, kNaN);
        attention_naive_forward_ref(out_full.data(), P.data(), qkv.data(), s);
        const Vec last(out_full.end() - (size_t)NH * HS, out_full.end());
        Vec q, k, v, out((size_t)NH * HS, kNaN);
        split_qkv(qkv, n, NH, NKV, HS, q, k, v);
        attention_decode_ref(out.data(), q.data(), k.data(), v.data(), n, NH, NKV, HS);
        expect_le("decode vs causal attention row n-1",
                  flashgpt::strformat("n=%d NH=%d NKV=%d HS=%d", n, NH, NKV, HS),
                  max_rel_error(out, last, 1.0), 1e-12);  // outputs are O(1): |err| / max(|ref|, 1)
      }
}

// A mask is the caller's choice of keys (decode.h): decode over cache positions lo(n-1)..n-1
// equals the last row of masked attention (a document that starts mid-cache, and a window).
TEST(AttentionDecodeRef, EqualsLastRowOfMaskedAttention) {
  const int n = 40, NH = 4, NKV = 2, HS = 16;
  const AttnShape s{1, n, NH, NKV, HS};
  std::vector<int> tok(n, 0);
  tok[11] = tok[25] = 1;  // documents from 11 and 25: the last row's starts at 25
  const std::vector<int> doc_start = document_starts(tok.data(), 1, n, 1);
  for (int W : {0, 7, 30}) {
    const AttnMask mask{doc_start.data(), W};
    const int lo = mask.seq(0, n).lo(n - 1);
    const Vec qkv = normal((size_t)n * (NH + 2 * NKV) * HS, 2.0);
    Vec out_full((size_t)n * NH * HS, kNaN), P((size_t)NH * n * n, kNaN);
    attention_naive_forward_ref(out_full.data(), P.data(), qkv.data(), s, mask);
    const Vec last(out_full.end() - (size_t)NH * HS, out_full.end());
    Vec q, k, v, out((size_t)NH * HS, kNaN);
    split_qkv(qkv, n, NH, NKV, HS, q, k, v);
    attention_decode_ref(out.data(), q.data(), k.data() + (size_t)lo * NKV * HS,
                         v.data() + (size_t)lo * NKV * HS, n - lo, NH, NKV, HS);
    expect_le("decode over lo..n-1 vs masked attention row n-1",
              flashgpt::strformat("W=%d lo=%d", W, lo), max_rel_error(out, last, 1.0), 1e-12);
  }
}

TEST(AttentionDecodeRef, FloatIsDoubleRoundedOnce) {
  const int n = 37, NH = 6, NKV = 3, HS = 16;
  std::vector<float> q((size_t)NH * HS), k((size_t)n * NKV * HS), v(k.size());
  for (auto* a : {&q, &k, &v})
    for (float& x : *a) x = (float)normal(1)[0];
  const Vec qd(q.begin(), q.end()), kd(k.begin(), k.end()), vd(v.begin(), v.end());
  std::vector<float> of(q.size(), NAN);
  Vec od(q.size(), kNaN);
  attention_decode_ref(of.data(), q.data(), k.data(), v.data(), n, NH, NKV, HS);
  attention_decode_ref(od.data(), qd.data(), kd.data(), vd.data(), n, NH, NKV, HS);
  size_t bad = 0;
  for (size_t i = 0; i < od.size(); i++) bad += of[i] != (float)od[i];
  std::printf("  decode float vs double: %zu of %zu differ from (float)double\n", bad, od.size());
  EXPECT_EQ(bad, 0u);
}

TEST(AttentionDecodeRef, RejectsBadShapes) {
  std::vector<float> buf(1024, 0.0f);
  float* p = buf.data();
  auto expect_throw = [&](int n, int NH, int NKV, int HS, const char* needle) {
    try {
      attention_decode_ref(p, p, p, p, n, NH, NKV, HS);
      ADD_FAILURE() << "accepted n=" << n << " NH=" << NH << " NKV=" << NKV << " HS=" << HS;
    } catch (const flashgpt::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_throw(0, 4, 4, 8, "bad shape");
  expect_throw(3, 6, 4, 8, "multiple");
  expect_throw(3, 4, 0, 8, "bad shape");
}

}  // namespace
