// test_ring_attention_ref — the CPU ring attention oracle of context parallelism
// (model/ring_attention_ref.{h,cpp}) against full attention (kernels/attention/attention_ref.h),
// causal and under masks (kernels/attention/mask.h), and what the simulated ring did.
//
//   ContextParallel.RingMatchesFullAttention*   ring forward O, LSE and backward dQ, dK, dV vs
//                                               full attention, N = 1..4, ragged T, GQA, MQA,
//                                               RoPE at global positions; double to 1e-12,
//                                               float within a per-element bound on the ring's
//                                               float roundings
//   ContextParallel.FloatBoundCatchesWrongRings a float ring with a dropped dK/dV
//                                               contribution, or K/V or LSE in bf16, breaks
//                                               that bound
//   ContextParallel.RingTrace                   what the simulated ring did: blocks held per
//                                               step, dK/dV home, work per rank, bytes sent
//   ContextParallel.RingBackwardFiniteDifferences  ring + RoPE backward vs central differences
//   ContextParallel.WrongRingIsDetected         a dropped block, an LSE-blind merge and a
//                                               wrong key offset all fail the comparison
//   ContextParallel.RingWithMasks*              the document mask and sliding windows at cp 2,
//                                               3 and 4 against the masked full attention, the
//                                               pairs the masks empty skipped; the same
//                                               pairs computed as the masked full attention's
//   ContextParallel.ZigzagUnderDocumentMasks    each rank's share of the document mask's work
//                                               on synthetic documents (printed: the balance)
//
// Run: make NO_CUDA=1 BUILD=build-cpu -j2 build-cpu/test_cpu &&
//      build-cpu/test_cpu --gtest_filter='ContextParallel.Ring*:ContextParallel.Zigzag*'
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "kernels/attention/attention_ref.h"
#include "kernels/attention/mask.h"
#include "kernels/common.h"
#include "kernels/rope.h"
#include "model/context_parallel.h"
#include "model/ring_attention_ref.h"
#include "tests/cpu/ref_check.h"
#include "tests/test_common.h"
// ---------------------------------------------------------------------------------------------
// ring attention vs full attention

namespace {

constexpr float kTheta = 10000.0f;

size_t qkv_size(const AttnShape& s) { return size_t(s.B) * s.T * (s.NH + 2 * s.NKV) * s.HS; }
size_t out_size(const AttnShape& s) { return size_t(s.B) * s.T * s.NH * s.HS; }
size_t lse_size(const AttnShape& s) { return size_t(s.B) * s.NH * s.T; }
size_t qkv_row(const AttnShape& s) { return size_t(s.NH + 2 * s.NKV) * s.HS; }
size_t out_row(const AttnShape& s) { return size_t(s.NH) * s.HS; }

// Fresh inputs for every check: one generator for the file, from the iteration's seed
// (tests/test_common.h: FLASHGPT_SEED=<n> repeats a run, --gtest_repeat=N runs N seeds).
std::mt19937_64& rng() { return iteration_rng(0x72696e67ull); }
// count N(0, 1) numbers, element i times amp(i).
template <typename real, typename Amp>
std::vector<real> normal(size_t count, Amp amp) {
  std::normal_distribution<double> n(0.0, 1.0);
  std::vector<real> x(count);
  for (size_t i = 0; i < count; i++) x[i] = real(amp(i) * n(rng()));
  return x;
}
template <typename real>
std::vector<real> random_vec(size_t count) {
  return normal<real>(count, [](size_t) { return 1.0; });
}
// Query and key heads scaled by amp (2: scores with std ~4, peaked softmax rows).
template <typename real>
std::vector<real> random_qkv(const AttnShape& s, double amp) {
  const size_t H3 = s.NH + 2 * s.NKV, QK = s.NH + s.NKV;
  return normal<real>(qkv_size(s), [&](size_t i) { return (i / s.HS) % H3 < QK ? amp : 1.0; });
}
// Outputs start as NaN: an element nothing writes fails every comparison.
template <typename real>
std::vector<real> poisoned(size_t count) {
  return std::vector<real>(count, std::numeric_limits<real>::quiet_NaN());
}

struct Err {
  double rel = 0, max_abs = 0;  // ||got - ref|| / ||ref|| and max |got - ref|; NaN if any is
};
template <typename A, typename B>
Err compare(const A* got, const B* ref, size_t n) {
  double diff2 = 0, ref2 = 0, worst = 0;
  for (size_t i = 0; i < n; i++) {
    const double g = double(got[i]), r = double(ref[i]);
    if (std::isnan(g - r)) return {NAN, NAN};
    diff2 += (g - r) * (g - r);
    ref2 += r * r;
    worst = std::max(worst, std::fabs(g - r));
  }
  return {std::sqrt(diff2 / std::max(ref2, 1e-300)), worst};
}
void expect_close(const char* what, const std::string& ctx, Err e, double tol) {
  std::printf("    %-4s %-42s rel %.2e  max %.2e  tol %.0e (%5.1f%% of tol)\n", what,
              ctx.c_str(), e.rel, e.max_abs, tol, 100.0 * e.rel / tol);
  EXPECT_LE(e.rel, tol) << what << " " << ctx << " (max abs " << e.max_abs << ")";
}

// The q, k or v heads (part 0, 1, 2) of a (B, T, NH + 2*NKV, HS) buffer.
template <typename real>
std::vector<double> heads(const std::vector<real>& x, const AttnShape& s, int part) {
  const int H3 = s.NH + 2 * s.NKV;
  const int lo[3] = {0, s.NH, s.NH + s.NKV}, hi[3] = {s.NH, s.NH + s.NKV, H3};
  std::vector<double> out;
  for (size_t i = 0; i < x.size(); i++) {
    const int h = int((i / s.HS) % H3);
    if (h >= lo[part] && h < hi[part]) out.push_back(double(x[i]));
  }
  return out;
}

struct RingCase {
  int N;
  AttnShape s;  // T: the whole sequence
  bool rope;
};
std::string str(const RingCase& c) {
  return flashgpt::strformat("N=%d B=%d T=%d NH=%d NKV=%d HS=%d%s", c.N, c.s.B, c.s.T, c.s.NH,
                             c.s.NKV, c.s.HS, c.rope ? " rope" : "");
}

const RingCase kRingCases[] = {
    {2, {2, 17, 4, 2, 8}, true},    // GQA 2:1, ragged (17 = 4 chunks of 4, 4, 4, 5)
    {3, {1, 23, 3, 3, 8}, false},   // MHA, ragged, NH not a power of two
    {4, {2, 37, 4, 1, 16}, true},   // multi-query, ragged
    {4, {1, 8, 2, 1, 4}, true},     // T = 2N: one token per chunk
    {3, {1, 48, 6, 2, 16}, true},   // T % 2N == 0, GQA 3:1
    {2, {1, 5, 2, 1, 6}, false},    // the most unbalanced ragged split (spread = T)
    {1, {2, 9, 2, 2, 8}, true},     // cp 1: the ring is one local step
};

// Full attention of the whole sequence (RoPE at positions 0..T-1 first when asked), the
// reference: out (B, T, NH, HS), lse (B, NH, T), dqkv (B, T, NH + 2*NKV, HS) w.r.t. the
// un-rotated qkv.
template <typename real>
void full_attention(std::vector<real>& out, std::vector<real>& lse, std::vector<real>& dqkv,
                    std::vector<real> qkv, const std::vector<real>& dout, const RingCase& c,
                    const AttnMask& mask = {}) {
  const AttnShape& s = c.s;
  if (c.rope) rope_forward_ref(qkv.data(), s.B, s.T, s.NH, s.NKV, s.HS, 0, kTheta);
  out = poisoned<real>(out_size(s)), lse = poisoned<real>(lse_size(s));
  dqkv = poisoned<real>(qkv_size(s));
  attention_flash_forward_ref(out.data(), lse.data(), qkv.data(), s, 4, 5, mask);
  attention_flash_backward_ref(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), s,
                               4, 5, mask);
  if (c.rope) rope_backward_ref(dqkv.data(), s.B, s.T, s.NH, s.NKV, s.HS, 0, kTheta);
}

// The same through the CPU ring: scatter to N ranks, RoPE at global positions, ring forward
// and backward, RoPE backward, gather. Gathered buffers start poisoned, so a row no rank wrote
// fails the comparison.
template <typename real>
void ring_attention(std::vector<real>& out, std::vector<real>& lse, std::vector<real>& dqkv,
                    const std::vector<real>& qkv, const std::vector<real>& dout,
                    const RingCase& c, RingTrace* fwd_trace = nullptr,
                    RingTrace* bwd_trace = nullptr, const AttnMask& mask = {}) {
  const AttnShape& s = c.s;
  const CpLayout L(c.N, s.T);
  const int N = c.N;
  std::vector<std::vector<real>> q(N), o(N), l(N), dO(N), dq(N);
  std::vector<real*> op(N), lp(N), dqp(N);
  std::vector<const real*> qp(N), dOp(N), ocp(N), lcp(N);
  for (int r = 0; r < N; r++) {
    const size_t Tl = L.local_len(r);
    q[r].resize(s.B * Tl * qkv_row(s));
    dO[r].resize(s.B * Tl * out_row(s));
    cp_scatter(q[r].data(), qkv.data(), L, r, s.B, qkv_row(s));
    cp_scatter(dO[r].data(), dout.data(), L, r, s.B, out_row(s));
    if (c.rope) cp_rope_forward_ref(q[r].data(), s, L, r, kTheta);
    o[r] = poisoned<real>(s.B * Tl * out_row(s));
    l[r] = poisoned<real>(size_t(s.B) * s.NH * Tl);
    dq[r] = poisoned<real>(s.B * Tl * qkv_row(s));
    op[r] = o[r].data(), lp[r] = l[r].data(), dqp[r] = dq[r].data();
    qp[r] = q[r].data(), dOp[r] = dO[r].data(), ocp[r] = o[r].data(), lcp[r] = l[r].data();
  }
  ring_attention_forward_ref(op.data(), lp.data(), qp.data(), s, L, mask, fwd_trace);
  ring_attention_backward_ref(dqp.data(), dOp.data(), qp.data(), ocp.data(), lcp.data(), s, L,
                              mask, bwd_trace);
  out = poisoned<real>(out_size(s)), lse = poisoned<real>(lse_size(s));
  dqkv = poisoned<real>(qkv_size(s));
  for (int r = 0; r < N; r++) {
    if (c.rope) cp_rope_backward_ref(dq[r].data(), s, L, r, kTheta);
    cp_gather(out.data(), o[r].data(), L, r, s.B, out_row(s));
    cp_gather(lse.data(), l[r].data(), L, r, s.B * s.NH, 1);
    cp_gather(dqkv.data(), dq[r].data(), L, r, s.B, qkv_row(s));
  }
}

struct RingErrs {
  Err e[5];  // out, lse, dq, dk, dv
};
const char* kOutputs[5] = {"O", "LSE", "dQ", "dK", "dV"};

template <typename real, typename ref_real>
RingErrs ring_errors(const std::vector<real>& out, const std::vector<real>& lse,
                     const std::vector<real>& dqkv, const std::vector<ref_real>& out_ref,
                     const std::vector<ref_real>& lse_ref, const std::vector<ref_real>& dqkv_ref,
                     const AttnShape& s) {
  RingErrs r;
  r.e[0] = compare(out.data(), out_ref.data(), out.size());
  r.e[1] = compare(lse.data(), lse_ref.data(), lse.size());
  for (int part = 0; part < 3; part++) {
    const std::vector<double> got = heads(dqkv, s, part), ref = heads(dqkv_ref, s, part);
    r.e[2 + part] = compare(got.data(), ref.data(), got.size());
  }
  return r;
}

}  // namespace

// double: the ring and full attention differ only in the order of summation and in the merge
// (exp of LSE differences), both exact to ~1e-16 relative per operation; ~1e-15 is observed,
// 1e-12 allowed. Any algorithmic error (a dropped or doubled block, a wrong mask, a missing
// rescale) is >= 1e-3 (WrongRingIsDetected).
TEST(ContextParallel, RingMatchesFullAttentionDouble) {
  for (const RingCase& c : kRingCases) {
    std::printf("  %s\n", str(c).c_str());
    const std::vector<double> qkv = random_qkv<double>(c.s, 2.0);
    const std::vector<double> dout = random_vec<double>(out_size(c.s));
    std::vector<double> out_f, lse_f, dqkv_f, out_r, lse_r, dqkv_r;
    full_attention(out_f, lse_f, dqkv_f, qkv, dout, c);
    ring_attention(out_r, lse_r, dqkv_r, qkv, dout, c);
    const RingErrs e = ring_errors(out_r, lse_r, dqkv_r, out_f, lse_f, dqkv_f, c.s);
    for (int k = 0; k < 5; k++) expect_close(kOutputs[k], str(c), e.e[k], 1e-12);
  }
}

// float: "equal to full attention to fp32 rounding", made precise as a bound per element that
// holds on any input. The float ring (ring_attention_ref.h) computes every product and sum in
// double and stores float values: each store is one rounding, |error| <= u |value| + eta,
// u = 2^-24, eta = 2^-150 (floats below 2^-126 are subnormal and round absolutely, as dV of a
// key that hardly any query attends may be). The formulas below show the u parts; the code
// adds an eta beside each rounding.
// The reference is the double full attention of the same float inputs. For query row i in
// chunk qc (its nb = qc + 1 blocks b: one per key chunk 0..qc; P_j = exp(S_ij - LSE_i) from
// the reference) each rounding's error, times its weight in an output, summed worst-case:
//  * RoPE (rope cases): Q and K are stored rotated, |dq_d| <= u |q_d|, so a score is off by
//    sigma_j <= 2 u scale sum_d |q_d k_jd|, and the outputs by sum_j P_j sigma_j (LSE) and
//    sum_j P_j sigma_j |v_jd - O_d| (O).
//  * Forward: a row's O and LSE are exact functions of its stored blocks (O_b, LSE_b), merged
//    pairwise: dO/dO_b = w_b = exp(LSE_b - LSE), dO/dLSE_b = w_b (O_b - O), dLSE/dLSE_b = w_b,
//    and likewise with W = exp(LSE_run - LSE) <= 1 for a running state after a merge. With
//    H_d = sum_b |w_b O_bd| and G_d = sum_b |w_b (O_bd - O_d)| (w_b O_b = sum_{j in b} P_j v_j),
//    every running state has W |O_run,d| <= H_d and W |O_run,d - O_d| <= G_d, and every LSE_b
//    and LSE_run lies in [min_b LSE_b, LSE], so |LSE_*| <= Lambda = max(|min_b LSE_b|, |LSE|).
//    The blocks' roundings together, and each of the nb - 1 merges', add at most
//    u (H_d + Lambda G_d) to O_d and u Lambda to LSE:
//      E_O,d = nb u (H_d + Lambda G_d) + RoPE term,   E_LSE = nb u Lambda + RoPE term.
//    Lambda is where |LSE| amplifies: an absolute LSE error moves every weight exp(. - LSE).
//  * Backward: D = rowsum(dO o O) from the ring's O, stored: off by sum_d |dO_d| E_O,d + u |D|.
//    P = exp(S - LSE) from the stored LSE: off by P_ij (sigma_j + E_LSE,i). dS = P (dP - D):
//    off by that times |dP - D|, plus P_ij times D's error (an absolute error times P). Then
//    through dQ_i = scale sum_j dS_ij K_j, dK_j = scale sum_i dS_ij Q_i, dV_j = sum_i P_ij dO_i
//    (and RoPE's u |K|, u |Q| beside dS).
//  * Accumulators: an element summed from terms t with k roundings of partial sums is off by
//    at most k u sum |t|: dQ of a row in chunk qc is rounded once per block (k = qc + 1); dK
//    and dV of a key in chunk kc once per chunk pair that meets it (2N - kc pairs) into the
//    step's buffer and once per such step into the owner's accumulator (k = 2 (2N - kc)).
//  * RoPE backward rotates the dQ and dK errors (at most hypot(e, e') per element of a pair)
//    and rounds once more (u |dQ_d|).
//  * Double arithmetic, in the ring and in the reference: under 200 operations of 2^-53 per
//    value, on magnitudes M that no cancellation shrinks (sums of |terms|, times
//    kappa = 1 + Lambda + max_j scale sum_d |q_d k_jd| where an exponent's argument enters):
//    2^-40 M per element (double's underflow, 2^-1074, is far below eta). Products of two
//    roundings: below the largest relative perturbation of any exponent (E_LSE + sigma,
//    checked < 1e-3) times the bound, so the bound is raised by 1%.
// The test checks |ring - reference| <= bound for every element (so the L2 error too). A
// single rounding can use almost all of its share (rows of chunk 0 are one rounding of O and
// LSE). An algorithmic fault costs whole terms, not roundings: FloatBoundCatchesWrongRings
// shows a dropped dK/dV contribution and K/V or LSE kept in bf16 (2^-9 per rounding) fail.
namespace {

constexpr double kFloatUnit = 1.0 / (1 << 24);  // u: one rounding to float, relative
constexpr double kFloatUnderflow = 0x1p-150;   // eta: one rounding below 2^-126, absolute
constexpr double kDoubleAllowance = 1.0 / (1ull << 40);  // per unit of magnitude M (above)

struct RingErrorBound {  // per element, in the gathered layouts (out, lse, dqkv)
  std::vector<double> out, lse, dqkv;
  double largest_perturbation = 0;  // max E_LSE + sigma: the premise of the 1% raise
};

RingErrorBound float_ring_error_bound(const std::vector<float>& qkv_in,
                                      const std::vector<float>& dout_in,
                                      const std::vector<double>& out,
                                      const std::vector<double>& lse,
                                      const std::vector<double>& dqkv, const RingCase& c) {
  const AttnShape& s = c.s;
  const CpLayout L(c.N, s.T);
  const int T = s.T, HS = s.HS, NH = s.NH, NKV = s.NKV, H3 = NH + 2 * NKV, half = HS / 2;
  const double u = kFloatUnit, eta = kFloatUnderflow;
  const double u_qk = c.rope ? u : 0.0, eta_qk = c.rope ? eta : 0.0;  // RoPE stores Q, K rounded
  const double eps = kDoubleAllowance, scale = 1.0 / std::sqrt(double(HS));
  std::vector<double> qkv(qkv_in.begin(), qkv_in.end());
  if (c.rope) rope_forward_ref(qkv.data(), s.B, T, NH, NKV, HS, 0, kTheta);
  std::vector<int> chunk(T);  // the chunk of each position
  for (int k = 0; k < 2 * c.N; k++)
    for (int p = L.chunk_begin(k); p < L.chunk_begin(k + 1); p++) chunk[p] = k;
  auto at = [&](int b, int t, int h) { return ((size_t(b) * T + t) * H3 + h) * HS; };
  auto orow = [&](int b, int t, int h) { return ((size_t(b) * T + t) * NH + h) * HS; };
  RingErrorBound e;
  e.out.resize(out.size()), e.lse.resize(lse.size()), e.dqkv.resize(dqkv.size());
  struct Sums {  // per dqkv element
    double err = 0, terms = 0, M = 0;  // propagated error, sum of |terms| (roundings), magnitude
  };
  std::vector<Sums> g(dqkv.size());
  std::vector<double> S(T), sigma(T), P(T), H(HS), G(HS), wO(HS), EO(HS);
  for (int b = 0; b < s.B; b++)
    for (int h = 0; h < NH; h++)
      for (int i = 0; i < T; i++) {
        const size_t qi = at(b, i, h), oi = orow(b, i, h), li = (size_t(b) * NH + h) * T + i;
        const int kvh = h / (NH / NKV), nb = chunk[i] + 1;
        const double LSE = lse[li];
        double rope_lse = 0, sigma_max = 0, dot_max = 0;
        for (int j = 0; j <= i; j++) {
          const size_t kj = at(b, j, NH + kvh);
          double dot = 0, mag = 0, qk_abs = 0;
          for (int d = 0; d < HS; d++) dot += qkv[qi + d] * qkv[kj + d];
          for (int d = 0; d < HS; d++) mag += std::fabs(qkv[qi + d] * qkv[kj + d]);
          for (int d = 0; d < HS; d++) qk_abs += std::fabs(qkv[qi + d]) + std::fabs(qkv[kj + d]);
          S[j] = scale * dot, P[j] = std::exp(S[j] - LSE);
          sigma[j] = scale * (2 * u_qk * mag + eta_qk * qk_abs);
          rope_lse += P[j] * sigma[j];
          sigma_max = std::max(sigma_max, sigma[j]), dot_max = std::max(dot_max, scale * mag);
        }
        std::fill(H.begin(), H.end(), 0.0);
        std::fill(G.begin(), G.end(), 0.0);
        double lse_min = LSE;
        for (int kc = 0; kc < nb; kc++) {  // the row's blocks
          const int j0 = L.chunk_begin(kc), j1 = std::min(L.chunk_begin(kc + 1), i + 1);
          double w = 0, m = S[j0], l = 0;
          std::fill(wO.begin(), wO.end(), 0.0);
          for (int j = j0; j < j1; j++) {
            w += P[j], m = std::max(m, S[j]);
            for (int d = 0; d < HS; d++) wO[d] += P[j] * qkv[at(b, j, NH + NKV + kvh) + d];
          }
          for (int j = j0; j < j1; j++) l += std::exp(S[j] - m);
          lse_min = std::min(lse_min, m + std::log(l));  // the block's LSE
          for (int d = 0; d < HS; d++)
            H[d] += std::fabs(wO[d]), G[d] += std::fabs(wO[d] - w * out[oi + d]);
        }
        const double lambda = std::max(std::fabs(lse_min), std::fabs(LSE));
        const double kappa = 1 + lambda + dot_max;
        const double lse_round = u * lambda + eta;  // one rounding of any LSE_b or LSE_run
        const double E_lse = nb * lse_round + rope_lse + eps * kappa;
        e.lse[li] = E_lse;
        e.largest_perturbation = std::max(e.largest_perturbation, E_lse + sigma_max);
        double D = 0, D_abs = 0, dD = 0;
        for (int d = 0; d < HS; d++) {
          double rope_o = 0, pv = 0;
          for (int j = 0; j <= i; j++) {
            const double v = qkv[at(b, j, NH + NKV + kvh) + d];
            rope_o += P[j] * sigma[j] * std::fabs(v - out[oi + d]);
            pv += P[j] * std::fabs(v);
          }
          EO[d] = nb * (u * H[d] + eta + lse_round * G[d]) + rope_o +
                  eps * kappa * (pv + std::fabs(out[oi + d]));
          e.out[oi + d] = EO[d];
          D += double(dout_in[oi + d]) * out[oi + d];
          D_abs += std::fabs(dout_in[oi + d] * out[oi + d]);
          dD += std::fabs(dout_in[oi + d]) * EO[d];
        }
        dD += u * std::fabs(D) + eta;
        for (int j = 0; j <= i; j++) {
          const size_t kj = at(b, j, NH + kvh), vj = at(b, j, NH + NKV + kvh);
          double dP = 0, dP_abs = 0;
          for (int d = 0; d < HS; d++) dP += double(dout_in[oi + d]) * qkv[vj + d];
          for (int d = 0; d < HS; d++) dP_abs += std::fabs(dout_in[oi + d] * qkv[vj + d]);
          const double dS = std::fabs(P[j] * (dP - D)), eP = P[j] * (sigma[j] + E_lse);
          const double edS = eP * std::fabs(dP - D) + P[j] * dD;
          const double dS_mag = kappa * P[j] * (dP_abs + D_abs);
          for (int d = 0; d < HS; d++) {
            const double k = std::fabs(qkv[kj + d]), q = std::fabs(qkv[qi + d]);
            const double dO = std::fabs(dout_in[oi + d]);
            Sums &gq = g[qi + d], &gk = g[kj + d], &gv = g[vj + d];
            gq.err += scale * (edS * k + dS * (u_qk * k + eta_qk));
            gk.err += scale * (edS * q + dS * (u_qk * q + eta_qk));
            gq.terms += scale * dS * k, gq.M += scale * dS_mag * k;
            gk.terms += scale * dS * q, gk.M += scale * dS_mag * q;
            gv.err += eP * dO, gv.terms += P[j] * dO, gv.M += kappa * P[j] * dO;
          }
        }
      }
  for (size_t x = 0; x < dqkv.size(); x++) {
    const int t = int((x / (size_t(H3) * HS)) % T), h = int((x / HS) % H3);
    const int roundings = h < NH ? chunk[t] + 1 : 2 * (2 * c.N - chunk[t]);
    e.dqkv[x] = g[x].err + roundings * (u * g[x].terms + eta) + eps * g[x].M;
  }
  if (c.rope)
    for (size_t bt = 0; bt < size_t(s.B) * T; bt++)
      for (int h = 0; h < NH + NKV; h++)
        for (int d = 0; d < half; d++) {
          const size_t x = (bt * H3 + h) * HS + d, y = x + half;
          const double r = std::hypot(e.dqkv[x], e.dqkv[y]) + eps * (g[x].M + g[y].M) + eta;
          e.dqkv[x] = r + u * std::fabs(dqkv[x]), e.dqkv[y] = r + u * std::fabs(dqkv[y]);
        }
  for (std::vector<double>* v : {&e.out, &e.lse, &e.dqkv})
    for (double& x : *v) x *= 1.01;
  return e;
}

// A float case: fresh inputs, their double full attention (the reference) and the bound.
struct FloatCase {
  std::vector<float> qkv, dout;
  std::vector<double> out, lse, dqkv;
  RingErrorBound bound;
};
FloatCase float_case(const RingCase& c) {
  FloatCase f;
  f.qkv = random_qkv<float>(c.s, 2.0);
  f.dout = random_vec<float>(out_size(c.s));
  full_attention(f.out, f.lse, f.dqkv, std::vector<double>(f.qkv.begin(), f.qkv.end()),
                 std::vector<double>(f.dout.begin(), f.dout.end()), c);
  f.bound = float_ring_error_bound(f.qkv, f.dout, f.out, f.lse, f.dqkv, c);
  return f;
}

// The largest |got - ref| / bound over the elements of each output (O, LSE, dQ, dK, dV);
// infinity where got is NaN (an element nothing wrote).
struct BoundShares {
  double share[5];
  double worst() const { return *std::max_element(share, share + 5); }
};
BoundShares bound_shares(const std::vector<float>& out, const std::vector<float>& lse,
                         const std::vector<float>& dqkv, const FloatCase& f, const AttnShape& s) {
  auto share = [](const std::vector<double>& got, const std::vector<double>& ref,
                  const std::vector<double>& tol) {
    double w = 0;
    for (size_t i = 0; i < got.size(); i++) {
      const double r = std::fabs(got[i] - ref[i]) / tol[i];
      w = std::isnan(r) ? INFINITY : std::max(w, r);
    }
    return w;
  };
  BoundShares b;
  b.share[0] = share(std::vector<double>(out.begin(), out.end()), f.out, f.bound.out);
  b.share[1] = share(std::vector<double>(lse.begin(), lse.end()), f.lse, f.bound.lse);
  for (int part = 0; part < 3; part++)
    b.share[2 + part] =
        share(heads(dqkv, s, part), heads(f.dqkv, s, part), heads(f.bound.dqkv, s, part));
  return b;
}

}  // namespace

TEST(ContextParallel, RingMatchesFullAttentionFloat) {
  SEED_TRACE();
  for (const RingCase& c : kRingCases) {
    std::printf("  %s (largest error / its element's bound)\n", str(c).c_str());
    const FloatCase f = float_case(c);
    ASSERT_LT(f.bound.largest_perturbation, 1e-3) << str(c) << ": the 1% raise assumes it";
    std::vector<float> out, lse, dqkv;
    ring_attention(out, lse, dqkv, f.qkv, f.dout, c);
    const BoundShares b = bound_shares(out, lse, dqkv, f, c.s);
    const RingErrs er = ring_errors(out, lse, dqkv, f.out, f.lse, f.dqkv, c.s);
    for (int k = 0; k < 5; k++) {
      std::printf("    %-4s rel L2 error %.2e  worst element %5.1f%% of its bound\n", kOutputs[k],
                  er.e[k].rel, 100 * b.share[k]);
      note_tolerance_share(b.share[k], 1.0);
      EXPECT_LE(b.share[k], 1.0) << kOutputs[k] << " " << str(c);
    }
  }
}

// The float bound catches a wrong float ring. The ring is rebuilt from the public pieces
// (forward: ring_attention_forward_ref; backward: D, then the block backward of every chunk
// pair, each step's dK/dV sent to the block's owner) with one fault at a time; fault-free it
// must stay within the bound, and each fault must break it in the outputs it touches.
TEST(ContextParallel, FloatBoundCatchesWrongRings) {
  SEED_TRACE();
  enum Fault { kNone, kDropDkvStep, kKvBf16, kLseBf16 };
  const char* names[] = {"none", "a dK/dV contribution dropped", "K/V sent as bf16",
                         "LSE stored as bf16"};
  const bool spoils[4][5] = {{false, false, false, false, false},  // O, LSE, dQ, dK, dV
                             {false, false, false, true, true},
                             {false, false, true, true, true},
                             {false, true, true, true, true}};
  const RingCase c{3, {2, 23, 4, 2, 8}, false};
  const FloatCase f = float_case(c);
  ASSERT_LT(f.bound.largest_perturbation, 1e-3) << "the bound's 1% raise assumes it";
  const AttnShape& s = c.s;
  const CpLayout L(c.N, s.T);
  const int N = c.N;
  for (Fault fault : {kNone, kDropDkvStep, kKvBf16, kLseBf16}) {
    std::vector<std::vector<float>> q(N), o(N), l(N), dO(N), D(N), dq(N), dkv(N);
    std::vector<float*> op(N), lp(N);
    std::vector<const float*> qp(N);
    for (int r = 0; r < N; r++) {
      const size_t Tl = L.local_len(r);
      q[r].resize(s.B * Tl * qkv_row(s));
      dO[r].resize(s.B * Tl * out_row(s));
      cp_scatter(q[r].data(), f.qkv.data(), L, r, s.B, qkv_row(s));
      cp_scatter(dO[r].data(), f.dout.data(), L, r, s.B, out_row(s));
      o[r].resize(dO[r].size()), l[r].resize(size_t(s.B) * s.NH * Tl);
      op[r] = o[r].data(), lp[r] = l[r].data(), qp[r] = q[r].data();
    }
    ring_attention_forward_ref(op.data(), lp.data(), qp.data(), s, L);
    for (int r = 0; r < N; r++) {
      const size_t Tl = L.local_len(r);
      if (fault == kLseBf16)
        for (float& x : l[r]) x = bf16_round(x);
      D[r].resize(l[r].size());
      for (int b = 0; b < s.B; b++)
        for (size_t t = 0; t < Tl; t++)
          for (int h = 0; h < s.NH; h++) {
            const size_t row = ((b * Tl + t) * s.NH + h) * s.HS;
            double acc = 0;
            for (int d = 0; d < s.HS; d++) acc += double(dO[r][row + d]) * o[r][row + d];
            D[r][(size_t(b) * s.NH + h) * Tl + t] = float(acc);
          }
      dq[r].assign(o[r].size(), 0.0f);
      dkv[r].assign(s.B * Tl * 2 * s.NKV * s.HS, 0.0f);
    }
    for (int r = 0; r < N; r++)
      for (int step = 0; step < N; step++) {
        const int src = L.ring_source(r, step), Tk = L.local_len(src);
        std::vector<float> kv;  // the K/V heads of rank src's rows
        for (size_t t = 0; t < size_t(s.B) * Tk; t++)
          kv.insert(kv.end(), q[src].begin() + t * qkv_row(s) + out_row(s),
                    q[src].begin() + (t + 1) * qkv_row(s));
        if (fault == kKvBf16 && step > 0)
          for (float& x : kv) x = bf16_round(x);
        std::vector<float> dkv_blk(kv.size(), 0.0f);
        for (const CpBlockPair& p : L.pairs(r, step))
          if (p.kind != CpPairKind::kSkipped)
            attention_block_backward_ref(dq[r].data(), dkv_blk.data(), dO[r].data(),
                                         q[r].data(), kv.data(), l[r].data(), D[r].data(), s,
                                         L.local_len(r), Tk, p.q, p.k);
        if (fault == kDropDkvStep && r == 1 && step == 1) continue;  // never sent home
        for (size_t x = 0; x < kv.size(); x++)
          dkv[src][x] = float(double(dkv[src][x]) + double(dkv_blk[x]));
      }
    std::vector<float> out(out_size(s)), lse(lse_size(s)), dqkv(qkv_size(s));
    for (int r = 0; r < N; r++) {
      const size_t Tl = L.local_len(r), kvrow = qkv_row(s) - out_row(s);
      std::vector<float> local(s.B * Tl * qkv_row(s));
      for (size_t t = 0; t < s.B * Tl; t++) {
        std::copy_n(dq[r].begin() + t * out_row(s), out_row(s), local.begin() + t * qkv_row(s));
        std::copy_n(dkv[r].begin() + t * kvrow, kvrow,
                    local.begin() + t * qkv_row(s) + out_row(s));
      }
      cp_gather(out.data(), o[r].data(), L, r, s.B, out_row(s));
      cp_gather(lse.data(), l[r].data(), L, r, s.B * s.NH, 1);
      cp_gather(dqkv.data(), local.data(), L, r, s.B, qkv_row(s));
    }
    const BoundShares b = bound_shares(out, lse, dqkv, f, s);
    std::printf("  fault: %-30s worst element / bound: O %.2g  LSE %.2g  dQ %.2g  dK %.2g  "
                "dV %.2g\n", names[fault], b.share[0], b.share[1], b.share[2], b.share[3],
                b.share[4]);
    if (fault == kNone) note_tolerance_share(b.worst(), 1.0);
    for (int k = 0; k < 5; k++) {
      if (spoils[fault][k])
        EXPECT_GT(b.share[k], 1.0) << names[fault] << ": " << kOutputs[k] << " not detected";
      else
        EXPECT_LE(b.share[k], 1.0) << names[fault] << ": " << kOutputs[k];
    }
  }
}

TEST(ContextParallel, RingTrace) {
  for (const RingCase& c : kRingCases) {
    const AttnShape& s = c.s;
    const CpLayout L(c.N, s.T);
    const int N = c.N;
    const std::vector<double> qkv = random_qkv<double>(s, 1.0);
    const std::vector<double> dout = random_vec<double>(out_size(s));
    std::vector<double> out, lse, dqkv;
    RingTrace f, b;
    ring_attention(out, lse, dqkv, qkv, dout, c, &f, &b);
    const std::string ctx = str(c);
    ASSERT_EQ(int(f.held.size()), N) << ctx;
    ASSERT_EQ(int(b.held.size()), N) << ctx;
    ASSERT_EQ(int(b.dkv_sent_to.size()), N) << ctx;
    int64_t lo = INT64_MAX, hi = 0, sum = 0;
    for (int r = 0; r < N; r++) {
      std::set<int> seen_f, seen_b;
      for (int step = 0; step < N; step++) {
        EXPECT_EQ(f.held[step][r], L.ring_source(r, step)) << ctx;
        EXPECT_EQ(b.held[step][r], L.ring_source(r, step)) << ctx;
        // Each contribution goes straight home: to the owner of the block it was computed
        // from; the own step's stays.
        EXPECT_EQ(b.dkv_sent_to[step][r], step == 0 ? -1 : b.held[step][r]) << ctx;
        seen_f.insert(f.held[step][r]), seen_b.insert(b.held[step][r]);
      }
      EXPECT_EQ(int(seen_f.size()), N) << ctx << " rank " << r;
      EXPECT_EQ(int(seen_b.size()), N) << ctx << " rank " << r;
      // Work done, counted by the ring from the visible keys of every row it computed, equals
      // the layout's count (per sequence) for each of the B sequences; the backward does the
      // same pairs.
      EXPECT_EQ(f.visible_pairs[r], s.B * L.causal_pairs(r)) << ctx << " rank " << r;
      EXPECT_EQ(b.visible_pairs[r], s.B * L.causal_pairs(r)) << ctx << " rank " << r;
      EXPECT_EQ(f.pairs_by_kind[int(CpPairKind::kDiagonal)][r], 2) << ctx;
      EXPECT_EQ(f.pairs_by_kind[int(CpPairKind::kFull)][r], 1 + 2 * (N - 1)) << ctx;
      EXPECT_EQ(f.pairs_by_kind[int(CpPairKind::kSkipped)][r], 1 + 2 * (N - 1)) << ctx;
      lo = std::min(lo, f.visible_pairs[r]), hi = std::max(hi, f.visible_pairs[r]);
      sum += f.visible_pairs[r];
      // Bytes: what the header's formula says, with double elements.
      const CpCommBytes want = cp_comm_bytes(L, r, s.B, s.NKV, s.HS, 8, 8);
      EXPECT_EQ(f.bytes_sent[r], want.forward) << ctx << " rank " << r;
      EXPECT_EQ(b.bytes_sent[r], want.backward) << ctx << " rank " << r;
    }
    for (int owner = 0; owner < N; owner++) {  // every other rank sent one contribution home
      std::set<int> from;
      for (int step = 1; step < N; step++)
        for (int r = 0; r < N; r++)
          if (b.dkv_sent_to[step][r] == owner) from.insert(r);
      EXPECT_EQ(int(from.size()), N - 1) << ctx << " owner " << owner;
      EXPECT_EQ(from.count(owner), 0u) << ctx << " owner " << owner;
    }
    EXPECT_EQ(sum, s.B * int64_t(s.T) * (s.T + 1) / 2) << ctx;
    EXPECT_LE(hi - lo, s.B * s.T) << ctx;
    std::printf("  %-38s unmasked (q,k) pairs per rank %lld..%lld (spread %lld, B x T=%d); "
                "rank 0 sent %zu B fwd, %zu B bwd\n", ctx.c_str(), (long long)lo, (long long)hi,
                (long long)(hi - lo), s.B * s.T, f.bytes_sent[0], b.bytes_sent[0]);
  }
}

// Central differences in double through scatter, RoPE at global positions and the ring
// forward: loss = sum(out o W), so dL/dqkv is the ring backward (then RoPE backward) with
// dout = W. numerical_grad (ref_check.h, eps 1e-6): truncation ~eps^2 = 1e-12, rounding
// ~1e-16 / eps = 1e-10: 1e-7 allowed.
TEST(ContextParallel, RingBackwardFiniteDifferences) {
  for (const RingCase& c : {RingCase{2, {1, 5, 2, 1, 4}, true}, RingCase{3, {2, 7, 2, 2, 2}, true}}) {
    const AttnShape& s = c.s;
    std::vector<double> qkv = random_qkv<double>(s, 1.5);
    const std::vector<double> W = random_vec<double>(out_size(s));
    std::vector<double> out, lse, dqkv;
    ring_attention(out, lse, dqkv, qkv, W, c);
    const std::vector<double> num = ref_check::numerical_grad(qkv, W, [&] {
      std::vector<double> o, l, d;
      ring_attention(o, l, d, qkv, W, c);  // (its backward is wasted work; the shapes are tiny)
      return o;
    });
    for (int part = 0; part < 3; part++) {
      const std::vector<double> got = heads(dqkv, s, part), ref = heads(num, s, part);
      expect_close(kOutputs[2 + part], str(c), compare(got.data(), ref.data(), got.size()), 1e-7);
    }
  }
}

// The comparison catches a wrong ring. The ring is rebuilt here from the public pieces
// (layout pairs, block forward, merge) with one fault at a time; fault-free it must match full
// attention, and each fault must miss by far more than the float tolerance (~1e-6).
TEST(ContextParallel, WrongRingIsDetected) {
  enum Fault { kNone, kDropBlock, kMergeIgnoresLse, kDiagonalUnmasked };
  const char* names[] = {"none", "a dropped block", "merge ignoring LSE", "diagonal unmasked"};
  const RingCase c{3, {1, 20, 2, 1, 8}, false};
  const AttnShape& s = c.s;
  const CpLayout L(c.N, s.T);
  const std::vector<double> qkv = random_qkv<double>(s, 1.0);
  const std::vector<double> dout = random_vec<double>(out_size(s));
  std::vector<double> out_f, lse_f, dqkv_f;
  full_attention(out_f, lse_f, dqkv_f, qkv, dout, c);
  for (Fault fault : {kNone, kDropBlock, kMergeIgnoresLse, kDiagonalUnmasked}) {
    std::vector<double> out = poisoned<double>(out_size(s));
    for (int r = 0; r < c.N; r++) {
      const int Tl = L.local_len(r);
      std::vector<double> q(s.B * Tl * qkv_row(s)), o(s.B * Tl * out_row(s), 0.0);
      std::vector<double> l(size_t(s.B) * s.NH * Tl, -INFINITY), ob(o.size()), lb(l.size());
      cp_scatter(q.data(), qkv.data(), L, r, s.B, qkv_row(s));
      for (int step = 0; step < c.N; step++) {
        const int src = L.ring_source(r, step), Tk = L.local_len(src);
        // The K/V block of rank src: its rows of qkv, heads NH .. NH + 2*NKV.
        std::vector<double> qs(s.B * Tk * qkv_row(s)), kv;
        cp_scatter(qs.data(), qkv.data(), L, src, s.B, qkv_row(s));
        for (size_t t = 0; t < size_t(s.B) * Tk; t++)
          kv.insert(kv.end(), qs.begin() + t * qkv_row(s) + out_row(s),
                    qs.begin() + (t + 1) * qkv_row(s));
        for (CpBlockPair p : L.pairs(r, step)) {
          if (p.kind == CpPairKind::kSkipped) continue;
          if (fault == kDropBlock && r == 1 && step == 1) continue;
          if (fault == kDiagonalUnmasked && p.kind == CpPairKind::kDiagonal)
            p.k.global_begin -= p.k.len;  // keys claimed one chunk earlier: all visible
          attention_block_forward_ref(ob.data(), lb.data(), q.data(), kv.data(), s, Tl, Tk, p.q,
                                      p.k);
          if (fault == kMergeIgnoresLse) {
            // The partial outputs summed, as if no block needed rescaling by its LSE.
            for (int b = 0; b < s.B; b++)
              for (int t = p.q.local_begin; t < p.q.local_begin + p.q.len; t++)
                for (size_t i = 0; i < out_row(s); i++)
                  o[(size_t(b) * Tl + t) * out_row(s) + i] +=
                      ob[(size_t(b) * Tl + t) * out_row(s) + i];
          } else {
            attention_merge_ref(o.data(), l.data(), ob.data(), lb.data(), s, Tl, p.q);
          }
        }
      }
      cp_gather(out.data(), o.data(), L, r, s.B, out_row(s));
    }
    const Err e = compare(out.data(), out_f.data(), out.size());
    std::printf("  fault: %-20s O rel error %.2e\n", names[fault], e.rel);
    if (fault == kNone)
      EXPECT_LE(e.rel, 1e-12);
    else
      EXPECT_GT(e.rel, 1e-3) << names[fault] << " was not detected";
  }
}


// ---------------------------------------------------------------------------------------------
// masks

namespace {

// Documents of a case: per sequence, the positions of its end-of-text tokens.
struct MaskedRingCase {
  RingCase c;
  std::vector<std::vector<int>> eots;  // [b] EOT positions (none: one document over the window)
  int window;
  const char* what;
};
std::string str(const MaskedRingCase& m) {
  std::string docs;
  for (const std::vector<int>& e : m.eots) {
    docs += " [";
    for (size_t i = 0; i < e.size(); i++) docs += flashgpt::strformat("%s%d", i ? "," : "", e[i]);
    docs += "]";
  }
  return str(m.c) + flashgpt::strformat(" W=%d EOT at%s (%s)", m.window, docs.c_str(), m.what);
}
// doc_start (B, T) of the case: the tokens are 0 but at the EOT positions (eot = 1).
std::vector<int> doc_starts(const MaskedRingCase& m) {
  std::vector<int> tokens(size_t(m.c.s.B) * m.c.s.T, 0);
  for (int b = 0; b < m.c.s.B && b < int(m.eots.size()); b++)
    for (int t : m.eots[b]) tokens[size_t(b) * m.c.s.T + t] = 1;
  return document_starts(tokens.data(), m.c.s.B, m.c.s.T, 1);
}
std::vector<int> every(int T) {
  std::vector<int> v(T);
  for (int t = 0; t < T; t++) v[t] = t;
  return v;
}
// Random documents of mean length `mean` (an EOT at each position with probability 1/mean).
std::vector<int> random_eots(int T, double mean) {
  std::bernoulli_distribution eot(1.0 / mean);
  std::vector<int> v;
  for (int t = 0; t < T; t++)
    if (eot(rng())) v.push_back(t);
  return v;
}

const std::vector<MaskedRingCase>& masked_cases() {
  static const std::vector<MaskedRingCase> cases = {
      {{2, {2, 17, 4, 2, 8}, true}, {{0, 5, 6, 12}, {9}}, 0,
       "a length-1 document, a window that starts mid-document"},
      {{3, {2, 23, 3, 3, 8}, false}, {random_eots(23, 4), random_eots(23, 4)}, 0,
       "random documents of mean 4"},
      {{4, {2, 37, 4, 1, 16}, true}, {random_eots(37, 6), {}}, 3, "documents and a window"},
      {{3, {1, 48, 6, 2, 16}, true}, {}, 1, "window 1: every row sees itself only"},
      {{4, {1, 37, 4, 1, 16}, false}, {}, 50, "a window longer than T"},
      {{2, {1, 20, 2, 1, 8}, true}, {{}}, 7, "one document over the window, window 7"},
      {{4, {1, 8, 2, 1, 4}, true}, {every(8)}, 0, "every token its own document"},
      {{3, {1, 30, 2, 2, 8}, true}, {{5, 10, 15, 20, 25}}, 0, "documents the chunks' size"},
  };
  return cases;
}

}  // namespace

// The ring under masks equals the masked full attention (attention_ref.h: the oracle of the
// single-GPU kernels) in double, at cp 2, 3 and 4, and computes exactly the pairs the mask
// leaves: the visible pairs it counts equal the mask's (mask.h visible_pairs), and a chunk pair
// holding none is skipped (every token its own document, or window 1: only the diagonal pairs).
TEST(ContextParallel, RingWithMasksMatchesFullAttention) {
  for (const MaskedRingCase& m : masked_cases()) {
    const RingCase& c = m.c;
    std::printf("  %s\n", str(m).c_str());
    const std::vector<int> starts = m.eots.empty() ? std::vector<int>() : doc_starts(m);
    const AttnMask mask{starts.empty() ? nullptr : starts.data(), m.window};
    const std::vector<double> qkv = random_qkv<double>(c.s, 2.0);
    const std::vector<double> dout = random_vec<double>(out_size(c.s));
    std::vector<double> out_f, lse_f, dqkv_f, out_r, lse_r, dqkv_r;
    full_attention(out_f, lse_f, dqkv_f, qkv, dout, c, mask);
    RingTrace f, b;
    ring_attention(out_r, lse_r, dqkv_r, qkv, dout, c, &f, &b, mask);
    const RingErrs e = ring_errors(out_r, lse_r, dqkv_r, out_f, lse_f, dqkv_f, c.s);
    // A row that sees only itself has P = 1 and dS = 0: its dQ and dK are rounding noise around
    // 0 (~1e-15) in both, where a relative error means nothing; they must stay that small.
    const bool only_self = m.window == 1 || (m.eots.size() == 1 && m.eots[0].size() == size_t(c.s.T));
    for (int k = 0; k < 5; k++) {
      if (only_self && (k == 2 || k == 3)) {
        std::printf("    %-4s max |ring - full| %.2e (both ~0: each row sees only itself)\n",
                    kOutputs[k], e.e[k].max_abs);
        EXPECT_LE(e.e[k].max_abs, 1e-12) << kOutputs[k] << " " << str(m);
      } else {
        expect_close(kOutputs[k], str(c), e.e[k], 1e-12);
      }
    }
    int64_t ring_pairs = 0, full_pairs = 0;
    for (int r = 0; r < c.N; r++) {
      ring_pairs += f.visible_pairs[r];
      EXPECT_EQ(b.visible_pairs[r], f.visible_pairs[r]) << str(m);
      full_pairs += f.pairs_by_kind[int(CpPairKind::kFull)][r];
      EXPECT_EQ(f.pairs_by_kind[int(CpPairKind::kDiagonal)][r], 2) << str(m);
    }
    EXPECT_EQ(ring_pairs, visible_pairs(mask, c.s.B, c.s.T)) << str(m);
    if (only_self) {
      EXPECT_EQ(full_pairs, 0) << str(m) << ": a chunk pair the mask empties ran";
    }
    std::printf("    visible pairs %lld of the causal %lld; off-diagonal chunk pairs computed %lld "
                "of %d\n", (long long)ring_pairs,
                (long long)c.s.B * c.s.T * (c.s.T + 1) / 2, (long long)full_pairs,
                c.N * (1 + 2 * (c.N - 1)));
  }
}

// The masked ring's backward against central differences through RoPE at global positions.
TEST(ContextParallel, RingWithMasksFiniteDifferences) {
  const MaskedRingCase m{{3, {2, 9, 2, 1, 4}, true}, {{0, 4}, {2, 3}}, 3, "documents, window 3"};
  const std::vector<int> starts = doc_starts(m);
  const AttnMask mask{starts.data(), m.window};
  std::vector<double> qkv = random_qkv<double>(m.c.s, 1.5);
  const std::vector<double> W = random_vec<double>(out_size(m.c.s));
  std::vector<double> out, lse, dqkv;
  ring_attention(out, lse, dqkv, qkv, W, m.c, nullptr, nullptr, mask);
  const std::vector<double> num = ref_check::numerical_grad(qkv, W, [&] {
    std::vector<double> o, l, d;
    ring_attention(o, l, d, qkv, W, m.c, nullptr, nullptr, mask);
    return o;
  });
  for (int part = 0; part < 3; part++) {
    const std::vector<double> got = heads(dqkv, m.c.s, part), ref = heads(num, m.c.s, part);
    expect_close(kOutputs[2 + part], str(m), compare(got.data(), ref.data(), got.size()), 1e-7);
  }
}

// How zigzag shares the document mask's work (cp_rank_visible_pairs, each rank's queries'
// visible keys), measured on random documents of mean length 256 .. 16K at T = 32K, 8
// sequences each: the busiest rank's share over the mean. Zigzag balances the causal triangle
// exactly; a document mask makes a rank's work depend on where the long documents fall. The
// shares must add up to the mask's visible pairs (mask.h), the numbers are printed.
TEST(ContextParallel, ZigzagUnderDocumentMasks) {
  const int T = 32768, B = 8;
  for (int N : {2, 4, 8})
    for (double mean : {256.0, 1024.0, 4096.0, 16384.0}) {
      std::vector<int> tokens(size_t(B) * T, 0);
      for (int b = 0; b < B; b++)
        for (int t : random_eots(T, mean)) tokens[size_t(b) * T + t] = 1;
      const std::vector<int> starts = document_starts(tokens.data(), B, T, 1);
      const AttnMask mask{starts.data(), 0};
      const CpLayout L(N, T);
      std::vector<int64_t> pairs(N, 0);
      double worst_seq = 0;  // the worst single sequence's busiest / mean
      for (int b = 0; b < B; b++) {
        const std::vector<int64_t> p = cp_rank_visible_pairs(L, mask.seq(b, T));
        int64_t total = 0, most = 0;
        for (int r = 0; r < N; r++) pairs[r] += p[r], total += p[r], most = std::max(most, p[r]);
        worst_seq = std::max(worst_seq, double(most) * N / double(total));
      }
      int64_t total = 0, most = 0;
      for (int64_t p : pairs) total += p, most = std::max(most, p);
      EXPECT_EQ(total, visible_pairs(mask, B, T)) << "N=" << N << " mean " << mean;
      std::printf("  cp %d, documents of mean %5.0f: busiest rank / mean %.2f over %d sequences "
                  "(worst sequence %.2f); the mask leaves %.1f%% of causal work\n", N, mean,
                  double(most) * N / double(total), B, worst_seq,
                  100.0 * double(total) / (double(B) * T * (T + 1) / 2));
    }
}
