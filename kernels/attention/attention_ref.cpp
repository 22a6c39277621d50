// attention_ref.cpp — CPU attention under a mask (mask.h): naive (stores P), and the tiled
// FlashAttention in both loop orders, FA2 and FA1 (store LSE).
// The oracles for the GPU attention kernels and the attention of the CPU model.
// One file of over 600 lines: the oracles share the layout helpers, the two flash loop orders
// share their tile steps (online_softmax_row forward, BwdWork::step backward), and the
// CpuAttention registry at the end wraps them.
//
// Layout, notation and the maths: attention_ref.h. Per (b, query head h), kv head h / (NH/NKV),
// scale = 1/sqrt(HS), query t sees keys lo(t)..t (mask.h; causal: lo = 0).
//
// FA2 forward, per (b, h) and Q tile i (rows q0 .. q0+Br-1):
//   m_i = -inf, l_i = 0, O_i = 0
//   for j in kv_tiles_for_q_tile(i)                    // EMPTY tiles: skipped
//     S_ij   = scale Q_i K_j^T, masked (-inf where not visible) only if tile j is PARTIAL
//     m_new  = max(m_i, rowmax(S_ij));  P~ = exp(S_ij - m_new)
//     l_i    = exp(m_i - m_new) l_i + rowsum(P~);  O_i = diag(exp(m_i - m_new)) O_i + P~ V_j
//     m_i    = m_new
//   O_i /= l_i;  LSE_i = m_i + log(l_i)
// FA2 backward, per (b, kv head):
//   D = rowsum(dO o O) for the kv head's query heads
//   for each K/V tile j:  dK_j = dV_j = 0
//     for each query head h of the group, for each Q tile i in q_tiles_for_kv_tile(j):
//       P_ij = exp(scale Q_i K_j^T - LSE_i) (0 where masked)
//       dV_j += P_ij^T dO_i;  dP_ij = dO_i V_j^T;  dS_ij = P_ij o (dP_ij - D_i)
//       dQ_i += scale dS_ij K_j;  dK_j += scale dS_ij^T Q_i
//     write dK_j, dV_j
//   write dQ
//
// Limits: any B, T, NH, HS >= 1, NH % NKV == 0, any Br, Bc >= 1. Arithmetic in double for both
// instantiations (float, double). Working memory per thread: tiles only, plus (NH/NKV) x T x HS
// doubles for the backward's dQ accumulator; never T x T. Naive (whose P is T x T anyway) keeps
// per thread a score row of T and K^T or V^T, dK, dV of one kv head (HS x T each).
//
// Test (tests/cpu/test_attention_ref.cpp), from the repository root:
//   make test-cpu                                    (all CPU tests)
//   g++ -std=c++17 -O2 -fopenmp -Wall -Wextra -I. kernels/attention/attention_ref.cpp
//       kernels/attention/mask.cpp tests/cpu/test_attention_ref.cpp tests/main.cpp -lgtest
//       -lpthread -o /tmp/test_attn
//   /tmp/test_attn --gtest_filter='AttentionRef*'
#include "kernels/attention/attention_ref.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/common.h"

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Offsets (in elements) into the packed buffers, and the softmax scale 1/sqrt(HS).
struct Layout {
  size_t T, NH, NKV, HS, H3;  // H3 = NH + 2*NKV heads per token in qkv
  double scale;
  explicit Layout(const AttnShape& s)
      : T(s.T), NH(s.NH), NKV(s.NKV), HS(s.HS), H3(size_t(s.NH) + 2 * size_t(s.NKV)),
        scale(1.0 / std::sqrt(double(s.HS))) {}
  size_t q(size_t b, size_t t, size_t h) const { return ((b * T + t) * H3 + h) * HS; }
  size_t k(size_t b, size_t t, size_t kv) const { return ((b * T + t) * H3 + NH + kv) * HS; }
  size_t v(size_t b, size_t t, size_t kv) const { return ((b * T + t) * H3 + NH + NKV + kv) * HS; }
  size_t o(size_t b, size_t t, size_t h) const { return ((b * T + t) * NH + h) * HS; }
  // Row (b, h, t) of lse; P's row starts at row() * T.
  size_t row(size_t b, size_t h, size_t t) const { return (b * NH + h) * T + t; }
};

void check_shape(const AttnShape& s, const char* who) {
  CHECK(s.B >= 1 && s.T >= 1 && s.NH >= 1 && s.NKV >= 1 && s.HS >= 1,
        "%s: bad shape B=%d T=%d NH=%d NKV=%d HS=%d; every dimension must be >= 1", who, s.B, s.T,
        s.NH, s.NKV, s.HS);
  CHECK(s.NH % s.NKV == 0, "%s: NH=%d is not a multiple of NKV=%d; pick NKV dividing NH", who,
        s.NH, s.NKV);
}

void check_tiles(int Br, int Bc, const char* who) {
  CHECK(Br >= 1 && Bc >= 1, "%s: tile sizes Br=%d Bc=%d must be >= 1", who, Br, Bc);
}

// Copies `rows` rows of HS elements, `stride` elements apart, into a dense double tile.
template <typename real>
void load_tile(double* tile, const real* src, int rows, size_t stride, int HS) {
  for (int r = 0; r < rows; r++)
    for (int d = 0; d < HS; d++) tile[size_t(r) * HS + d] = double(src[r * stride + d]);
}

// The same rows, transposed: tileT[d * ld + r] (HS x ld, ld >= rows).
template <typename real>
void load_tile_T(double* tileT, const real* src, int rows, size_t stride, int HS, int ld) {
  for (int r = 0; r < rows; r++)
    for (int d = 0; d < HS; d++) tileT[size_t(d) * ld + r] = double(src[r * stride + d]);
}

// y[0..n) = sum_d x[d] * AT[d][0..n): one row of x A^T with A given transposed (HS x ld).
// Written as axpys over contiguous rows of AT rather than n dot products, because a dot is a
// reduction that the compiler may not vectorise without -ffast-math; this form it does (about
// 2x on the whole attention, 2-core CPU machine). The sum over d runs in the same order.
void row_times_T(double* y, const double* x, const double* AT, int n, int HS, int ld) {
  for (int c = 0; c < n; c++) y[c] = 0.0;
  for (int d = 0; d < HS; d++) {
    const double xd = x[d];
    const double* a = AT + size_t(d) * ld;
    for (int c = 0; c < n; c++) y[c] += xd * a[c];
  }
}

// Go parallel only when the causal QK^T work (B*NH*T*(T+1)/2*HS multiply-adds) outweighs the
// fork/join: ~32K MACs is ~20 us on one core, a few fork/joins idle, and far less than one
// fork/join on an oversubscribed machine (ms). Tiny shapes (finite differences) run serially.
bool worth_threads(const AttnShape& s) {
  const size_t work = size_t(s.B) * s.NH * (size_t(s.T) * (s.T + 1) / 2) * s.HS;
  return work >= (size_t(1) << 15);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// naive

template <typename real>
void attention_naive_forward_ref(real* out, real* P, const real* qkv, AttnShape s,
                                 const AttnMask& mask) {
  check_shape(s, "attention_naive_forward_ref");
  validate_mask(mask, s.B, s.T, "attention_naive_forward_ref");
  const Layout L(s);
  const int T = s.T, HS = s.HS, group = s.NH / s.NKV;
  const size_t tok = L.H3 * L.HS;  // stride between tokens in qkv
#pragma omp parallel if (worth_threads(s))
  {
    std::vector<double> KT(size_t(HS) * T), srow(T), q(HS), acc(HS);
#pragma omp for collapse(2) schedule(dynamic, 1)
    for (int b = 0; b < s.B; b++)
      for (int h = 0; h < s.NH; h++) {
        const int kv = h / group;
        const SeqMask m = mask.seq(b, T);
        load_tile_T(KT.data(), qkv + L.k(b, 0, kv), T, tok, HS, T);
        for (int t = 0; t < T; t++) {
          const int lo = m.lo(t);  // visible keys lo..t
          load_tile(q.data(), qkv + L.q(b, t, h), 1, 0, HS);
          row_times_T(srow.data() + lo, q.data(), KT.data() + lo, t + 1 - lo, HS, T);
          double mx = kNegInf;
          for (int u = lo; u <= t; u++) {
            srow[u] *= L.scale;
            mx = std::max(mx, srow[u]);
          }
          double sum = 0.0;
          for (int u = lo; u <= t; u++) {
            srow[u] = std::exp(srow[u] - mx);
            sum += srow[u];
          }
          real* prow = P + L.row(b, h, t) * L.T;
          std::fill(acc.begin(), acc.end(), 0.0);
          std::fill(prow, prow + lo, real(0));
          for (int u = lo; u <= t; u++) {
            const double p = srow[u] / sum;
            prow[u] = real(p);
            const real* vu = qkv + L.v(b, u, kv);
            for (int d = 0; d < HS; d++) acc[d] += p * double(vu[d]);
          }
          for (int u = t + 1; u < T; u++) prow[u] = real(0);
          real* o = out + L.o(b, t, h);
          for (int d = 0; d < HS; d++) o[d] = real(acc[d]);
        }
      }
  }
}

template <typename real>
void attention_naive_backward_ref(real* dqkv, const real* dout, const real* qkv, const real* P,
                                  AttnShape s, const AttnMask& mask) {
  check_shape(s, "attention_naive_backward_ref");
  validate_mask(mask, s.B, s.T, "attention_naive_backward_ref");
  const Layout L(s);
  const int T = s.T, HS = s.HS, group = s.NH / s.NKV;
#pragma omp parallel if (worth_threads(s))
  {
    // dK, dV of one kv head (T x HS) live here until all its query heads are done.
    std::vector<double> dK(size_t(T) * HS), dV(size_t(T) * HS), VT(size_t(HS) * T), dP(T);
    std::vector<double> q(HS), dO(HS), dq(HS);
#pragma omp for collapse(2) schedule(dynamic, 1)
    for (int b = 0; b < s.B; b++)
      for (int kv = 0; kv < s.NKV; kv++) {
        const SeqMask m = mask.seq(b, T);
        load_tile_T(VT.data(), qkv + L.v(b, 0, kv), T, L.H3 * L.HS, HS, T);
        std::fill(dK.begin(), dK.end(), 0.0);
        std::fill(dV.begin(), dV.end(), 0.0);
        for (int h = kv * group; h < (kv + 1) * group; h++)
          for (int t = 0; t < T; t++) {
            const int lo = m.lo(t);  // P is 0 outside lo..t
            const real* prow = P + L.row(b, h, t) * L.T;
            load_tile(q.data(), qkv + L.q(b, t, h), 1, 0, HS);
            load_tile(dO.data(), dout + L.o(b, t, h), 1, 0, HS);
            row_times_T(dP.data() + lo, dO.data(), VT.data() + lo, t + 1 - lo, HS, T);  // dO V^T
            double D = 0.0;  // rowsum(dP o P)
            for (int u = lo; u <= t; u++) D += double(prow[u]) * dP[u];
            std::fill(dq.begin(), dq.end(), 0.0);
            for (int u = lo; u <= t; u++) {
              const double p = prow[u], dS = p * (dP[u] - D);
              const real* ku = qkv + L.k(b, u, kv);
              double* dKu = &dK[size_t(u) * HS];
              double* dVu = &dV[size_t(u) * HS];
              for (int d = 0; d < HS; d++) {
                dq[d] += dS * double(ku[d]);
                dKu[d] += dS * q[d];
                dVu[d] += p * dO[d];
              }
            }
            real* dqt = dqkv + L.q(b, t, h);
            for (int d = 0; d < HS; d++) dqt[d] = real(L.scale * dq[d]);
          }
        for (int u = 0; u < T; u++) {
          real* dku = dqkv + L.k(b, u, kv);
          real* dvu = dqkv + L.v(b, u, kv);
          for (int d = 0; d < HS; d++) {
            dku[d] = real(L.scale * dK[size_t(u) * HS + d]);
            dvu[d] = real(dV[size_t(u) * HS + d]);
          }
        }
      }
  }
}

// ---------------------------------------------------------------------------------------------
// flash: the parts both loop orders share
//
// FA1 order (FlashAttention-1: K/V tiles outer, Q tiles inner, state in "HBM")
// forward, per (b, h), with O (T x HS, un-normalised), m (T), l (T) the per-head accumulators
// that the GPU keeps in fp32 device memory:
//   for j = 0 .. Tc-1:                          load K_j, V_j
//     for i in q_tiles_for_kv_tile(j):          (EMPTY Q tiles: skipped)
//       load Q_i; read m_i, l_i, O_i (first K/V tile tile i meets: m_i = -inf, l_i = 0, O_i = 0)
//       S_ij = scale Q_i K_j^T, masked where not visible (PARTIAL tiles)
//       m_new = max(m_i, rowmax S_ij);  P~ = exp(S_ij - m_new)
//       l_i = e^(m_i - m_new) l_i + rowsum P~;  O_i = e^(m_i - m_new) O_i + P~ V_j
//       j == the last K/V tile tile i meets: out_i = O_i / l_i, LSE_i = m_i + log l_i;
//         otherwise write m_i, l_i, O_i back
// backward, per (b, kv head): D = rowsum(dO o O); dQ (group x T x HS) the GPU's fp32 dQ scratch
//   for j = 0 .. Tc-1:  dK_j = dV_j = 0
//     for each query head h of the group, for i in q_tiles_for_kv_tile(j):
//       read dQ_i (first K/V tile tile i meets: 0); the tile step of FA2's backward
//       j == the last K/V tile tile i meets: write dQ_i out, else back
//     write dK_j, dV_j

namespace {

// K_j transposed (HS x Bc, for the rows of S = Q K_j^T: see row_times_T) and V_j (Bc x HS):
// what both forward orders hold of one K/V tile.
struct FwdKvTile {
  std::vector<double> KT, V;
  int Bc;
  FwdKvTile(int Bc, int HS) : KT(size_t(HS) * Bc), V(size_t(Bc) * HS), Bc(Bc) {}
  template <typename real>
  void load(const real* qkv, const Layout& L, int b, int kv, int k0, int cols) {
    const size_t tok = L.H3 * L.HS;
    load_tile_T(KT.data(), qkv + L.k(b, k0, kv), cols, tok, int(L.HS), Bc);
    load_tile(V.data(), qkv + L.v(b, k0, kv), cols, tok, int(L.HS));
  }
};

// The online softmax of query row t (q: HS) against K/V tile kvt (keys k0 .. k0+cols-1).
// S (Bc) is scratch. partial: the tile is PARTIAL, so the keys the mask hides get -inf; a FULL
// tile is not tested. m, l, O (HS): the row's running max, sum and un-normalised output.
void online_softmax_row(double* S, const double* q, const FwdKvTile& kvt, int cols, int k0,
                        int t, bool partial, const SeqMask& mask, const Layout& L, double& m,
                        double& l, double* O) {
  const int HS = int(L.HS);
  const double scale = L.scale;
  row_times_T(S, q, kvt.KT.data(), cols, HS, kvt.Bc);
  double rowmax = kNegInf;
  for (int c = 0; c < cols; c++) {
    S[c] = partial && !mask.visible(t, k0 + c) ? kNegInf : scale * S[c];
    rowmax = std::max(rowmax, S[c]);
  }
  const double m_new = std::max(m, rowmax);
  // A row that has met no visible key yet (its document or window starts in a later tile)
  // keeps m = -inf: guard -inf - -inf as the GPU does.
  const double alpha = m == kNegInf ? 0.0 : std::exp(m - m_new);
  double rowsum = 0.0;
  for (int c = 0; c < cols; c++) {
    S[c] = S[c] == kNegInf ? 0.0 : std::exp(S[c] - m_new);  // P~
    rowsum += S[c];
  }
  l = alpha * l + rowsum;
  m = m_new;
  for (int d = 0; d < HS; d++) O[d] *= alpha;
  for (int c = 0; c < cols; c++) {
    const double p = S[c];
    const double* v = &kvt.V[size_t(c) * HS];
    for (int d = 0; d < HS; d++) O[d] += p * v[d];
  }
}

// out row = O / l, LSE = m + log(l). l > 0: every row sees at least itself.
template <typename real>
void write_out_row(real* o, real* lse, const double* O, double m, double l, int HS) {
  const double inv_l = 1.0 / l;
  for (int d = 0; d < HS; d++) o[d] = real(O[d] * inv_l);
  *lse = real(m + std::log(l));
}

// D = rowsum(dO o O) of the query heads of kv head `kv` (the GPU's preprocessing pass):
// D (group x T).
template <typename real>
void rowsum_dout_out(double* D, const real* dout, const real* out, const Layout& L, int b, int kv,
                     int group) {
  for (int g = 0; g < group; g++)
    for (size_t t = 0; t < L.T; t++) {
      const size_t h = size_t(kv) * group + g;
      const real* dO = dout + L.o(b, t, h);
      const real* O = out + L.o(b, t, h);
      double acc = 0.0;
      for (size_t d = 0; d < L.HS; d++) acc += double(dO[d]) * double(O[d]);
      D[g * L.T + t] = acc;
    }
}

// dQ rows q0 .. q0+rows-1 of query head h, from a double accumulator (rows x HS).
template <typename real>
void store_dq(real* dqkv, const double* dQ, const Layout& L, int b, int h, int q0, int rows) {
  for (int r = 0; r < rows; r++) {
    real* dq = dqkv + L.q(b, q0 + r, h);
    for (size_t d = 0; d < L.HS; d++) dq[d] = real(dQ[r * L.HS + d]);
  }
}

// The per-thread working set of the backward (both orders) and its (Q tile, K/V tile) step.
struct BwdWork {
  int Bc, HS;
  std::vector<double> Q_i, dO_i;  // (Br x HS)
  // K_j and V_j are also held transposed, for the rows of S_ij and dP_ij (see row_times_T).
  std::vector<double> K_j, K_jT, V_jT, dK_j, dV_j;
  std::vector<double> P, dS;  // one row of P_ij and dS_ij (Bc)
  BwdWork(int Br, int Bc, int HS)
      : Bc(Bc), HS(HS), Q_i(size_t(Br) * HS), dO_i(size_t(Br) * HS), K_j(size_t(Bc) * HS),
        K_jT(size_t(HS) * Bc), V_jT(size_t(HS) * Bc), dK_j(size_t(Bc) * HS),
        dV_j(size_t(Bc) * HS), P(Bc), dS(Bc) {}

  // Loads K_j, V_j and zeroes dK_j, dV_j.
  template <typename real>
  void load_kv(const real* qkv, const Layout& L, int b, int kv, int k0, int cols) {
    const size_t tok = L.H3 * L.HS;
    load_tile(K_j.data(), qkv + L.k(b, k0, kv), cols, tok, HS);
    load_tile_T(K_jT.data(), qkv + L.k(b, k0, kv), cols, tok, HS, Bc);
    load_tile_T(V_jT.data(), qkv + L.v(b, k0, kv), cols, tok, HS, Bc);
    std::fill(dK_j.begin(), dK_j.end(), 0.0);
    std::fill(dV_j.begin(), dV_j.end(), 0.0);
  }
  template <typename real>
  void store_kv(real* dqkv, const Layout& L, int b, int kv, int k0, int cols) const {
    for (int c = 0; c < cols; c++) {
      real* dk = dqkv + L.k(b, k0 + c, kv);
      real* dv = dqkv + L.v(b, k0 + c, kv);
      for (int d = 0; d < HS; d++) {
        dk[d] = real(dK_j[size_t(c) * HS + d]);
        dv[d] = real(dV_j[size_t(c) * HS + d]);
      }
    }
  }
  template <typename real>
  void load_q(const real* qkv, const real* dout, const Layout& L, int b, int h, int q0, int rows) {
    load_tile(Q_i.data(), qkv + L.q(b, q0, h), rows, L.H3 * L.HS, HS);
    load_tile(dO_i.data(), dout + L.o(b, q0, h), rows, L.NH * L.HS, HS);
  }
  // Rows q0 .. q0+rows-1 against keys k0 .. k0+cols-1: P_ij = exp(scale Q_i K_j^T - LSE_i)
  // (0 where masked: PARTIAL tiles only), dS_ij = P_ij o (dO_i V_j^T - D_i);
  // dV_j += P_ij^T dO_i, dQ_i += scale dS_ij K_j, dK_j += scale dS_ij^T Q_i.
  // dQ_i (rows x HS), lse_i and D_i (rows): the tile's rows.
  template <typename real>
  void step(double* dQ_i, const real* lse_i, const double* D_i, int q0, int rows, int k0,
            int cols, bool partial, const SeqMask& mask, double scale) {
    for (int r = 0; r < rows; r++) {
      const int t = q0 + r;
      const double LSE_r = double(lse_i[r]), D_r = D_i[r];
      const double* q = &Q_i[size_t(r) * HS];
      const double* dO = &dO_i[size_t(r) * HS];
      row_times_T(P.data(), q, K_jT.data(), cols, HS, Bc);    // S_ij row
      row_times_T(dS.data(), dO, V_jT.data(), cols, HS, Bc);  // dP_ij row
      for (int c = 0; c < cols; c++) {
        if (partial && !mask.visible(t, k0 + c)) {
          P[c] = dS[c] = 0.0;
          continue;
        }
        P[c] = std::exp(scale * P[c] - LSE_r);
        dS[c] = P[c] * (dS[c] - D_r);
      }
      double* dq = &dQ_i[size_t(r) * HS];
      for (int c = 0; c < cols; c++) {
        const double p = P[c], ds = scale * dS[c];
        const double* k = &K_j[size_t(c) * HS];
        double* dk = &dK_j[size_t(c) * HS];
        double* dv = &dV_j[size_t(c) * HS];
        for (int d = 0; d < HS; d++) {
          dv[d] += p * dO[d];
          dq[d] += ds * k[d];
          dk[d] += ds * q[d];
        }
      }
    }
  }
};

// FA2 forward: one (b, h, Q tile) per task.
template <typename real>
void flash2_forward(real* out, real* lse, const real* qkv, const AttnShape& s, int Br, int Bc,
                    const AttnMask& mask) {
  const Layout L(s);
  const int T = s.T, HS = s.HS, group = s.NH / s.NKV;
  const int Tr = (T + Br - 1) / Br;
#pragma omp parallel if (worth_threads(s))
  {
    FwdKvTile kvt(Bc, HS);
    std::vector<double> Q_i(size_t(Br) * HS), O_i(size_t(Br) * HS), S(Bc), m_i(Br), l_i(Br);
#pragma omp for collapse(3) schedule(dynamic, 1)
    for (int b = 0; b < s.B; b++)
      for (int h = 0; h < s.NH; h++)
        for (int i = 0; i < Tr; i++) {
          const int kv = h / group;
          const SeqMask m = mask.seq(b, T);
          const int q0 = i * Br, rows = std::min(Br, T - q0);
          load_tile(Q_i.data(), qkv + L.q(b, q0, h), rows, L.H3 * L.HS, HS);
          std::fill(m_i.begin(), m_i.end(), kNegInf);
          std::fill(l_i.begin(), l_i.end(), 0.0);
          std::fill(O_i.begin(), O_i.end(), 0.0);
          const TileRange tiles = kv_tiles_for_q_tile(m, T, Br, Bc, i);
          for (int j = tiles.begin; j < tiles.end; j++) {
            const int k0 = j * Bc, cols = std::min(Bc, T - k0);
            const bool partial = tiles.kind(j) == TileKind::kPartial;
            kvt.load(qkv, L, b, kv, k0, cols);
            for (int r = 0; r < rows; r++)
              online_softmax_row(S.data(), &Q_i[size_t(r) * HS], kvt, cols, k0, q0 + r, partial,
                                 m, L, m_i[r], l_i[r], &O_i[size_t(r) * HS]);
          }
          for (int r = 0; r < rows; r++)
            write_out_row(out + L.o(b, q0 + r, h), lse + L.row(b, h, q0 + r),
                          &O_i[size_t(r) * HS], m_i[r], l_i[r], HS);
        }
  }
}

// FA1 forward: one (b, h) per task, K/V tiles outer.
template <typename real>
void flash1_forward(real* out, real* lse, const real* qkv, const AttnShape& s, int Br, int Bc,
                    const AttnMask& mask) {
  const Layout L(s);
  const int T = s.T, HS = s.HS, group = s.NH / s.NKV;
  const int Tc = (T + Bc - 1) / Bc;
#pragma omp parallel if (worth_threads(s))
  {
    FwdKvTile kvt(Bc, HS);
    std::vector<double> Q_i(size_t(Br) * HS), S(Bc);
    // The "device memory" accumulators of one head: O(T x HS), never T x T.
    std::vector<double> O(size_t(T) * HS), m(T), l(T);
#pragma omp for collapse(2) schedule(dynamic, 1)
    for (int b = 0; b < s.B; b++)
      for (int h = 0; h < s.NH; h++) {
        const int kv = h / group;
        const SeqMask msk = mask.seq(b, T);
        for (int j = 0; j < Tc; j++) {
          const int k0 = j * Bc, cols = std::min(Bc, T - k0);
          kvt.load(qkv, L, b, kv, k0, cols);
          const TileRange qtiles = q_tiles_for_kv_tile(msk, T, Br, Bc, j);
          for (int i = qtiles.begin; i < qtiles.end; i++) {
            const int q0 = i * Br, rows = std::min(Br, T - q0);
            const TileRange passes = kv_tiles_for_q_tile(msk, T, Br, Bc, i);
            const bool first = j == passes.begin, last = j == passes.end - 1;
            const bool partial = qtiles.kind(i) == TileKind::kPartial;
            load_tile(Q_i.data(), qkv + L.q(b, q0, h), rows, L.H3 * L.HS, HS);
            for (int r = 0; r < rows; r++) {
              const int t = q0 + r;
              double* Ot = &O[size_t(t) * HS];
              if (first) {  // first pass: initialise instead of reading
                m[t] = kNegInf;
                l[t] = 0.0;
                std::fill(Ot, Ot + HS, 0.0);
              }
              online_softmax_row(S.data(), &Q_i[size_t(r) * HS], kvt, cols, k0, t, partial, msk,
                                 L, m[t], l[t], Ot);
              if (last) write_out_row(out + L.o(b, t, h), lse + L.row(b, h, t), Ot, m[t], l[t], HS);
            }
          }
        }
      }
  }
}

// Backward, both orders: one (b, kv head) per task, K/V tiles outer. FA2 accumulates dQ over
// all K/V tiles and writes it at the end; FA1 reads and writes each dQ_i on every pass
// (zeroed on its first, written out on its last), as its GPU kernel does in device memory.
template <typename real>
void flash_backward(real* dqkv, const real* dout, const real* qkv, const real* out,
                    const real* lse, const AttnShape& s, int Br, int Bc, const AttnMask& mask,
                    FlashOrder order) {
  const Layout L(s);
  const int T = s.T, HS = s.HS, group = s.NH / s.NKV;
  const int Tc = (T + Bc - 1) / Bc;
  const bool fa1 = order == FlashOrder::kFA1;
#pragma omp parallel if (worth_threads(s))
  {
    BwdWork w(Br, Bc, HS);
    // Per kv head: dQ of its query heads (the GPU's fp32 dQ accumulator) and D. O(T x HS).
    std::vector<double> dQ(size_t(group) * T * HS), D(size_t(group) * T);
#pragma omp for collapse(2) schedule(dynamic, 1)
    for (int b = 0; b < s.B; b++)
      for (int kv = 0; kv < s.NKV; kv++) {
        const SeqMask m = mask.seq(b, T);
        rowsum_dout_out(D.data(), dout, out, L, b, kv, group);
        if (!fa1) std::fill(dQ.begin(), dQ.end(), 0.0);
        for (int j = 0; j < Tc; j++) {
          const int k0 = j * Bc, cols = std::min(Bc, T - k0);
          w.load_kv(qkv, L, b, kv, k0, cols);
          const TileRange qtiles = q_tiles_for_kv_tile(m, T, Br, Bc, j);
          for (int g = 0; g < group; g++) {
            const int h = kv * group + g;
            for (int i = qtiles.begin; i < qtiles.end; i++) {
              const int q0 = i * Br, rows = std::min(Br, T - q0);
              double* dQ_i = &dQ[(size_t(g) * T + q0) * HS];
              const TileRange passes = kv_tiles_for_q_tile(m, T, Br, Bc, i);
              if (fa1 && j == passes.begin) std::fill(dQ_i, dQ_i + size_t(rows) * HS, 0.0);
              w.load_q(qkv, dout, L, b, h, q0, rows);
              w.step(dQ_i, lse + L.row(b, h, q0), &D[size_t(g) * T + q0], q0, rows, k0, cols,
                     qtiles.kind(i) == TileKind::kPartial, m, L.scale);
              if (fa1 && j == passes.end - 1) store_dq(dqkv, dQ_i, L, b, h, q0, rows);
            }
          }
          w.store_kv(dqkv, L, b, kv, k0, cols);
        }
        if (!fa1)
          for (int g = 0; g < group; g++)
            store_dq(dqkv, &dQ[size_t(g) * T * HS], L, b, kv * group + g, 0, T);
      }
  }
}

}  // namespace

template <typename real>
void attention_flash_forward_ref(real* out, real* lse, const real* qkv, AttnShape s, int Br,
                                 int Bc, const AttnMask& mask, FlashOrder order) {
  check_shape(s, "attention_flash_forward_ref");
  check_tiles(Br, Bc, "attention_flash_forward_ref");
  validate_mask(mask, s.B, s.T, "attention_flash_forward_ref");
  if (order == FlashOrder::kFA1)
    flash1_forward(out, lse, qkv, s, Br, Bc, mask);
  else
    flash2_forward(out, lse, qkv, s, Br, Bc, mask);
}

template <typename real>
void attention_flash_backward_ref(real* dqkv, const real* dout, const real* qkv, const real* out,
                                  const real* lse, AttnShape s, int Br, int Bc,
                                  const AttnMask& mask, FlashOrder order) {
  check_shape(s, "attention_flash_backward_ref");
  check_tiles(Br, Bc, "attention_flash_backward_ref");
  validate_mask(mask, s.B, s.T, "attention_flash_backward_ref");
  flash_backward(dqkv, dout, qkv, out, lse, s, Br, Bc, mask, order);
}

#define INSTANTIATE(real)                                                                        \
  template void attention_naive_forward_ref<real>(real*, real*, const real*, AttnShape,         \
                                                  const AttnMask&);                             \
  template void attention_naive_backward_ref<real>(real*, const real*, const real*, const real*, \
                                                   AttnShape, const AttnMask&);                 \
  template void attention_flash_forward_ref<real>(real*, real*, const real*, AttnShape, int,    \
                                                  int, const AttnMask&, FlashOrder);            \
  template void attention_flash_backward_ref<real>(real*, const real*, const real*, const real*, \
                                                   const real*, AttnShape, int, int,            \
                                                   const AttnMask&, FlashOrder);
INSTANTIATE(float)
INSTANTIATE(double)
#undef INSTANTIATE

// ---------------------------------------------------------------------------------------------
// CpuAttention registry

namespace {

template <typename real>
class NaiveCpuAttention final : public CpuAttention<real> {
 public:
  const char* name() const override { return "naive"; }
  size_t saved_floats(const AttnShape& s) const override {
    return size_t(s.B) * s.NH * size_t(s.T) * s.T;
  }
  void forward(real* out, real* saved, const real* qkv, const AttnShape& s,
               const AttnMask& mask) const override {
    attention_naive_forward_ref(out, saved, qkv, s, mask);
  }
  void backward(real* dqkv, const real* dout, const real* qkv, const real* /*out*/,
                const real* saved, const AttnShape& s, const AttnMask& mask) const override {
    attention_naive_backward_ref(dqkv, dout, qkv, saved, s, mask);
  }
};

// "flash" (FA2 order) and "flash1" (FA1 order).
template <typename real>
class FlashCpuAttention final : public CpuAttention<real> {
 public:
  explicit FlashCpuAttention(FlashOrder order) : order_(order) {}
  const char* name() const override { return order_ == FlashOrder::kFA1 ? "flash1" : "flash"; }
  size_t saved_floats(const AttnShape& s) const override { return size_t(s.B) * s.NH * s.T; }
  void forward(real* out, real* saved, const real* qkv, const AttnShape& s,
               const AttnMask& mask) const override {
    attention_flash_forward_ref(out, saved, qkv, s, kCpuFlashBr, kCpuFlashBc, mask, order_);
  }
  void backward(real* dqkv, const real* dout, const real* qkv, const real* out,
                const real* saved, const AttnShape& s, const AttnMask& mask) const override {
    attention_flash_backward_ref(dqkv, dout, qkv, out, saved, s, kCpuFlashBr, kCpuFlashBc, mask,
                                 order_);
  }

 private:
  FlashOrder order_;
};

}  // namespace

std::vector<std::string> cpu_attention_names() { return {"naive", "flash", "flash1"}; }

template <typename real>
std::unique_ptr<CpuAttention<real>> make_cpu_attention(const std::string& name) {
  if (name == "naive") return std::make_unique<NaiveCpuAttention<real>>();
  if (name == "flash") return std::make_unique<FlashCpuAttention<real>>(FlashOrder::kFA2);
  if (name == "flash1") return std::make_unique<FlashCpuAttention<real>>(FlashOrder::kFA1);
  std::string known;
  for (const std::string& n : cpu_attention_names()) known += (known.empty() ? "" : ", ") + n;
  for (const std::string& gpu : attention_names())
    if (name == gpu)
      THROW_ERROR("--attn %s is a GPU backend with no CPU version; on the CPU use one of: %s",
                  name.c_str(), known.c_str());
  THROW_ERROR("--attn '%s' is unknown; use one of: %s", name.c_str(), known.c_str());
}
template std::unique_ptr<CpuAttention<float>> make_cpu_attention<float>(const std::string&);
template std::unique_ptr<CpuAttention<double>> make_cpu_attention<double>(const std::string&);
