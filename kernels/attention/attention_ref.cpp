// attention_ref.cpp — CPU causal attention: naive (stores P), FlashAttention-2 (stores LSE) and
// FlashAttention-1's loop order (flash1, stores LSE; see its section below).
// The oracles for the GPU attention kernels and the attention of the CPU model.
// One file of over 600 lines: the three oracles share the layout helpers, the tile loops of the
// two flash orders mirror each other line by line (easiest to check side by side), and the
// CpuAttention registry at the end wraps all three.
//
// Layout, notation and the maths: attention_ref.h. Per (b, query head h), kv head h / (NH/NKV),
// scale = 1/sqrt(HS), query t sees keys 0..t.
//
// flash forward, per (b, h) and Q tile i (rows q0 .. q0+Br-1):
//   m_i = -inf, l_i = 0, O_i = 0
//   for j = 0 .. (last query of tile i) / Bc          // tiles fully above the diagonal: skipped
//     S_ij   = scale Q_i K_j^T, masked (-inf where key > query) only if tile j crosses the diagonal
//     m_new  = max(m_i, rowmax(S_ij));  P~ = exp(S_ij - m_new)
//     l_i    = exp(m_i - m_new) l_i + rowsum(P~);  O_i = diag(exp(m_i - m_new)) O_i + P~ V_j
//     m_i    = m_new
//   O_i /= l_i;  LSE_i = m_i + log(l_i)
// flash backward, per (b, kv head):
//   D = rowsum(dO o O) for the kv head's query heads
//   for each K/V tile j:  dK_j = dV_j = 0
//     for each query head h of the group, for each Q tile i from the diagonal down (i >= j*Bc/Br):
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
//       tests/cpu/test_attention_ref.cpp tests/main.cpp -lgtest -lpthread -o /tmp/test_attn
//   /tmp/test_attn --gtest_filter='AttentionRef*'
#include "kernels/attention/attention_ref.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/common.h"

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Offsets (in elements) into the packed buffers.
struct Layout {
  size_t T, NH, NKV, HS, H3;  // H3 = NH + 2*NKV heads per token in qkv
  explicit Layout(const AttnShape& s)
      : T(s.T), NH(s.NH), NKV(s.NKV), HS(s.HS), H3(size_t(s.NH) + 2 * size_t(s.NKV)) {}
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
void attention_naive_forward_ref(real* out, real* P, const real* qkv, AttnShape s) {
  check_shape(s, "attention_naive_forward_ref");
  const Layout L(s);
  const int T = s.T, HS = s.HS, group = s.NH / s.NKV;
  const double scale = 1.0 / std::sqrt(double(HS));
  const size_t tok = L.H3 * L.HS;  // stride between tokens in qkv
#pragma omp parallel if (worth_threads(s))
  {
    std::vector<double> KT(size_t(HS) * T), srow(T), q(HS), acc(HS);
#pragma omp for collapse(2) schedule(dynamic, 1)
    for (int b = 0; b < s.B; b++)
      for (int h = 0; h < s.NH; h++) {
        const int kv = h / group;
        load_tile_T(KT.data(), qkv + L.k(b, 0, kv), T, tok, HS, T);
        for (int t = 0; t < T; t++) {
          load_tile(q.data(), qkv + L.q(b, t, h), 1, 0, HS);
          row_times_T(srow.data(), q.data(), KT.data(), t + 1, HS, T);
          double m = kNegInf;
          for (int u = 0; u <= t; u++) {
            srow[u] *= scale;
            m = std::max(m, srow[u]);
          }
          double sum = 0.0;
          for (int u = 0; u <= t; u++) {
            srow[u] = std::exp(srow[u] - m);
            sum += srow[u];
          }
          real* prow = P + L.row(b, h, t) * L.T;
          std::fill(acc.begin(), acc.end(), 0.0);
          for (int u = 0; u <= t; u++) {
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
                                  AttnShape s) {
  check_shape(s, "attention_naive_backward_ref");
  const Layout L(s);
  const int T = s.T, HS = s.HS, group = s.NH / s.NKV;
  const double scale = 1.0 / std::sqrt(double(HS));
#pragma omp parallel if (worth_threads(s))
  {
    // dK, dV of one kv head (T x HS) live here until all its query heads are done.
    std::vector<double> dK(size_t(T) * HS), dV(size_t(T) * HS), VT(size_t(HS) * T), dP(T);
    std::vector<double> q(HS), dO(HS), dq(HS);
#pragma omp for collapse(2) schedule(dynamic, 1)
    for (int b = 0; b < s.B; b++)
      for (int kv = 0; kv < s.NKV; kv++) {
        load_tile_T(VT.data(), qkv + L.v(b, 0, kv), T, L.H3 * L.HS, HS, T);
        std::fill(dK.begin(), dK.end(), 0.0);
        std::fill(dV.begin(), dV.end(), 0.0);
        for (int h = kv * group; h < (kv + 1) * group; h++)
          for (int t = 0; t < T; t++) {
            const real* prow = P + L.row(b, h, t) * L.T;
            load_tile(q.data(), qkv + L.q(b, t, h), 1, 0, HS);
            load_tile(dO.data(), dout + L.o(b, t, h), 1, 0, HS);
            row_times_T(dP.data(), dO.data(), VT.data(), t + 1, HS, T);  // dP = dO V^T
            double D = 0.0;                                                 // rowsum(dP o P)
            for (int u = 0; u <= t; u++) D += double(prow[u]) * dP[u];
            std::fill(dq.begin(), dq.end(), 0.0);
            for (int u = 0; u <= t; u++) {
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
            for (int d = 0; d < HS; d++) dqt[d] = real(scale * dq[d]);
          }
        for (int u = 0; u < T; u++) {
          real* dku = dqkv + L.k(b, u, kv);
          real* dvu = dqkv + L.v(b, u, kv);
          for (int d = 0; d < HS; d++) {
            dku[d] = real(scale * dK[size_t(u) * HS + d]);
            dvu[d] = real(dV[size_t(u) * HS + d]);
          }
        }
      }
  }
}

// ---------------------------------------------------------------------------------------------
// flash (FlashAttention-2)

template <typename real>
void attention_flash_forward_ref(real* out, real* lse, const real* qkv, AttnShape s, int Br,
                                 int Bc) {
  check_shape(s, "attention_flash_forward_ref");
  check_tiles(Br, Bc, "attention_flash_forward_ref");
  const Layout L(s);
  const int T = s.T, HS = s.HS, group = s.NH / s.NKV;
  const int Tr = (T + Br - 1) / Br;
  const double scale = 1.0 / std::sqrt(double(HS));
  const size_t tok = L.H3 * L.HS;  // stride between tokens in qkv
#pragma omp parallel if (worth_threads(s))
  {
    // K_j is held transposed (HS x Bc) so S_ij's rows are axpys (see row_times_T).
    std::vector<double> Q_i(size_t(Br) * HS), K_jT(size_t(HS) * Bc), V_j(size_t(Bc) * HS);
    std::vector<double> O_i(size_t(Br) * HS), S_ij(size_t(Br) * Bc), m_i(Br), l_i(Br);
#pragma omp for collapse(3) schedule(dynamic, 1)
    for (int b = 0; b < s.B; b++)
      for (int h = 0; h < s.NH; h++)
        for (int i = 0; i < Tr; i++) {
          const int kv = h / group;
          const int q0 = i * Br, rows = std::min(Br, T - q0), q_last = q0 + rows - 1;
          load_tile(Q_i.data(), qkv + L.q(b, q0, h), rows, tok, HS);
          std::fill(m_i.begin(), m_i.end(), kNegInf);
          std::fill(l_i.begin(), l_i.end(), 0.0);
          std::fill(O_i.begin(), O_i.end(), 0.0);
          // Tiles j > q_last / Bc start after the tile's last query: entirely above the diagonal.
          for (int j = 0; j <= q_last / Bc; j++) {
            const int k0 = j * Bc, cols = std::min(Bc, T - k0);
            const bool diagonal = k0 + cols - 1 > q0;  // some key after some query: mask
            load_tile_T(K_jT.data(), qkv + L.k(b, k0, kv), cols, tok, HS, Bc);
            load_tile(V_j.data(), qkv + L.v(b, k0, kv), cols, tok, HS);
            for (int r = 0; r < rows; r++) {
              double* S = &S_ij[size_t(r) * Bc];
              row_times_T(S, &Q_i[size_t(r) * HS], K_jT.data(), cols, HS, Bc);
              double rowmax = kNegInf;
              for (int c = 0; c < cols; c++) {
                S[c] = (diagonal && k0 + c > q0 + r) ? kNegInf : scale * S[c];
                rowmax = std::max(rowmax, S[c]);
              }
              const double m_new = std::max(m_i[r], rowmax);
              // A row with nothing visible yet keeps m = -inf; guard -inf - -inf as the GPU does.
              // (Cannot happen here: j ascends and key 0 is visible to every query.)
              const double alpha = m_i[r] == kNegInf ? 0.0 : std::exp(m_i[r] - m_new);
              double rowsum = 0.0;
              for (int c = 0; c < cols; c++) {
                S[c] = S[c] == kNegInf ? 0.0 : std::exp(S[c] - m_new);  // P~
                rowsum += S[c];
              }
              l_i[r] = alpha * l_i[r] + rowsum;
              m_i[r] = m_new;
              double* O = &O_i[size_t(r) * HS];
              for (int d = 0; d < HS; d++) O[d] *= alpha;
              for (int c = 0; c < cols; c++) {
                const double p = S[c];
                const double* v = &V_j[size_t(c) * HS];
                for (int d = 0; d < HS; d++) O[d] += p * v[d];
              }
            }
          }
          for (int r = 0; r < rows; r++) {
            real* o = out + L.o(b, q0 + r, h);
            const double inv_l = 1.0 / l_i[r];
            for (int d = 0; d < HS; d++) o[d] = real(O_i[size_t(r) * HS + d] * inv_l);
            lse[L.row(b, h, q0 + r)] = real(m_i[r] + std::log(l_i[r]));
          }
        }
  }
}

template <typename real>
void attention_flash_backward_ref(real* dqkv, const real* dout, const real* qkv, const real* out,
                                  const real* lse, AttnShape s, int Br, int Bc) {
  check_shape(s, "attention_flash_backward_ref");
  check_tiles(Br, Bc, "attention_flash_backward_ref");
  const Layout L(s);
  const int T = s.T, HS = s.HS, group = s.NH / s.NKV;
  const int Tr = (T + Br - 1) / Br, Tc = (T + Bc - 1) / Bc;
  const double scale = 1.0 / std::sqrt(double(HS));
  const size_t tok = L.H3 * L.HS, otok = L.NH * L.HS;  // token strides in qkv and out
#pragma omp parallel if (worth_threads(s))
  {
    std::vector<double> Q_i(size_t(Br) * HS), dO_i(size_t(Br) * HS);
    // K_j and V_j are also held transposed, for the rows of S_ij and dP_ij (see row_times_T).
    std::vector<double> K_j(size_t(Bc) * HS), K_jT(size_t(HS) * Bc), V_jT(size_t(HS) * Bc);
    std::vector<double> dK_j(size_t(Bc) * HS), dV_j(size_t(Bc) * HS);
    std::vector<double> P_ij(size_t(Br) * Bc), dS_ij(size_t(Br) * Bc);
    // Per kv head: dQ of its query heads accumulated over all j (the GPU's fp32 dQ accumulator)
    // and D = rowsum(dO o O) (the GPU's preprocessing pass). O(T x HS), not T x T.
    std::vector<double> dQ(size_t(group) * T * HS), D(size_t(group) * T);
#pragma omp for collapse(2) schedule(dynamic, 1)
    for (int b = 0; b < s.B; b++)
      for (int kv = 0; kv < s.NKV; kv++) {
        for (int g = 0; g < group; g++)
          for (int t = 0; t < T; t++) {
            const int h = kv * group + g;
            const real* dO = dout + L.o(b, t, h);
            const real* O = out + L.o(b, t, h);
            double acc = 0.0;
            for (int d = 0; d < HS; d++) acc += double(dO[d]) * double(O[d]);
            D[size_t(g) * T + t] = acc;
          }
        std::fill(dQ.begin(), dQ.end(), 0.0);
        for (int j = 0; j < Tc; j++) {
          const int k0 = j * Bc, cols = std::min(Bc, T - k0);
          load_tile(K_j.data(), qkv + L.k(b, k0, kv), cols, tok, HS);
          load_tile_T(K_jT.data(), qkv + L.k(b, k0, kv), cols, tok, HS, Bc);
          load_tile_T(V_jT.data(), qkv + L.v(b, k0, kv), cols, tok, HS, Bc);
          std::fill(dK_j.begin(), dK_j.end(), 0.0);
          std::fill(dV_j.begin(), dV_j.end(), 0.0);
          for (int g = 0; g < group; g++) {
            const int h = kv * group + g;
            // Q tiles i < k0 / Br end before key k0: entirely above the diagonal.
            for (int i = k0 / Br; i < Tr; i++) {
              const int q0 = i * Br, rows = std::min(Br, T - q0);
              const bool diagonal = k0 + cols - 1 > q0;
              load_tile(Q_i.data(), qkv + L.q(b, q0, h), rows, tok, HS);
              load_tile(dO_i.data(), dout + L.o(b, q0, h), rows, otok, HS);
              for (int r = 0; r < rows; r++) {
                const double LSE_r = double(lse[L.row(b, h, q0 + r)]);
                const double D_r = D[size_t(g) * T + q0 + r];
                const double* q = &Q_i[size_t(r) * HS];
                const double* dO = &dO_i[size_t(r) * HS];
                double* P = &P_ij[size_t(r) * Bc];
                double* dS = &dS_ij[size_t(r) * Bc];
                row_times_T(P, q, K_jT.data(), cols, HS, Bc);    // S_ij row
                row_times_T(dS, dO, V_jT.data(), cols, HS, Bc);  // dP_ij row
                for (int c = 0; c < cols; c++) {
                  if (diagonal && k0 + c > q0 + r) {
                    P[c] = dS[c] = 0.0;
                    continue;
                  }
                  P[c] = std::exp(scale * P[c] - LSE_r);
                  dS[c] = P[c] * (dS[c] - D_r);
                }
                double* dq = &dQ[(size_t(g) * T + q0 + r) * HS];
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
          }
          for (int c = 0; c < cols; c++) {
            real* dk = dqkv + L.k(b, k0 + c, kv);
            real* dv = dqkv + L.v(b, k0 + c, kv);
            for (int d = 0; d < HS; d++) {
              dk[d] = real(dK_j[size_t(c) * HS + d]);
              dv[d] = real(dV_j[size_t(c) * HS + d]);
            }
          }
        }
        for (int g = 0; g < group; g++)
          for (int t = 0; t < T; t++) {
            real* dq = dqkv + L.q(b, t, kv * group + g);
            for (int d = 0; d < HS; d++) dq[d] = real(dQ[(size_t(g) * T + t) * HS + d]);
          }
      }
  }
}

// ---------------------------------------------------------------------------------------------
// flash1 (FlashAttention-1 loop order: K/V tiles outer, Q tiles inner, state in "HBM")
//
// forward, per (b, h), with O (T x HS, un-normalised), m (T), l (T) the per-head accumulators
// that the GPU keeps in fp32 device memory:
//   for j = 0 .. Tc-1:                          load K_j, V_j
//     for i = j*Bc/Br .. Tr-1:                  (Q tiles entirely before key j*Bc: skipped)
//       load Q_i; read m_i, l_i, O_i (j == 0: m_i = -inf, l_i = 0, O_i = 0)
//       S_ij = scale Q_i K_j^T, masked where key > query
//       m_new = max(m_i, rowmax S_ij);  P~ = exp(S_ij - m_new)
//       l_i = e^(m_i - m_new) l_i + rowsum P~;  O_i = e^(m_i - m_new) O_i + P~ V_j
//       j == last tile reaching tile i ((min(q0+Br, T)-1)/Bc): out_i = O_i / l_i, LSE_i =
//         m_i + log l_i;  otherwise write m_i, l_i, O_i back
// backward, per (b, kv head): D = rowsum(dO o O); dQ (group x T x HS) the GPU's fp32 dQ scratch
//   for j = 0 .. Tc-1:  dK_j = dV_j = 0
//     for each query head h of the group, for i = j*Bc/Br .. Tr-1:
//       read dQ_i (j == 0: 0); P_ij = exp(scale Q_i K_j^T - LSE_i) (0 where masked)
//       dV_j += P_ij^T dO_i;  dS_ij = P_ij o (dO_i V_j^T - D_i)
//       dK_j += scale dS_ij^T Q_i;  dQ_i += scale dS_ij K_j
//       j == last tile reaching tile i: write dQ_i out, else back
//     write dK_j, dV_j

template <typename real>
void attention_flash1_forward_ref(real* out, real* lse, const real* qkv, AttnShape s, int Br,
                                  int Bc) {
  check_shape(s, "attention_flash1_forward_ref");
  check_tiles(Br, Bc, "attention_flash1_forward_ref");
  const Layout L(s);
  const int T = s.T, HS = s.HS, group = s.NH / s.NKV;
  const int Tr = (T + Br - 1) / Br, Tc = (T + Bc - 1) / Bc;
  const double scale = 1.0 / std::sqrt(double(HS));
  const size_t tok = L.H3 * L.HS;
#pragma omp parallel if (worth_threads(s))
  {
    std::vector<double> Q_i(size_t(Br) * HS), K_jT(size_t(HS) * Bc), V_j(size_t(Bc) * HS);
    std::vector<double> S(Bc);
    // The "device memory" accumulators of one head: O(T x HS), never T x T.
    std::vector<double> O(size_t(T) * HS), m(T), l(T);
#pragma omp for collapse(2) schedule(dynamic, 1)
    for (int b = 0; b < s.B; b++)
      for (int h = 0; h < s.NH; h++) {
        const int kv = h / group;
        for (int j = 0; j < Tc; j++) {
          const int k0 = j * Bc, cols = std::min(Bc, T - k0);
          load_tile_T(K_jT.data(), qkv + L.k(b, k0, kv), cols, tok, HS, Bc);
          load_tile(V_j.data(), qkv + L.v(b, k0, kv), cols, tok, HS);
          for (int i = k0 / Br; i < Tr; i++) {
            const int q0 = i * Br, rows = std::min(Br, T - q0);
            const bool last = j == (q0 + rows - 1) / Bc;
            load_tile(Q_i.data(), qkv + L.q(b, q0, h), rows, tok, HS);
            for (int r = 0; r < rows; r++) {
              const int t = q0 + r;
              double* Ot = &O[size_t(t) * HS];
              if (j == 0) {  // first pass: initialise instead of reading
                m[t] = kNegInf;
                l[t] = 0.0;
                std::fill(Ot, Ot + HS, 0.0);
              }
              row_times_T(S.data(), &Q_i[size_t(r) * HS], K_jT.data(), cols, HS, Bc);
              double rowmax = kNegInf;
              for (int c = 0; c < cols; c++) {
                S[c] = k0 + c > t ? kNegInf : scale * S[c];
                rowmax = std::max(rowmax, S[c]);
              }
              // m[t] is finite from j = 0 on (key 0 is visible to every query); a row whose
              // keys in this tile are all masked keeps m (alpha = 1) and adds nothing.
              const double m_new = std::max(m[t], rowmax);
              const double alpha = m[t] == kNegInf ? 0.0 : std::exp(m[t] - m_new);
              double rowsum = 0.0;
              for (int c = 0; c < cols; c++) {
                S[c] = S[c] == kNegInf ? 0.0 : std::exp(S[c] - m_new);
                rowsum += S[c];
              }
              l[t] = alpha * l[t] + rowsum;
              m[t] = m_new;
              for (int d = 0; d < HS; d++) Ot[d] *= alpha;
              for (int c = 0; c < cols; c++) {
                const double p = S[c];
                const double* v = &V_j[size_t(c) * HS];
                for (int d = 0; d < HS; d++) Ot[d] += p * v[d];
              }
              if (last) {
                real* o = out + L.o(b, t, h);
                const double inv_l = 1.0 / l[t];
                for (int d = 0; d < HS; d++) o[d] = real(Ot[d] * inv_l);
                lse[L.row(b, h, t)] = real(m[t] + std::log(l[t]));
              }
            }
          }
        }
      }
  }
}

template <typename real>
void attention_flash1_backward_ref(real* dqkv, const real* dout, const real* qkv, const real* out,
                                   const real* lse, AttnShape s, int Br, int Bc) {
  check_shape(s, "attention_flash1_backward_ref");
  check_tiles(Br, Bc, "attention_flash1_backward_ref");
  const Layout L(s);
  const int T = s.T, HS = s.HS, group = s.NH / s.NKV;
  const int Tr = (T + Br - 1) / Br, Tc = (T + Bc - 1) / Bc;
  const double scale = 1.0 / std::sqrt(double(HS));
  const size_t tok = L.H3 * L.HS, otok = L.NH * L.HS;
#pragma omp parallel if (worth_threads(s))
  {
    std::vector<double> Q_i(size_t(Br) * HS), dO_i(size_t(Br) * HS);
    std::vector<double> K_j(size_t(Bc) * HS), K_jT(size_t(HS) * Bc), V_jT(size_t(HS) * Bc);
    std::vector<double> dK_j(size_t(Bc) * HS), dV_j(size_t(Bc) * HS), P(Bc), dS(Bc);
    // The "device memory" of one kv head: dQ of its query heads and D = rowsum(dO o O).
    std::vector<double> dQ(size_t(group) * T * HS), D(size_t(group) * T);
#pragma omp for collapse(2) schedule(dynamic, 1)
    for (int b = 0; b < s.B; b++)
      for (int kv = 0; kv < s.NKV; kv++) {
        for (int g = 0; g < group; g++)
          for (int t = 0; t < T; t++) {
            const int h = kv * group + g;
            const real* dO = dout + L.o(b, t, h);
            const real* O = out + L.o(b, t, h);
            double acc = 0.0;
            for (int d = 0; d < HS; d++) acc += double(dO[d]) * double(O[d]);
            D[size_t(g) * T + t] = acc;
          }
        for (int j = 0; j < Tc; j++) {
          const int k0 = j * Bc, cols = std::min(Bc, T - k0);
          load_tile(K_j.data(), qkv + L.k(b, k0, kv), cols, tok, HS);
          load_tile_T(K_jT.data(), qkv + L.k(b, k0, kv), cols, tok, HS, Bc);
          load_tile_T(V_jT.data(), qkv + L.v(b, k0, kv), cols, tok, HS, Bc);
          std::fill(dK_j.begin(), dK_j.end(), 0.0);
          std::fill(dV_j.begin(), dV_j.end(), 0.0);
          for (int g = 0; g < group; g++) {
            const int h = kv * group + g;
            for (int i = k0 / Br; i < Tr; i++) {
              const int q0 = i * Br, rows = std::min(Br, T - q0);
              const bool last = j == (q0 + rows - 1) / Bc;
              load_tile(Q_i.data(), qkv + L.q(b, q0, h), rows, tok, HS);
              load_tile(dO_i.data(), dout + L.o(b, q0, h), rows, otok, HS);
              for (int r = 0; r < rows; r++) {
                const int t = q0 + r;
                const double LSE_r = double(lse[L.row(b, h, t)]);
                const double D_r = D[size_t(g) * T + t];
                const double* q = &Q_i[size_t(r) * HS];
                const double* dO = &dO_i[size_t(r) * HS];
                double* dq = &dQ[(size_t(g) * T + t) * HS];
                if (j == 0) std::fill(dq, dq + HS, 0.0);  // first pass: no read
                row_times_T(P.data(), q, K_jT.data(), cols, HS, Bc);    // S_ij row
                row_times_T(dS.data(), dO, V_jT.data(), cols, HS, Bc);  // dP_ij row
                for (int c = 0; c < cols; c++) {
                  if (k0 + c > t) {
                    P[c] = dS[c] = 0.0;
                    continue;
                  }
                  P[c] = std::exp(scale * P[c] - LSE_r);
                  dS[c] = P[c] * (dS[c] - D_r);
                }
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
                if (last) {
                  real* dqt = dqkv + L.q(b, t, h);
                  for (int d = 0; d < HS; d++) dqt[d] = real(dq[d]);
                }
              }
            }
          }
          for (int c = 0; c < cols; c++) {
            real* dk = dqkv + L.k(b, k0 + c, kv);
            real* dv = dqkv + L.v(b, k0 + c, kv);
            for (int d = 0; d < HS; d++) {
              dk[d] = real(dK_j[size_t(c) * HS + d]);
              dv[d] = real(dV_j[size_t(c) * HS + d]);
            }
          }
        }
      }
  }
}

#define INSTANTIATE(real)                                                                        \
  template void attention_naive_forward_ref<real>(real*, real*, const real*, AttnShape);        \
  template void attention_naive_backward_ref<real>(real*, const real*, const real*, const real*, \
                                                   AttnShape);                                   \
  template void attention_flash_forward_ref<real>(real*, real*, const real*, AttnShape, int,    \
                                                  int);                                          \
  template void attention_flash_backward_ref<real>(real*, const real*, const real*, const real*, \
                                                   const real*, AttnShape, int, int);    \
  template void attention_flash1_forward_ref<real>(real*, real*, const real*, AttnShape, int,   \
                                                   int);                                         \
  template void attention_flash1_backward_ref<real>(real*, const real*, const real*,            \
                                                    const real*, const real*, AttnShape, int,   \
                                                    int);
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
  void forward(real* out, real* saved, const real* qkv, const AttnShape& s) const override {
    attention_naive_forward_ref(out, saved, qkv, s);
  }
  void backward(real* dqkv, const real* dout, const real* qkv, const real* /*out*/,
                const real* saved, const AttnShape& s) const override {
    attention_naive_backward_ref(dqkv, dout, qkv, saved, s);
  }
};

template <typename real>
class FlashCpuAttention final : public CpuAttention<real> {
 public:
  const char* name() const override { return "flash"; }
  size_t saved_floats(const AttnShape& s) const override { return size_t(s.B) * s.NH * s.T; }
  void forward(real* out, real* saved, const real* qkv, const AttnShape& s) const override {
    attention_flash_forward_ref(out, saved, qkv, s, kCpuFlashBr, kCpuFlashBc);
  }
  void backward(real* dqkv, const real* dout, const real* qkv, const real* out,
                const real* saved, const AttnShape& s) const override {
    attention_flash_backward_ref(dqkv, dout, qkv, out, saved, s, kCpuFlashBr, kCpuFlashBc);
  }
};

template <typename real>
class Flash1CpuAttention final : public CpuAttention<real> {
 public:
  const char* name() const override { return "flash1"; }
  size_t saved_floats(const AttnShape& s) const override { return size_t(s.B) * s.NH * s.T; }
  void forward(real* out, real* saved, const real* qkv, const AttnShape& s) const override {
    attention_flash1_forward_ref(out, saved, qkv, s, kCpuFlashBr, kCpuFlashBc);
  }
  void backward(real* dqkv, const real* dout, const real* qkv, const real* out,
                const real* saved, const AttnShape& s) const override {
    attention_flash1_backward_ref(dqkv, dout, qkv, out, saved, s, kCpuFlashBr, kCpuFlashBc);
  }
};

}  // namespace

std::vector<std::string> cpu_attention_names() { return {"naive", "flash", "flash1"}; }

template <typename real>
std::unique_ptr<CpuAttention<real>> make_cpu_attention(const std::string& name) {
  if (name == "naive") return std::make_unique<NaiveCpuAttention<real>>();
  if (name == "flash") return std::make_unique<FlashCpuAttention<real>>();
  if (name == "flash1") return std::make_unique<Flash1CpuAttention<real>>();
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
