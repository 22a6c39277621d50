// plain_bf16_attention.cpp — see plain_bf16_attention.h.
#include "tests/gpu/plain_bf16_attention.h"

#include <algorithm>
#include <cmath>

#include "tests/test_common.h"

namespace {

// The L2 norm and the largest |element| of each HS-long row of x.
void row_norms(const std::vector<float>& x, int HS, std::vector<double>& l2,
               std::vector<double>& mx) {
  const size_t rows = x.size() / HS;
  l2.assign(rows, 0.0);
  mx.assign(rows, 0.0);
  for (size_t r = 0; r < rows; r++)
    for (int d = 0; d < HS; d++) {
      const double v = x[r * HS + d];
      l2[r] += v * v;
      mx[r] = std::max(mx[r], std::fabs(v));
    }
  for (double& v : l2) v = std::sqrt(v);
}

}  // namespace

AttentionFloors plain_bf16_attention(std::vector<float>& out, std::vector<float>& dqkv,
                                     const std::vector<float>& qkv,
                                     const std::vector<float>& dout, const AttnShape& s,
                                     const AttnMask& mask) {
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
  // Row norms of the inputs, indexed as qkv's and dout's rows of HS: (b*T + t)*H3 + head.
  std::vector<double> qkv_l2, qkv_max, do_l2, do_max;
  row_norms(qkv, HS, qkv_l2, qkv_max);
  row_norms(dout, HS, do_l2, do_max);
  auto row = [&](int b, int t, int head) { return (size_t(b) * T + t) * H3 + head; };
  // The floors (see the header), before the factor u: largest contribution of one rounding.
  double f_out_l2 = 0, f_out_max = 0, f_dv_l2 = 0, f_dv_max = 0, f_dq_l2 = 0, f_dq_max = 0,
         f_dk_l2 = 0, f_dk_max = 0;
  // Threads only where they repay their start (the rule's CPU test runs thousands of T = 4).
  [[maybe_unused]] const bool threads =  // used by the pragmas only
      size_t(B) * NH * (size_t(T) * (T + 1) / 2) * HS >= (size_t(1) << 15);
  // Rows: S, P, O, dP, dS, dQ.
#pragma omp parallel for collapse(3) schedule(dynamic, 4) if (threads) \
    reduction(max : f_out_l2, f_out_max, f_dv_l2, f_dv_max, f_dq_l2, f_dq_max, f_dk_l2, f_dk_max)
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        const int g = h / G;
        float* prow = &P[(size_t(b) * NH + h) * TT + size_t(t) * T];
        float* dsrow = &dS[(size_t(b) * NH + h) * TT + size_t(t) * T];
        std::vector<float> srow(t + 1), dprow(t + 1);
        const int lo = mask.seq(b, T).lo(t);  // keys lo..t are visible (P is 0 elsewhere)
        float m = -INFINITY;
        for (int u = lo; u <= t; u++) {
          double acc = 0;
          for (int d = 0; d < HS; d++) acc += double(q(b, t, h)[d]) * k(b, u, g)[d];
          srow[u] = bf16_round(float(scale * acc));
          m = std::max(m, srow[u]);
        }
        double sum = 0;
        for (int u = lo; u <= t; u++) sum += std::exp(double(srow[u]) - m);
        for (int u = lo; u <= t; u++) prow[u] = bf16_round(float(std::exp(double(srow[u]) - m) / sum));
        const float* dot = &dout[o_at(b, t, h)];
        std::vector<double> acc(HS, 0.0);
        for (int u = lo; u <= t; u++)
          for (int d = 0; d < HS; d++) acc[d] += double(prow[u]) * v(b, u, g)[d];
        for (int d = 0; d < HS; d++) out[o_at(b, t, h) + d] = bf16_round(float(acc[d]));
        double D = 0;
        for (int u = lo; u <= t; u++) {
          double acc = 0;
          for (int d = 0; d < HS; d++) acc += double(dot[d]) * v(b, u, g)[d];
          dprow[u] = bf16_round(float(acc));
          D += double(prow[u]) * dprow[u];
        }
        for (int u = lo; u <= t; u++) dsrow[u] = bf16_round(float(prow[u] * (dprow[u] - D)));
        const size_t q_row = row(b, t, h), dot_row = (size_t(b) * T + t) * NH + h;
        for (int u = lo; u <= t; u++) {
          const double p = prow[u], sigma = p * (std::fabs(dprow[u]) + std::fabs(D));
          const size_t ku = row(b, u, NH + g), vu = row(b, u, NH + NKV + g);
          f_out_l2 = std::max(f_out_l2, p * qkv_l2[vu]);
          f_out_max = std::max(f_out_max, p * qkv_max[vu]);
          f_dv_l2 = std::max(f_dv_l2, p * do_l2[dot_row]);
          f_dv_max = std::max(f_dv_max, p * do_max[dot_row]);
          f_dq_l2 = std::max(f_dq_l2, scale * sigma * qkv_l2[ku]);
          f_dq_max = std::max(f_dq_max, scale * sigma * qkv_max[ku]);
          f_dk_l2 = std::max(f_dk_l2, scale * sigma * qkv_l2[q_row]);
          f_dk_max = std::max(f_dk_max, scale * sigma * qkv_max[q_row]);
        }
        float* dq = &dqkv[((size_t(b) * T + t) * H3 + h) * HS];
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int u = lo; u <= t; u++)
          for (int d = 0; d < HS; d++) acc[d] += double(dsrow[u]) * k(b, u, g)[d];
        for (int d = 0; d < HS; d++) dq[d] = bf16_round(float(scale * acc[d]));
      }
  // Columns: dK, dV per kv head, summed over the group's query heads, rounded once. Blocks of
  // kU keys so that the inner loops run along rows of P and dS.
  constexpr int kU = 32;
  const int nub = (T + kU - 1) / kU;
#pragma omp parallel for collapse(3) schedule(dynamic, 1) if (threads)
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
  // Rounding an output element itself moves it by up to u |element|.
  double out_max = 0, part_max[3] = {0, 0, 0};  // dQ, dK, dV
  for (float x : out) out_max = std::max(out_max, double(std::fabs(x)));
  for (size_t i = 0; i < dqkv.size(); i++) {
    const size_t head = (i / HS) % H3;
    const int part = head < size_t(NH) ? 0 : head < size_t(NH + NKV) ? 1 : 2;
    part_max[part] = std::max(part_max[part], double(std::fabs(dqkv[i])));
  }
  auto floor = [](double l2, double mx, double own) {
    return RoundingFloor{kBf16Unit * std::max(l2, own), kBf16Unit * std::max(mx, own)};
  };
  AttentionFloors f;
  f.out = floor(f_out_l2, f_out_max, out_max);
  f.dq = floor(f_dq_l2, f_dq_max, part_max[0]);
  f.dk = floor(f_dk_l2, f_dk_max, part_max[1]);
  f.dv = floor(f_dv_l2, f_dv_max, part_max[2]);
  return f;
}
