// ring_attention_ref.cpp — N virtual context-parallel ranks in one process (see
// ring_attention_ref.h for the algorithm, context_parallel.h for the layout and schedule).
//
// The ring is simulated literally: each rank's K/V block is a buffer that moves from rank r to
// rank r+1 after every step, tagged with its owner, and every step checks that rank r holds the
// block CpLayout::ring_source(r, s) says; in the backward each step's dK/dV contribution is
// sent straight to the block's owner.
// Ranks of one step are run one after another; on the GPU they run at once, and nothing a
// rank computes at step s depends on another rank's step s.
//
// Inside a block: for a query at global position qp and keys at global positions
// kg .. kg + len - 1, the visible keys are one run, those at positions lo(qp) .. qp (mask.h;
// causal: lo = 0, so a prefix): a full pair sees all of them, a diagonal pair a prefix, and no
// pair ever needs a T x T mask.
#include "model/ring_attention_ref.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "kernels/common.h"
#include "kernels/rope.h"

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Offsets (in elements) into the rank-local buffers: Tq rows of Q/O/LSE, Tk rows of K/V.
struct Local {
  size_t NH, NKV, HS, H3, Tq, Tk;
  Local(const AttnShape& s, int Tq_, int Tk_)
      : NH(s.NH), NKV(s.NKV), HS(s.HS), H3(size_t(s.NH) + 2 * size_t(s.NKV)), Tq(Tq_), Tk(Tk_) {}
  size_t q(size_t b, size_t t, size_t h) const { return ((b * Tq + t) * H3 + h) * HS; }
  size_t o(size_t b, size_t t, size_t h) const { return ((b * Tq + t) * NH + h) * HS; }
  size_t row(size_t b, size_t h, size_t t) const { return (b * NH + h) * Tq + t; }  // lse, D
  size_t k(size_t b, size_t t, size_t kv) const { return ((b * Tk + t) * 2 * NKV + kv) * HS; }
  size_t v(size_t b, size_t t, size_t kv) const { return k(b, t, kv) + NKV * HS; }
};

void check_shape(const AttnShape& s, const char* who) {
  CHECK(s.B >= 1 && s.NH >= 1 && s.NKV >= 1 && s.HS >= 1,
        "%s: bad shape B=%d NH=%d NKV=%d HS=%d; every dimension must be >= 1", who, s.B, s.NH,
        s.NKV, s.HS);
  CHECK(s.NH % s.NKV == 0, "%s: NH=%d is not a multiple of NKV=%d; pick NKV dividing NH", who,
        s.NH, s.NKV);
}

// One block's chunks lie inside its buffers: Tq rows of Q, Tk of K/V.
void check_block(const AttnShape& s, int Tq, int Tk, const CpChunk& q, const CpChunk& k,
                 const char* who) {
  check_shape(s, who);
  CHECK(q.local_begin >= 0 && q.local_begin + q.len <= Tq && k.local_begin >= 0 &&
            k.local_begin + k.len <= Tk,
        "%s: chunk rows outside the buffers (Tq=%d Tk=%d)", who, Tq, Tk);
}

void check_ring(const AttnShape& s, const CpLayout& L, const char* who) {
  check_shape(s, who);
  CHECK(s.T == L.T(), "%s: shape T=%d but the cp layout is for T=%d", who, s.T, L.T());
}

// Keys of chunk k visible to the query at global position qp: those of index c0 <= c < c1 in
// the chunk (c0 >= c1: none).
struct KeyRun {
  int c0, c1;
};
KeyRun visible_keys(const SeqMask& m, int qp, const CpChunk& k) {
  return KeyRun{std::max(0, m.lo(qp) - k.global_begin),
                std::max(0, std::min(k.len, qp - k.global_begin + 1))};
}

// Visible pairs of the chunk pair over the batch's sequences.
int64_t visible_pairs(const AttnMask& m, int B, int T, const CpChunk& q, const CpChunk& k) {
  int64_t n = 0;
  for (int b = 0; b < B; b++)
    for (int r = 0; r < q.len; r++) {
      const KeyRun run = visible_keys(m.seq(b, T), q.global_begin + r, k);
      n += std::max(0, run.c1 - run.c0);
    }
  return n;
}

// Whether the ring computes the pair: not skipped by the causal layout, and (a mask) live.
bool computed(const CpBlockPair& p, const AttnMask& m, int B, int T) {
  return p.kind != CpPairKind::kSkipped && (m.is_causal() || cp_pair_live(m, B, T, p.q, p.k));
}

// The K/V heads of a rank's qkv, packed as the block that travels: (B, Tl, 2*NKV, HS).
template <typename real>
std::vector<real> pack_kv(const real* qkv, const AttnShape& s, int Tl) {
  const size_t H3 = size_t(s.NH) + 2 * s.NKV, kvrow = 2 * size_t(s.NKV) * s.HS;
  std::vector<real> kv(size_t(s.B) * Tl * kvrow);
  for (size_t bt = 0; bt < size_t(s.B) * Tl; bt++)
    std::copy_n(qkv + (bt * H3 + s.NH) * s.HS, kvrow, kv.data() + bt * kvrow);
  return kv;
}

// One ring hop: what rank r holds moves to rank r+1 (send to r+1, receive from r-1); the
// bytes each rank sent are added to the trace.
template <typename real>
void ring_pass(std::vector<std::vector<real>>& hold, std::vector<int>& owner, const CpLayout& L,
               RingTrace* trace) {
  const int N = L.cp();
  std::vector<std::vector<real>> next(N);
  std::vector<int> next_owner(N);
  for (int r = 0; r < N; r++) {
    if (trace) trace->bytes_sent[r] += hold[r].size() * sizeof(real);
    next[L.ring_next(r)] = std::move(hold[r]);
    next_owner[L.ring_next(r)] = owner[r];
  }
  hold = std::move(next);
  owner = std::move(next_owner);
}

void reset_trace(RingTrace* t, int N) {
  if (!t) return;
  *t = RingTrace{};
  t->visible_pairs.assign(N, 0);
  for (auto& v : t->pairs_by_kind) v.assign(N, 0);
  t->bytes_sent.assign(N, 0);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// one block

template <typename real>
void attention_block_forward_ref(real* o_blk, real* lse_blk, const real* qkv, const real* kv,
                                 AttnShape s, int Tq, int Tk, CpChunk q, CpChunk k,
                                 const AttnMask& mask) {
  check_block(s, Tq, Tk, q, k, "attention_block_forward_ref");
  const Local X(s, Tq, Tk);
  const int HS = s.HS, group = s.NH / s.NKV;
  const double scale = 1.0 / std::sqrt(double(HS));
  std::vector<double> S(std::max(k.len, 1)), O(HS);
  for (int b = 0; b < s.B; b++)
    for (int h = 0; h < s.NH; h++) {
      const int kvh = h / group;
      for (int r = 0; r < q.len; r++) {
        const int t = q.local_begin + r;
        const KeyRun run = visible_keys(mask.seq(b, s.T), q.global_begin + r, k);
        const real* qr = qkv + X.q(b, t, h);
        double m = kNegInf;
        for (int c = run.c0; c < run.c1; c++) {
          const real* kc = kv + X.k(b, k.local_begin + c, kvh);
          double acc = 0.0;
          for (int d = 0; d < HS; d++) acc += double(qr[d]) * double(kc[d]);
          S[c] = scale * acc;
          m = std::max(m, S[c]);
        }
        double l = 0.0;
        std::fill(O.begin(), O.end(), 0.0);
        for (int c = run.c0; c < run.c1; c++) {
          const double p = std::exp(S[c] - m);
          const real* vc = kv + X.v(b, k.local_begin + c, kvh);
          l += p;
          for (int d = 0; d < HS; d++) O[d] += p * double(vc[d]);
        }
        const bool any = run.c1 > run.c0;
        real* o = o_blk + X.o(b, t, h);
        for (int d = 0; d < HS; d++) o[d] = real(any ? O[d] / l : 0.0);
        lse_blk[X.row(b, h, t)] = real(any ? m + std::log(l) : kNegInf);
      }
    }
}

template <typename real>
void attention_merge_ref(real* o, real* lse, const real* o_blk, const real* lse_blk, AttnShape s,
                         int Tq, CpChunk q) {
  check_shape(s, "attention_merge_ref");
  const Local X(s, Tq, 0);
  for (int b = 0; b < s.B; b++)
    for (int h = 0; h < s.NH; h++)
      for (int r = 0; r < q.len; r++) {
        const int t = q.local_begin + r;
        const double L0 = double(lse[X.row(b, h, t)]), Lb = double(lse_blk[X.row(b, h, t)]);
        if (Lb == kNegInf) continue;  // the block saw nothing for this row
        real* O = o + X.o(b, t, h);
        const real* Ob = o_blk + X.o(b, t, h);
        if (L0 == kNegInf) {  // nothing merged yet: the block is the running state
          for (int d = 0; d < s.HS; d++) O[d] = Ob[d];
          lse[X.row(b, h, t)] = real(Lb);
          continue;
        }
        const double mx = std::max(L0, Lb);
        const double Lnew = mx + std::log(std::exp(L0 - mx) + std::exp(Lb - mx));
        const double w0 = std::exp(L0 - Lnew), wb = std::exp(Lb - Lnew);
        for (int d = 0; d < s.HS; d++) O[d] = real(w0 * double(O[d]) + wb * double(Ob[d]));
        lse[X.row(b, h, t)] = real(Lnew);
      }
}

template <typename real>
void attention_block_backward_ref(real* dq, real* dkv, const real* dout, const real* qkv,
                                  const real* kv, const real* lse, const real* D, AttnShape s,
                                  int Tq, int Tk, CpChunk q, CpChunk k, const AttnMask& mask) {
  check_block(s, Tq, Tk, q, k, "attention_block_backward_ref");
  const Local X(s, Tq, Tk);
  const int HS = s.HS, group = s.NH / s.NKV;
  const double scale = 1.0 / std::sqrt(double(HS));
  // dK_j, dV_j of one kv head over the block's keys, summed over the group's query heads and
  // all rows, then added to dkv once; dq of one row, added to dq once.
  std::vector<double> dK(size_t(k.len) * HS), dV(size_t(k.len) * HS), dqr(HS);
  for (int b = 0; b < s.B; b++)
    for (int kvh = 0; kvh < s.NKV; kvh++) {
      std::fill(dK.begin(), dK.end(), 0.0);
      std::fill(dV.begin(), dV.end(), 0.0);
      for (int h = kvh * group; h < (kvh + 1) * group; h++)
        for (int r = 0; r < q.len; r++) {
          const int t = q.local_begin + r;
          const KeyRun run = visible_keys(mask.seq(b, s.T), q.global_begin + r, k);
          const real* qr = qkv + X.q(b, t, h);
          const real* dO = dout + X.o(b, t, h);
          const double LSE_r = double(lse[X.row(b, h, t)]), D_r = double(D[X.row(b, h, t)]);
          std::fill(dqr.begin(), dqr.end(), 0.0);
          for (int c = run.c0; c < run.c1; c++) {
            const real* kc = kv + X.k(b, k.local_begin + c, kvh);
            const real* vc = kv + X.v(b, k.local_begin + c, kvh);
            double S = 0.0, dP = 0.0;
            for (int d = 0; d < HS; d++) {
              S += double(qr[d]) * double(kc[d]);
              dP += double(dO[d]) * double(vc[d]);
            }
            const double P = std::exp(scale * S - LSE_r), dS = scale * P * (dP - D_r);
            double* dKc = &dK[size_t(c) * HS];
            double* dVc = &dV[size_t(c) * HS];
            for (int d = 0; d < HS; d++) {
              dVc[d] += P * double(dO[d]);
              dqr[d] += dS * double(kc[d]);
              dKc[d] += dS * double(qr[d]);
            }
          }
          real* dqo = dq + X.o(b, t, h);
          for (int d = 0; d < HS; d++) dqo[d] = real(double(dqo[d]) + dqr[d]);
        }
      for (int c = 0; c < k.len; c++) {
        real* dk = dkv + X.k(b, k.local_begin + c, kvh);
        real* dv = dkv + X.v(b, k.local_begin + c, kvh);
        for (int d = 0; d < HS; d++) {
          dk[d] = real(double(dk[d]) + dK[size_t(c) * HS + d]);
          dv[d] = real(double(dv[d]) + dV[size_t(c) * HS + d]);
        }
      }
    }
}

// ---------------------------------------------------------------------------------------------
// the ring

template <typename real>
void ring_attention_forward_ref(real* const* out, real* const* lse, const real* const* qkv,
                                AttnShape s, const CpLayout& L, const AttnMask& mask,
                                RingTrace* trace) {
  check_ring(s, L, "ring_attention_forward_ref");
  validate_mask(mask, s.B, s.T, "ring_attention_forward_ref");
  const int N = L.cp();
  reset_trace(trace, N);
  std::vector<std::vector<real>> hold(N);  // the K/V block each rank holds
  std::vector<int> owner(N);
  std::vector<std::vector<real>> o_blk(N), lse_blk(N);  // per-rank partial (scratch)
  for (int r = 0; r < N; r++) {
    const int Tl = L.local_len(r);
    hold[r] = pack_kv(qkv[r], s, Tl);
    owner[r] = r;
    o_blk[r].resize(size_t(s.B) * Tl * s.NH * s.HS);
    lse_blk[r].resize(size_t(s.B) * s.NH * Tl);
    std::fill_n(out[r], o_blk[r].size(), real(0));
    std::fill_n(lse[r], lse_blk[r].size(), real(kNegInf));
  }
  for (int step = 0; step < N; step++) {
    if (trace) trace->held.push_back(owner);
    for (int r = 0; r < N; r++) {
      const int src = L.ring_source(r, step);
      CHECK(owner[r] == src, "ring_attention_forward_ref: rank %d holds block %d at step %d, "
            "expected %d", r, owner[r], step, src);
      for (const CpBlockPair& p : L.pairs(r, step)) {
        const bool live = computed(p, mask, s.B, s.T);
        if (trace) trace->pairs_by_kind[int(live ? p.kind : CpPairKind::kSkipped)][r]++;
        if (!live) continue;
        attention_block_forward_ref(o_blk[r].data(), lse_blk[r].data(), qkv[r], hold[r].data(),
                                    s, L.local_len(r), L.local_len(src), p.q, p.k, mask);
        attention_merge_ref(out[r], lse[r], o_blk[r].data(), lse_blk[r].data(), s,
                            L.local_len(r), p.q);
        if (trace) trace->visible_pairs[r] += visible_pairs(mask, s.B, s.T, p.q, p.k);
      }
    }
    if (step < N - 1) ring_pass(hold, owner, L, trace);
  }
}

template <typename real>
void ring_attention_backward_ref(real* const* dqkv, const real* const* dout,
                                 const real* const* qkv, const real* const* out,
                                 const real* const* lse, AttnShape s, const CpLayout& L,
                                 const AttnMask& mask, RingTrace* trace) {
  check_ring(s, L, "ring_attention_backward_ref");
  validate_mask(mask, s.B, s.T, "ring_attention_backward_ref");
  const int N = L.cp();
  reset_trace(trace, N);
  std::vector<std::vector<real>> hold(N), dacc(N);  // K/V block in hand; each rank's dK/dV
  std::vector<int> owner(N);
  std::vector<std::vector<real>> dq(N), D(N);
  for (int r = 0; r < N; r++) {
    const int Tl = L.local_len(r);
    const Local X(s, Tl, Tl);
    hold[r] = pack_kv(qkv[r], s, Tl);
    dacc[r].assign(hold[r].size(), real(0));
    owner[r] = r;
    dq[r].assign(size_t(s.B) * Tl * s.NH * s.HS, real(0));
    D[r].resize(size_t(s.B) * s.NH * Tl);
    for (int b = 0; b < s.B; b++)
      for (int h = 0; h < s.NH; h++)
        for (int t = 0; t < Tl; t++) {
          const real* dO = dout[r] + X.o(b, t, h);
          const real* O = out[r] + X.o(b, t, h);
          double acc = 0.0;
          for (int d = 0; d < s.HS; d++) acc += double(dO[d]) * double(O[d]);
          D[r][X.row(b, h, t)] = real(acc);
        }
  }
  if (trace) {
    trace->held.assign(N, std::vector<int>(N, -1));
    trace->dkv_sent_to.assign(N, std::vector<int>(N, -1));
  }
  // The other ranks' blocks first (steps 1 .. N-1, the K/V moving round the ring as in the
  // forward), the rank's own chunks last (step 0, its own K/V): each step's contribution to
  // dK/dV goes to a fresh buffer and from there straight to the block's owner, who adds it to
  // its accumulator (on the GPU while the next step runs).
  std::vector<real> dkv_blk;
  for (int i = 1; i <= N; i++) {
    const int step = i % N;
    if (step == 1) ring_pass(hold, owner, L, trace);  // the first K/V hop
    for (int r = 0; r < N; r++) {
      const int src = L.ring_source(r, step);
      const std::vector<real> own = step == 0 ? pack_kv(qkv[r], s, L.local_len(r))
                                              : std::vector<real>();
      const std::vector<real>& kv = step == 0 ? own : hold[r];
      CHECK(step == 0 || owner[r] == src, "ring_attention_backward_ref: rank %d holds K/V %d at "
            "step %d, expected %d", r, owner[r], step, src);
      if (trace) trace->held[step][r] = step == 0 ? r : owner[r];
      dkv_blk.assign(kv.size(), real(0));
      for (const CpBlockPair& p : L.pairs(r, step)) {
        const bool live = computed(p, mask, s.B, s.T);
        if (trace) trace->pairs_by_kind[int(live ? p.kind : CpPairKind::kSkipped)][r]++;
        if (!live) continue;
        attention_block_backward_ref(dq[r].data(), dkv_blk.data(), dout[r], qkv[r], kv.data(),
                                     lse[r], D[r].data(), s, L.local_len(r), L.local_len(src),
                                     p.q, p.k, mask);
        if (trace) trace->visible_pairs[r] += visible_pairs(mask, s.B, s.T, p.q, p.k);
      }
      if (step > 0 && trace) {  // sent to the owner
        trace->dkv_sent_to[step][r] = src;
        trace->bytes_sent[r] += dkv_blk.size() * sizeof(real);
      }
      for (size_t e = 0; e < dkv_blk.size(); e++)
        dacc[src][e] = real(double(dacc[src][e]) + double(dkv_blk[e]));
    }
    if (step > 0 && step < N - 1) ring_pass(hold, owner, L, trace);
  }
  for (int r = 0; r < N; r++) {
    const int Tl = L.local_len(r);
    const Local X(s, Tl, Tl);
    for (int b = 0; b < s.B; b++)
      for (int t = 0; t < Tl; t++) {
        for (int h = 0; h < s.NH; h++)
          std::copy_n(dq[r].data() + X.o(b, t, h), s.HS, dqkv[r] + X.q(b, t, h));
        std::copy_n(dacc[r].data() + X.k(b, t, 0), 2 * size_t(s.NKV) * s.HS,
                    dqkv[r] + X.q(b, t, s.NH));
      }
  }
}

// ---------------------------------------------------------------------------------------------
// RoPE at global positions

template <typename real>
void cp_rope_forward_ref(real* qkv, AttnShape s, const CpLayout& L, int r, float theta) {
  const size_t row = (size_t(s.NH) + 2 * s.NKV) * s.HS;
  cp_for_each_chunk(L, r, s.B, [&](size_t local_row, size_t, int pos, int len) {
    rope_forward_ref(qkv + local_row * row, 1, len, s.NH, s.NKV, s.HS, pos, theta);
  });
}

template <typename real>
void cp_rope_backward_ref(real* dqkv, AttnShape s, const CpLayout& L, int r, float theta) {
  const size_t row = (size_t(s.NH) + 2 * s.NKV) * s.HS;
  cp_for_each_chunk(L, r, s.B, [&](size_t local_row, size_t, int pos, int len) {
    rope_backward_ref(dqkv + local_row * row, 1, len, s.NH, s.NKV, s.HS, pos, theta);
  });
}

#define INSTANTIATE(real)                                                                       \
  template void attention_block_forward_ref<real>(real*, real*, const real*, const real*,      \
                                                  AttnShape, int, int, CpChunk, CpChunk,       \
                                                  const AttnMask&);                            \
  template void attention_merge_ref<real>(real*, real*, const real*, const real*, AttnShape,   \
                                          int, CpChunk);                                       \
  template void attention_block_backward_ref<real>(real*, real*, const real*, const real*,     \
                                                   const real*, const real*, const real*,      \
                                                   AttnShape, int, int, CpChunk, CpChunk,      \
                                                   const AttnMask&);                           \
  template void ring_attention_forward_ref<real>(real* const*, real* const*, const real* const*, \
                                                 AttnShape, const CpLayout&, const AttnMask&,   \
                                                 RingTrace*);                                   \
  template void ring_attention_backward_ref<real>(real* const*, const real* const*,             \
                                                  const real* const*, const real* const*,       \
                                                  const real* const*, AttnShape,                \
                                                  const CpLayout&, const AttnMask&, RingTrace*); \
  template void cp_rope_forward_ref<real>(real*, AttnShape, const CpLayout&, int, float);       \
  template void cp_rope_backward_ref<real>(real*, AttnShape, const CpLayout&, int, float);
INSTANTIATE(float)
INSTANTIATE(double)
#undef INSTANTIATE
