// plain_bf16_attention.cpp — see plain_bf16_attention.h.
#include "tests/gpu/plain_bf16_attention.h"

#include <algorithm>
#include <cmath>

#include "tests/test_common.h"

void plain_bf16_attention(std::vector<float>& out, std::vector<float>& dqkv,
                          const std::vector<float>& qkv, const std::vector<float>& dout,
                          const AttnShape& s) {
  const int B = s.B, T = s.T, NH = s.NH, NKV = s.NKV, HS = s.HS, G = NH / NKV;
  const size_t H3 = size_t(NH) + 2 * NKV;
  const double scale = 1.0 / std::sqrt(double(HS));
  auto q = [&](int b, int t, int h) { return &qkv[((size_t(b) * T + t) * H3 + h) * HS]; };
  auto k = [&](int b, int t, int g) { return &qkv[((size_t(b) * T + t) * H3 + NH + g) * HS]; };
  auto v = [&](int b, int t, int g) {
    return &qkv[((size_t(b) * T + t) * H3 + NH + NKV + g) * HS];
  };
  auto o_at = [&](int b, int t, int h) { return ((size_t(b) * T + t) * NH + h) * HS; };
  const size_t TT = size_t(T) * T;
  std::vector<float> P(size_t(B) * NH * TT, 0.f), dS(size_t(B) * NH * TT, 0.f);
  out.assign(size_t(B) * T * NH * HS, 0.f);
  dqkv.assign(size_t(B) * T * H3 * HS, 0.f);
  // Rows: S, P, O, dP, dS, dQ.
#pragma omp parallel for collapse(3) schedule(dynamic, 4)
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        const int g = h / G;
        float* prow = &P[(size_t(b) * NH + h) * TT + size_t(t) * T];
        float* dsrow = &dS[(size_t(b) * NH + h) * TT + size_t(t) * T];
        std::vector<float> srow(t + 1), dprow(t + 1);
        float m = -INFINITY;
        for (int u = 0; u <= t; u++) {
          double acc = 0;
          for (int d = 0; d < HS; d++) acc += double(q(b, t, h)[d]) * k(b, u, g)[d];
          srow[u] = bf16_round(float(scale * acc));
          m = std::max(m, srow[u]);
        }
        double sum = 0;
        for (int u = 0; u <= t; u++) sum += std::exp(double(srow[u]) - m);
        for (int u = 0; u <= t; u++) prow[u] = bf16_round(float(std::exp(double(srow[u]) - m) / sum));
        const float* dot = &dout[o_at(b, t, h)];
        std::vector<double> acc(HS, 0.0);
        for (int u = 0; u <= t; u++)
          for (int d = 0; d < HS; d++) acc[d] += double(prow[u]) * v(b, u, g)[d];
        for (int d = 0; d < HS; d++) out[o_at(b, t, h) + d] = bf16_round(float(acc[d]));
        double D = 0;
        for (int u = 0; u <= t; u++) {
          double acc = 0;
          for (int d = 0; d < HS; d++) acc += double(dot[d]) * v(b, u, g)[d];
          dprow[u] = bf16_round(float(acc));
          D += double(prow[u]) * dprow[u];
        }
        for (int u = 0; u <= t; u++) dsrow[u] = bf16_round(float(prow[u] * (dprow[u] - D)));
        float* dq = &dqkv[((size_t(b) * T + t) * H3 + h) * HS];
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int u = 0; u <= t; u++)
          for (int d = 0; d < HS; d++) acc[d] += double(dsrow[u]) * k(b, u, g)[d];
        for (int d = 0; d < HS; d++) dq[d] = bf16_round(float(scale * acc[d]));
      }
  // Columns: dK, dV per kv head, summed over the group's query heads, rounded once. Blocks of
  // kU keys so that the inner loops run along rows of P and dS.
  constexpr int kU = 32;
  const int nub = (T + kU - 1) / kU;
#pragma omp parallel for collapse(3) schedule(dynamic, 1)
  for (int b = 0; b < B; b++)
    for (int g = 0; g < NKV; g++)
      for (int ub = 0; ub < nub; ub++) {
        const int u0 = ub * kU, u1 = std::min(T, u0 + kU);
        std::vector<double> dk(size_t(kU) * HS, 0.0), dv(size_t(kU) * HS, 0.0);
        for (int h = g * G; h < (g + 1) * G; h++) {
          const float* Pbh = &P[(size_t(b) * NH + h) * TT];
          const float* dSbh = &dS[(size_t(b) * NH + h) * TT];
          for (int t = u0; t < T; t++) {
            const float* qt = q(b, t, h);
            const float* dot = &dout[o_at(b, t, h)];
            for (int u = u0; u < std::min(u1, t + 1); u++) {
              const double p = Pbh[size_t(t) * T + u], ds = dSbh[size_t(t) * T + u];
              double* dku = &dk[size_t(u - u0) * HS];
              double* dvu = &dv[size_t(u - u0) * HS];
              for (int d = 0; d < HS; d++) {
                dku[d] += ds * qt[d];
                dvu[d] += p * dot[d];
              }
            }
          }
        }
        for (int u = u0; u < u1; u++) {
          float* dkp = &dqkv[((size_t(b) * T + u) * H3 + NH + g) * HS];
          float* dvp = &dqkv[((size_t(b) * T + u) * H3 + NH + NKV + g) * HS];
          for (int d = 0; d < HS; d++) {
            dkp[d] = bf16_round(float(scale * dk[size_t(u - u0) * HS + d]));
            dvp[d] = bf16_round(float(dv[size_t(u - u0) * HS + d]));
          }
        }
      }
}
