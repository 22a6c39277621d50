// context_parallel.cpp — the zigzag layout, ring schedule, communication volume and the data
// and loss rules of context parallelism. Everything is explained in context_parallel.h.
#include "model/context_parallel.h"

#include "kernels/common.h"

const char* cp_pair_kind_name(CpPairKind k) {
  switch (k) {
    case CpPairKind::kSkipped: return "skipped";
    case CpPairKind::kFull: return "full";
    case CpPairKind::kDiagonal: return "diagonal";
  }
  return "?";
}

CpLayout::CpLayout(int cp, int T) : N_(cp), T_(T) {
  CHECK(cp >= 1, "--cp %d must be >= 1 (the context-parallel degree)", cp);
  CHECK(T >= 2 * cp,
        "--seq-len %d is shorter than 2 * --cp = %d: the zigzag split cuts each sequence into "
        "2*cp chunks of at least one token; raise --seq-len or lower --cp",
        T, 2 * cp);
}

int CpLayout::chunk_begin(int k) const {
  CHECK(k >= 0 && k <= 2 * N_, "CpLayout: chunk %d out of [0, %d]", k, 2 * N_);
  return int(int64_t(k) * T_ / (2 * N_));
}

CpChunk CpLayout::chunk(int r, int which) const {
  CHECK(r >= 0 && r < N_ && (which == 0 || which == 1), "CpLayout: rank %d of %d, chunk %d", r,
        N_, which);
  const int k = which == 0 ? r : 2 * N_ - 1 - r;
  return CpChunk{k, chunk_begin(k), chunk_len(k), which == 0 ? 0 : chunk_len(r)};
}

int CpLayout::local_len(int r) const { return chunk(r, 0).len + chunk(r, 1).len; }

int CpLayout::max_local_len() const {
  int m = 0;
  for (int r = 0; r < N_; r++) m = local_len(r) > m ? local_len(r) : m;
  return m;
}

int CpLayout::global_pos(int r, int local_row) const {
  CHECK(local_row >= 0 && local_row < local_len(r), "CpLayout: row %d of rank %d (holds %d)",
        local_row, r, local_len(r));
  const CpChunk c = chunk(r, local_row < chunk(r, 0).len ? 0 : 1);
  return c.global_begin + (local_row - c.local_begin);
}

int CpLayout::owner_of(int pos) const {
  CHECK(pos >= 0 && pos < T_, "CpLayout: position %d out of [0, %d)", pos, T_);
  // Chunk k with a_k <= pos < a_{k+1}; a_k is monotone, so start from the proportional guess.
  int k = int(int64_t(pos) * 2 * N_ / T_);
  while (chunk_begin(k) > pos) k--;
  while (chunk_begin(k + 1) <= pos) k++;
  return k < N_ ? k : 2 * N_ - 1 - k;
}

std::vector<CpBlockPair> CpLayout::pairs(int r, int s) const {
  CHECK(s >= 0 && s < N_, "CpLayout: ring step %d out of [0, %d)", s, N_);
  const int src = ring_source(r, s);
  std::vector<CpBlockPair> out;
  for (int qi = 0; qi < 2; qi++)
    for (int ki = 0; ki < 2; ki++) {
      const CpChunk q = chunk(r, qi), k = chunk(src, ki);
      out.push_back(CpBlockPair{q, k, cp_pair_kind(q.index, k.index)});
    }
  return out;
}

int64_t CpLayout::causal_pairs(int r) const {
  int64_t n = 0;
  for (int s = 0; s < N_; s++)
    for (const CpBlockPair& p : pairs(r, s)) {
      if (p.kind == CpPairKind::kFull) n += int64_t(p.q.len) * p.k.len;
      if (p.kind == CpPairKind::kDiagonal) n += int64_t(p.q.len) * (p.q.len + 1) / 2;
    }
  return n;
}

bool cp_pair_live(const AttnMask& m, int B, int T, const CpChunk& q, const CpChunk& k) {
  for (int b = 0; b < (m.doc_start ? B : 1); b++)  // without documents every sequence is alike
    if (tile_kind(m.seq(b, T), q.global_begin, q.global_begin + q.len - 1, k.global_begin,
                  k.global_begin + k.len - 1) != TileKind::kEmpty)
      return true;
  return false;
}

std::vector<int64_t> cp_rank_visible_pairs(const CpLayout& L, const SeqMask& m) {
  std::vector<int64_t> pairs(L.cp(), 0);
  for (int r = 0; r < L.cp(); r++)
    for (int which = 0; which < 2; which++) {
      const CpChunk c = L.chunk(r, which);
      for (int t = c.global_begin; t < c.global_begin + c.len; t++) pairs[r] += t - m.lo(t) + 1;
    }
  return pairs;
}

CpReach cp_block_reach(const CpLayout& L, const AttnMask& m, int B, int q_rank, int k_rank) {
  CpReach reach{};
  for (int w = 0; w < 2; w++) {
    reach.len[w] = L.chunk(k_rank, w).len;
    reach.from[w] = q_rank == k_rank ? 0 : reach.len[w];
  }
  if (q_rank == k_rank) return reach;
  for (int qi = 0; qi < 2; qi++)
    for (int w = 0; w < 2; w++) {
      const CpChunk q = L.chunk(q_rank, qi), k = L.chunk(k_rank, w);
      if (cp_pair_kind(q.index, k.index) != CpPairKind::kFull) continue;  // k follows q
      for (int b = 0; b < (m.doc_start ? B : 1); b++) {
        const int lo = m.seq(b, L.T()).lo(q.global_begin);  // the smallest lo of q's rows
        if (lo < k.global_begin + k.len)
          reach.from[w] = std::min(reach.from[w], std::max(0, lo - k.global_begin));
      }
    }
  return reach;
}

CpCommBytes cp_comm_bytes(const CpLayout& L, int r, int B, int NKV, int HS, size_t kv_elem,
                          size_t dkv_elem, const AttnMask* mask) {
  const size_t per_row = size_t(B) * 2 * NKV * HS;  // K and V of one token, all NKV heads
  const int N = L.cp();
  CpCommBytes c{0, 0};
  if (mask == nullptr || mask->is_causal()) {
    // The ring: rank r sends, after ring step s, the K/V block it holds (owner
    // ring_source(r, s)) on to rank r+1 at steps 0 .. N-2, and (backward) its dK/dV
    // contribution to that block's owner at steps 1 .. N-1.
    for (int s = 0; s < N; s++) {
      const size_t rows = L.local_len(L.ring_source(r, s));
      if (s < N - 1) {
        c.forward += rows * per_row * kv_elem;
        c.backward += rows * per_row * kv_elem;
      }
      if (s > 0) c.backward += rows * per_row * dkv_elem;
    }
    return c;
  }
  // Straight sends: the rows of rank r's block that each other rank's queries see, and a dK/dV
  // contribution home for the rows of every block r's queries saw.
  for (int s = 1; s < N; s++) {
    const size_t out = cp_block_reach(L, *mask, B, (r + s) % N, r).rows(),
                 in = cp_block_reach(L, *mask, B, r, L.ring_source(r, s)).rows();
    c.forward += out * per_row * kv_elem;
    c.backward += out * per_row * kv_elem + in * per_row * dkv_elem;
  }
  return c;
}

double cp_loss_share(double rank_loss_sum, int cp, int B, int T) {
  return rank_loss_sum * cp / (double(B) * double(T));
}

float cp_token_dloss(int cp, int B, int T, int grad_accum) {
  return float(double(cp) / (double(B) * double(T) * double(grad_accum)));
}

void RingStepTimes::add(const RingStepTimes& o) {
  if (fwd_ms.size() < o.fwd_ms.size()) fwd_ms.resize(o.fwd_ms.size(), 0.0);
  if (bwd_ms.size() < o.bwd_ms.size()) bwd_ms.resize(o.bwd_ms.size(), 0.0);
  for (size_t s = 0; s < o.fwd_ms.size(); s++) fwd_ms[s] += o.fwd_ms[s];
  for (size_t s = 0; s < o.bwd_ms.size(); s++) bwd_ms[s] += o.bwd_ms[s];
  kv_wait_ms += o.kv_wait_ms;
  dkv_wait_ms += o.dkv_wait_ms;
}

std::string ring_times_summary(const RingStepTimes& t, double per) {
  const double d = per > 0 ? per : 1.0;
  auto steps = [&](const std::vector<double>& ms) {
    std::string out = "[";
    for (size_t s = 0; s < ms.size(); s++) out += flashgpt::strformat("%s%.1f", s ? ", " : "", ms[s] / d);
    return out + "]";
  };
  return flashgpt::strformat("attention per ring step: fwd %s ms, bwd %s ms | waits: K/V %.1f ms, dK/dV %.1f ms",
                   steps(t.fwd_ms).c_str(), steps(t.bwd_ms).c_str(), t.kv_wait_ms / d,
                   t.dkv_wait_ms / d);
}
