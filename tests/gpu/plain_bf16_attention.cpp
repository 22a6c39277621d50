// plain_bf16_attention.cpp — see plain_bf16_attention.h.
#include "tests/gpu/plain_bf16_attention.h"

#include <algorithm>
#include <cmath>

#include "tests/test_common.h"

namespace {

// A row's share of the floor (before the factor u): its bound b (b[d] bounds the error of
// element d), folded into the running largest L2 norm and largest element over rows.
void fold_row_bound(const std::vector<double>& b, double& f_l2, double& f_max) {
  double ss = 0, mx = 0;
  for (double x : b) {
    ss += x * x;
    mx = std::max(mx, x);
  }
  f_l2 = std::max(f_l2, std::sqrt(ss));
  f_max = std::max(f_max, mx);
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
  // P, dS and sigma = P (|dP| + |D|) of each (b, h, t, u): the column pass (dK, dV) reads them.
  std::vector<float> P(size_t(B) * NH * TT, 0.f), dS(size_t(B) * NH * TT, 0.f),
      Sig(size_t(B) * NH * TT, 0.f);
  out.assign(size_t(B) * T * NH * HS, 0.f);
  dqkv.assign(size_t(B) * T * H3 * HS, 0.f);
  // The floors (see the header), before the factor u: over the rows of each result, the
  // largest L2 norm and the largest element of the row's error bound.
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
        const int g = h / G, lo = mask.seq(b, T).lo(t);  // row t sees keys lo..t
        float* prow = &P[(size_t(b) * NH + h) * TT + size_t(t) * T];
        float* dsrow = &dS[(size_t(b) * NH + h) * TT + size_t(t) * T];
        float* sigrow = &Sig[(size_t(b) * NH + h) * TT + size_t(t) * T];
        std::vector<float> srow(t + 1), dprow(t + 1);
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
        float* dq = &dqkv[((size_t(b) * T + t) * H3 + h) * HS];
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int u = lo; u <= t; u++)
          for (int d = 0; d < HS; d++) acc[d] += double(dsrow[u]) * k(b, u, g)[d];
        for (int d = 0; d < HS; d++) dq[d] = bf16_round(float(scale * acc[d]));
        // The error bounds of out row t and dQ row t: each element's own rounding, plus
        // u P_tu |V_u[d]| (out) and u scale sigma_tu |K_u[d]| (dQ) for every key u it sees.
        std::vector<double> bo(HS), bq(HS);
        for (int d = 0; d < HS; d++) {
          bo[d] = std::fabs(out[o_at(b, t, h) + d]);
          bq[d] = std::fabs(dq[d]);
        }
        for (int u = lo; u <= t; u++) {
          const double p = prow[u], sigma = p * (std::fabs(dprow[u]) + std::fabs(D));
          sigrow[u] = float(sigma);
          const float *vu = v(b, u, g), *ku = k(b, u, g);
          for (int d = 0; d < HS; d++) {
            bo[d] += p * std::fabs(vu[d]);
            bq[d] += scale * sigma * std::fabs(ku[d]);
          }
        }
        fold_row_bound(bo, f_out_l2, f_out_max);
        fold_row_bound(bq, f_dq_l2, f_dq_max);
      }
  // Columns: dK, dV per kv head, summed over the group's query heads, rounded once. Blocks of
  // kU keys so that the inner loops run along rows of P and dS.
  constexpr int kU = 32;
  const int nub = (T + kU - 1) / kU;
#pragma omp parallel for collapse(3) schedule(dynamic, 1) if (threads) \
    reduction(max : f_dv_l2, f_dv_max, f_dk_l2, f_dk_max)
  for (int b = 0; b < B; b++)
    for (int g = 0; g < NKV; g++)
      for (int ub = 0; ub < nub; ub++) {
        const int u0 = ub * kU, u1 = std::min(T, u0 + kU);
        std::vector<double> dk(size_t(kU) * HS, 0.0), dv(size_t(kU) * HS, 0.0);
        // the error bounds of the block's dK and dV rows: u scale sigma_tu |Q_t[d]| and
        // u P_tu |dO_t[d]| for every query t (every head of the group) that sees key u
        std::vector<double> bk(size_t(kU) * HS, 0.0), bv(size_t(kU) * HS, 0.0);
        for (int h = g * G; h < (g + 1) * G; h++) {
          const float* Pbh = &P[(size_t(b) * NH + h) * TT];
          const float* dSbh = &dS[(size_t(b) * NH + h) * TT];
          const float* Sigbh = &Sig[(size_t(b) * NH + h) * TT];
          for (int t = u0; t < T; t++) {
            const float* qt = q(b, t, h);
            const float* dot = &dout[o_at(b, t, h)];
            for (int u = u0; u < std::min(u1, t + 1); u++) {
              const double p = Pbh[size_t(t) * T + u], ds = dSbh[size_t(t) * T + u];
              const double ssig = scale * Sigbh[size_t(t) * T + u];
              double* dku = &dk[size_t(u - u0) * HS];
              double* dvu = &dv[size_t(u - u0) * HS];
              double* bku = &bk[size_t(u - u0) * HS];
              double* bvu = &bv[size_t(u - u0) * HS];
              for (int d = 0; d < HS; d++) {
                dku[d] += ds * qt[d];
                dvu[d] += p * dot[d];
                bku[d] += ssig * std::fabs(qt[d]);
                bvu[d] += p * std::fabs(dot[d]);
              }
            }
          }
        }
        for (int u = u0; u < u1; u++) {
          float* dkp = &dqkv[((size_t(b) * T + u) * H3 + NH + g) * HS];
          float* dvp = &dqkv[((size_t(b) * T + u) * H3 + NH + NKV + g) * HS];
          std::vector<double> k_bound(HS), v_bound(HS);
          for (int d = 0; d < HS; d++) {
            dkp[d] = bf16_round(float(scale * dk[size_t(u - u0) * HS + d]));
            dvp[d] = bf16_round(float(dv[size_t(u - u0) * HS + d]));
            k_bound[d] = bk[size_t(u - u0) * HS + d] + std::fabs(dkp[d]);  // + its own rounding
            v_bound[d] = bv[size_t(u - u0) * HS + d] + std::fabs(dvp[d]);
          }
          fold_row_bound(k_bound, f_dk_l2, f_dk_max);
          fold_row_bound(v_bound, f_dv_l2, f_dv_max);
        }
      }
  return AttentionFloors{{kBf16Unit * f_out_l2, kBf16Unit * f_out_max},
                         {kBf16Unit * f_dq_l2, kBf16Unit * f_dq_max},
                         {kBf16Unit * f_dk_l2, kBf16Unit * f_dk_max},
                         {kBf16Unit * f_dv_l2, kBf16Unit * f_dv_max}};
}
