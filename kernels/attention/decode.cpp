// decode.cpp — CPU reference for single-query attention against a KV cache (see decode.h):
//   for each query head h (kv head g = h / (NH/NKV)):
//     s_j = scale * q[h] . k[j, g]          j = 0..n-1 (ring: row (first + j) % slots) (double)
//     p_j = exp(s_j - max_j s_j) / sum_j exp(s_j - max_j s_j)
//     out[h] = sum_j p_j v[j, g]            (double, rounded once to `real`)
#include "kernels/attention/decode.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "kernels/common.h"

template <typename real>
void attention_decode_ref(real* out, const real* q, const real* k_cache, const real* v_cache,
                          int n, int NH, int NKV, int HS) {
  attention_decode_ring_ref(out, q, k_cache, v_cache, n, 0, std::max(n, 1), NH, NKV, HS);
}

template <typename real>
void attention_decode_ring_ref(real* out, const real* q, const real* k_cache, const real* v_cache,
                               int n, int first, int slots, int NH, int NKV, int HS) {
  CHECK(n >= 1 && NH >= 1 && NKV >= 1 && HS >= 1,
        "attention_decode: bad shape n=%d NH=%d NKV=%d HS=%d", n, NH, NKV, HS);
  CHECK(NH % NKV == 0, "attention_decode: NH=%d is not a multiple of NKV=%d", NH, NKV);
  CHECK(n <= slots && first >= 0 && first < slots,
        "attention_decode: %d keys from row %d of a ring of %d rows", n, first, slots);
  const int G = NH / NKV;
  const double scale = 1.0 / std::sqrt((double)HS);
#pragma omp parallel for if ((size_t)n * NH * HS >= (1u << 20))
  for (int h = 0; h < NH; h++) {
    const int g = h / G;
    const real* qh = q + (size_t)h * HS;
    std::vector<double> s(n), acc(HS, 0.0);
    double m = -INFINITY;
    auto row = [&](int j) { return (size_t)((first + j) % slots) * NKV + g; };
    for (int j = 0; j < n; j++) {
      const real* kj = k_cache + row(j) * HS;
      double d = 0;
      for (int c = 0; c < HS; c++) d += (double)qh[c] * (double)kj[c];
      s[j] = scale * d;
      m = std::max(m, s[j]);
    }
    double l = 0;
    for (int j = 0; j < n; j++) {
      const double p = std::exp(s[j] - m);
      l += p;
      const real* vj = v_cache + row(j) * HS;
      for (int c = 0; c < HS; c++) acc[c] += p * (double)vj[c];
    }
    for (int c = 0; c < HS; c++) out[(size_t)h * HS + c] = (real)(acc[c] / l);
  }
}

template void attention_decode_ref<float>(float*, const float*, const float*, const float*, int,
                                          int, int, int);
template void attention_decode_ref<double>(double*, const double*, const double*, const double*,
                                           int, int, int, int);
template void attention_decode_ring_ref<float>(float*, const float*, const float*, const float*,
                                               int, int, int, int, int, int);
template void attention_decode_ring_ref<double>(double*, const double*, const double*,
                                                const double*, int, int, int, int, int, int);
