// mask — which keys each query of attention sees (the causal mask, the document mask, the
// sliding window), per row and per tile: one description for the CPU oracle (attention_ref),
// the CPU model and the GPU kernels. Host and device code, no CUDA headers: the per-row and
// per-tile functions are constexpr, so device code calls them (nvcc --expt-relaxed-constexpr).
//
// Rows t and keys u of one sequence of T tokens, 0-based:
//   causal      query t sees keys 0..t.
//   document    query t sees the keys of its own document, up to itself. A document starts at
//               every end-of-text token (EOT) and at row 0. The EOT belongs to the document it
//               STARTS: prepare's and llm.c's shards put an EOT before each document
//               ([EOT, tokens...]), so the EOT row predicts the document's first token and sees
//               only itself, as in modded-nanogpt's document mask. The rows before the first
//               EOT of a window are the tail of a document that began before the window: they
//               form a document that starts at row 0.
//   window W    (--window, combines with either) query t sees at most its W most recent keys,
//               itself included: u >= t - W + 1. W = 0: no limit.
// So query t sees keys lo(t)..t, with
//   lo(t) = max(doc_start(t), t - W + 1)      (doc_start = 0 when causal; no window term at W = 0)
// doc_start(t) <= t, and doc_start and t - W + 1 are both non-decreasing in t: so lo(t) <= t
// (every row sees at least itself) and lo is non-decreasing (binary search works on it).
// doc_start of a window of tokens is the inclusive prefix maximum of (token[t] == EOT ? t : 0):
// one scan per sequence (document_starts below; the GPU's version does the same scan).
// Positions are untouched: a document inside a window keeps the window's positions (learned
// position embeddings and RoPE both see t, not t - doc_start(t)).
//
// Tiles. A Q tile of rows q0..q1 and a K tile of keys k0..k1 (inclusive; the last tile of a
// ragged T is short) is
//   EMPTY    no visible pair: k0 > q1, or lo(max(q0, k0)) > k1. Never loaded, never computed.
//   FULL     every pair visible: k1 <= q0 and lo(q1) <= k0. No masking.
//   PARTIAL  otherwise: masked element by element (visible iff lo(t) <= u <= t).
// (lo is monotone, so the row of a tile that reaches furthest left is its first, and the
// first row at or after k0 decides emptiness.)
// The K tiles of one Q tile i that are not empty are one range, lo(q0)/Bc .. q1/Bc, and its
// FULL tiles are one range inside it; likewise for one K tile j the Q tiles k0/Br up to the
// last whose first row has lo <= k1 (a binary search over lo), FULL ones a range inside. So a
// kernel loops over a TileRange and masks only the partial tiles at its two ends: the
// forward with kv_tiles_for_q_tile, the backward with q_tiles_for_kv_tile.
//
// Work: the visible (query, key) pairs per head are T(T+1)/2 for causal; a document of n rows
// under window W has window_pairs(n, W). Forward FLOPs = 4 * HS * pairs per head (S = Q K^T and
// O = P V), the backward's 2.5x that (the DESIGN.md convention, counted over the visible area).
//
// Test: build/test_cpu --gtest_filter='Mask*'  (tests/cpu/test_mask.cpp: every function against
// a brute-force definition on random documents, windows 1, tile +- 1 and > T, ragged T).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

enum class MaskKind { kCausal, kDocument };

// What the flags --mask and --window ask for, and the document separator.
struct MaskSpec {
  MaskKind kind = MaskKind::kCausal;
  int window = 0;  // W >= 0; 0 = unlimited
  int eot = -1;    // the end-of-text token id (document mask); -1: vocab_size - 1, the id of
                   // GPT-2's <|endoftext|> (50256) and of our tokenizer's (data/tokenizer.h)
  bool is_causal() const { return kind == MaskKind::kCausal && window == 0; }
  int eot_token(int vocab_size) const { return eot >= 0 ? eot : vocab_size - 1; }
};
// "causal", "document".
const char* mask_kind_name(MaskKind k);
// The --mask value; unknown: throws "--mask 'x' is unknown; use one of: causal, document".
MaskKind mask_kind_from_name(const std::string& name);
// Checks --window (>= 0) and spec.eot (< vocab_size); throws one line naming the flag.
void validate_mask_spec(const MaskSpec& spec, int vocab_size);
// "causal", "document", "causal, window 256", "document, window 1024": for start lines.
std::string describe_mask(const MaskSpec& spec);

// The mask of one sequence: query t sees keys lo(t)..t.
struct SeqMask {
  const int* doc_start = nullptr;  // (T) first row of each row's document; nullptr: 0 (causal)
  int window = 0;                  // W; 0 = unlimited
  constexpr int lo(int t) const {
    const int d = doc_start ? doc_start[t] : 0;
    const int w = window > 0 ? t - window + 1 : 0;
    return d > w ? d : w;
  }
  constexpr bool visible(int t, int u) const { return lo(t) <= u && u <= t; }
};

// The mask of a batch of B sequences of T rows. {} is the causal mask.
struct AttnMask {
  const int* doc_start = nullptr;  // (B, T) document starts (document_starts); nullptr: causal
  int window = 0;                  // W; 0 = unlimited
  constexpr SeqMask seq(int b, int T) const {
    return SeqMask{doc_start ? doc_start + size_t(b) * T : nullptr, window};
  }
  constexpr bool is_causal() const { return doc_start == nullptr && window == 0; }
  // The flags that ask for this mask (what a backend's spec is asked about; eot unknown here).
  MaskSpec spec() const {
    MaskSpec s;
    s.kind = doc_start ? MaskKind::kDocument : MaskKind::kCausal;
    s.window = window;
    return s;
  }
};

// doc_start (B, T) of a batch of token windows (B, T): row t's document starts at the last EOT
// at or before t, or at 0. The CPU oracle of the GPU's scan.
std::vector<int> document_starts(const int* tokens, int B, int T, int eot);
// The mask of a batch of input tokens (B, T) under `spec`: with the document mask, doc_start is
// filled with document_starts (the mask points into it), else cleared.
AttnMask batch_mask(const MaskSpec& spec, const int* tokens, int B, int T, int vocab_size,
                    std::vector<int>& doc_start);
// Checks that a mask is one document_starts can make: window >= 0 and, per sequence,
// doc_start(0) = 0 and doc_start(t) in {doc_start(t-1), t}. Throws naming `who`.
void validate_mask(const AttnMask& m, int B, int T, const char* who);

enum class TileKind { kEmpty, kPartial, kFull };

// Rows q0..q1 against keys k0..k1 (inclusive, q0 <= q1, k0 <= k1).
constexpr TileKind tile_kind(SeqMask m, int q0, int q1, int k0, int k1) {
  if (k0 > q1 || m.lo(q0 > k0 ? q0 : k0) > k1) return TileKind::kEmpty;
  if (k1 <= q0 && m.lo(q1) <= k0) return TileKind::kFull;
  return TileKind::kPartial;
}

// The tiles one tile meets: begin <= x < end are not empty (never none: each row sees itself),
// full_begin <= x < full_end the FULL ones among them (full_begin == full_end == end: none).
struct TileRange {
  int begin, end, full_begin, full_end;
  constexpr TileKind kind(int x) const {
    return x < begin || x >= end                  ? TileKind::kEmpty
           : x >= full_begin && x < full_end ? TileKind::kFull
                                                  : TileKind::kPartial;
  }
};

namespace mask_detail {
constexpr int div_up(int a, int b) { return (a + b - 1) / b; }
constexpr TileRange make_range(int begin, int end, int full_begin, int full_end) {
  full_begin = full_begin > begin ? full_begin : begin;
  full_end = full_end < end ? full_end : end;
  if (full_begin >= full_end) full_begin = full_end = end;
  return TileRange{begin, end, full_begin, full_end};
}
}  // namespace mask_detail

// First row t in [from, T) whose lo(t) > key; T if none (lo is non-decreasing: binary search).
constexpr int first_row_past_key(SeqMask m, int T, int from, int key) {
  int a = from, b = T;
  while (a < b) {
    const int mid = a + (b - a) / 2;
    if (m.lo(mid) > key) b = mid;
    else a = mid + 1;
  }
  return a;
}

// first_row_past_key in rounds of 32 probes, for a kernel whose 32 lanes probe a row each a
// round (problem_mask.cuh; at most 4 rounds up to T = 1M, where the binary search takes 20
// dependent loads). probes(a, step, b) returns bit l set iff row a + l step is at or past b or
// has lo > key: lo is non-decreasing, so the set bits are the lanes from the first past one on,
// and the answer lies between the last probe below and that one.
constexpr int lowest_bit(uint32_t x) {
  int f = 0;
  while (!((x >> f) & 1u)) ++f;
  return f;
}
template <class Probes>
constexpr int first_row_past_key_32way(int end, int from, Probes&& probes) {
  int a = from, b = end;  // lo(t) <= key for from <= t < a; lo(t) > key for b <= t < end
  while (a < b) {
    const int step = (b - a + 31) / 32;
    const uint32_t past = probes(a, step, b);
    if (past == 0) {
      a += 31 * step + 1;
    } else {
      const int f = lowest_bit(past);  // the first lane past: its probe, or b if beyond it
      b = a + f * step < b ? a + f * step : b;
      if (f > 0) a += (f - 1) * step + 1;
    }
  }
  return a;
}

// Forward: the K/V tiles (Bc keys) that Q tile i (Br rows) meets.
constexpr TileRange kv_tiles_for_q_tile(SeqMask m, int T, int Br, int Bc, int i) {
  const int q0 = i * Br, q1 = (q0 + Br < T ? q0 + Br : T) - 1;
  const int Tc = mask_detail::div_up(T, Bc);
  // FULL: k0 >= lo(q1), and k1 = min(k0 + Bc, T) - 1 <= q0.
  const int full_end = q0 == T - 1 ? Tc : (q0 + 1) / Bc;
  return mask_detail::make_range(m.lo(q0) / Bc, q1 / Bc + 1, mask_detail::div_up(m.lo(q1), Bc),
                                 full_end);
}

// ---- the same ranges for rows and keys that are not tiles of one sequence from row 0 ----
// A kernel whose row tiles are end-aligned (flash3's forward: tile i starts at T - (Tr - i) Br)
// or that runs one pair of context parallelism (query rows from q_pos0, keys from k_pos0, all
// GLOBAL positions of the sequence, so lo() reads the sequence's own doc_start) takes its ranges
// from these. The range may be empty (begin == end == full_begin == full_end): a Q tile of one
// ring pair can see none of that pair's keys.

// Forward: the K/V tiles that query rows r0..r1 (r0 <= r1, the rows that exist) meet, the keys
// being the Tk positions from k_pos0 in tiles of Bc (tile x: keys k_pos0 + x Bc ..). Keys a
// tiled kernel pads past Tk are no keys: a ragged last tile (Tk % Bc != 0) is never FULL, so the
// kernel masks it (its padding zero-filled, not -inf). Otherwise FULL as tile_kind says.
constexpr TileRange kv_tiles_for_rows(SeqMask m, int r0, int r1, int k_pos0, int Tk, int Bc) {
  // The keys some row sees: lo(r0)..r1 (lo is monotone and lo(t) <= t), cut to the problem's.
  const int lo0 = m.lo(r0), first = lo0 > k_pos0 ? lo0 : k_pos0;
  const int last = r1 < k_pos0 + Tk - 1 ? r1 : k_pos0 + Tk - 1;
  if (first > last) return TileRange{0, 0, 0, 0};
  // FULL: every row sees the tile's Bc keys: lo(r1) <= k0 and k0 + Bc - 1 <= r0, x Bc + Bc <= Tk.
  const int lo1 = m.lo(r1);
  const int full_begin = lo1 <= k_pos0 ? 0 : mask_detail::div_up(lo1 - k_pos0, Bc);
  const int below = r0 + 1 - k_pos0 < 0 ? 0 : (r0 + 1 - k_pos0) / Bc;
  const int full_end = below < Tk / Bc ? below : Tk / Bc;
  return mask_detail::make_range((first - k_pos0) / Bc, (last - k_pos0) / Bc + 1, full_begin,
                                 full_end);
}

// Backward: the Q tiles (Br rows, tile y: rows q_pos0 + y Br .., Tq rows) that keys k0..k1
// (k0 <= k1, keys that exist) meet, from the two searches over lo that decide it:
//   past_k1 = first_row_past_key(m, q_pos0 + Tq, from, k1),  past_k0 = ... (.., from, k0),
// from = max(k0, q_pos0) (< q_pos0 + Tq). A kernel can run the searches its own way (a warp's
// 32-way search) and share this arithmetic; q_tiles_for_keys below runs them plainly.
constexpr TileRange q_tiles_from_searches(int from, int past_k1, int past_k0, int k1, int q_pos0,
                                          int Tq, int Br) {
  if (past_k1 == from) return TileRange{0, 0, 0, 0};  // lo(from) > k1: no row sees these keys
  // Rows from..past_k1 - 1 see some key; FULL: q0 >= k1 and the tile's last row < past_k0.
  const int Tr = mask_detail::div_up(Tq, Br);
  const int full_begin = k1 <= q_pos0 ? 0 : mask_detail::div_up(k1 - q_pos0, Br);
  const int full_end = past_k0 == q_pos0 + Tq ? Tr : (past_k0 - q_pos0) / Br;
  return mask_detail::make_range((from - q_pos0) / Br, mask_detail::div_up(past_k1 - q_pos0, Br),
                                 full_begin, full_end);
}
constexpr TileRange q_tiles_for_keys(SeqMask m, int k0, int k1, int q_pos0, int Tq, int Br) {
  const int end = q_pos0 + Tq, from = k0 > q_pos0 ? k0 : q_pos0;
  if (from >= end) return TileRange{0, 0, 0, 0};
  return q_tiles_from_searches(from, first_row_past_key(m, end, from, k1),
                               first_row_past_key(m, end, from, k0), k1, q_pos0, Tq, Br);
}
// Backward: the Q tiles (Br rows) that K/V tile j (Bc keys) meets. Not empty: the tile holding
// row k0, and every later tile whose first row has lo <= k1 (a binary search); FULL: q0 >= k1,
// and q1 = min(q0 + Br, T) - 1 < (first row whose lo > k0).
constexpr TileRange q_tiles_for_kv_tile(SeqMask m, int T, int Br, int Bc, int j) {
  const int k0 = j * Bc;
  return q_tiles_for_keys(m, k0, (k0 + Bc < T ? k0 + Bc : T) - 1, 0, T, Br);
}

// Visible (query, key) pairs of a document of n rows under window W (0 = unlimited):
// n(n+1)/2, or W(W+1)/2 + (n - W) W when W < n.
constexpr int64_t window_pairs(int64_t n, int W) {
  return W <= 0 || W >= n ? n * (n + 1) / 2 : int64_t(W) * (W + 1) / 2 + (n - W) * W;
}
// Visible pairs of a batch, per head: the sum over sequences and rows of t - lo(t) + 1.
int64_t visible_pairs(const AttnMask& m, int B, int T);
// Element area of the Br x Bc tiles that are not EMPTY (what a tiled kernel computes, padded
// rows of ragged tiles included), per head, over the batch; causal: causal_tile_area (backends.h)
// times B.
double visited_tile_area(const AttnMask& m, int B, int T, int Br, int Bc);
