// test_mask — the mask description (kernels/attention/mask.{h,cpp}) against a brute-force
// definition written from the tokens alone: query t sees key u iff u <= t, no EOT lies in
// (u, t] (the EOT starts its document), and t - u < W when W > 0.
//
//   Mask.DocumentStarts          document_starts vs the definition, and worked examples
//   Mask.RowsMatchDefinition     SeqMask::lo / visible vs the definition, lo monotone, lo(t) <= t
//   Mask.TilesMatchDefinition    tile_kind, kv_tiles_for_q_tile, q_tiles_for_kv_tile on every
//                                tile pair vs counting visible pairs (0: EMPTY, all: FULL)
//   Mask.RowFormsMatchDefinition kv_tiles_for_rows, q_tiles_for_keys (a ring pair's rows and
//                                keys, end-aligned row tiles) on every tile pair vs counting
//   Mask.SearchBy32Probes        first_row_past_key_32way (the backward kernels' warp search,
//                                lanes simulated) vs first_row_past_key
//   Mask.PairsAndArea            visible_pairs, window_pairs, visited_tile_area vs counting;
//                                causal: T(T+1)/2 and causal_tile_area
//   Mask.NamesAndChecks          --mask names, describe_mask, validate_mask(_spec) errors
// Cases: T ragged and around the tiles (1 .. 129), tiles 1 .. 64 with Br != Bc, windows 0, 1,
// tile - 1, tile, tile + 1, T - 1, T, > T and random, documents none / all length 1 / EOT at
// row 0 only / random at three densities. Random from the base seed (FLASHGPT_SEED repeats).
// Run: build/test_cpu --gtest_filter='Mask*'
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "kernels/attention/backends.h"
#include "kernels/attention/mask.h"
#include "kernels/common.h"
#include "tests/test_common.h"

namespace {

constexpr int kEot = 7;

// The definition, from the tokens of one sequence: eots[x] counts the EOTs in rows 0..x, so
// "no EOT in (u, t]" is eots[t] == eots[u].
struct Definition {
  std::vector<int> eots;
  int W;
  Definition(const std::vector<int>& tok, int W) : eots(tok.size()), W(W) {
    for (size_t x = 0; x < tok.size(); x++) eots[x] = (x ? eots[x - 1] : 0) + (tok[x] == kEot);
  }
  bool sees(int t, int u) const {
    return u <= t && (W == 0 || t - u < W) && eots[t] == eots[u];
  }
};

// Token windows with the document layouts of the header comment (kEot marks documents).
std::vector<std::vector<int>> token_windows(int T, std::mt19937_64& rng) {
  std::vector<std::vector<int>> out;
  std::uniform_int_distribution<int> other(0, kEot - 1);
  auto fill = [&](double p_eot) {
    std::bernoulli_distribution is_eot(p_eot);
    std::vector<int> tok(T);
    for (int& x : tok) x = is_eot(rng) ? kEot : other(rng);
    return tok;
  };
  out.push_back(fill(0.0));                         // one document spanning the window
  out.push_back(std::vector<int>(T, kEot));         // every document of length 1
  out.push_back(fill(0.0)), out.back()[0] = kEot;   // EOT at row 0 only
  for (double p : {0.03, 0.15, 0.5}) out.push_back(fill(p));  // starts mid-document mostly
  return out;
}

std::vector<int> windows_for(int T, int Br, int Bc, std::mt19937_64& rng) {
  std::vector<int> w = {0, 1, 2, Bc - 1, Bc, Bc + 1, Br - 1, Br + 1, T - 1, T, T + 5};
  w.push_back(1 + int(rng() % (T + 1)));
  std::vector<int> out;
  for (int x : w)
    if (x >= 0) out.push_back(x);
  return out;
}

const int kTs[] = {1, 2, 3, 5, 16, 17, 31, 33, 64, 100, 129};
const int kTiles[][2] = {{1, 1}, {2, 3}, {4, 4}, {7, 16}, {16, 7}, {32, 32}, {64, 16}};

TEST(Mask, DocumentStarts) {
  SEED_TRACE();
  // Worked examples: (tokens, expected starts), E = EOT.
  const int E = kEot;
  struct {
    std::vector<int> tok, start;
  } ex[] = {
      {{1, 2, 3}, {0, 0, 0}},                    // no EOT: one document from row 0
      {{E, 1, 2}, {0, 0, 0}},                    // EOT at row 0 starts the (only) document
      {{1, 2, E, 3, 4}, {0, 0, 2, 2, 2}},        // the EOT starts the next document
      {{E, E, E}, {0, 1, 2}},                    // documents of length 1
      {{1, E, E, 2, E}, {0, 1, 2, 2, 4}},
  };
  for (const auto& e : ex) {
    const int T = int(e.tok.size());
    EXPECT_EQ(document_starts(e.tok.data(), 1, T, E), e.start);
  }
  // Two sequences at once: each its own.
  const std::vector<int> two = {1, E, 2, E, 3, 4};
  EXPECT_EQ(document_starts(two.data(), 2, 3, E), (std::vector<int>{0, 1, 1, 0, 0, 0}));

  std::mt19937_64 rng = test_rng();
  for (int T : kTs)
    for (const std::vector<int>& tok : token_windows(T, rng)) {
      const std::vector<int> ds = document_starts(tok.data(), 1, T, kEot);
      for (int t = 0; t < T; t++) {
        const Definition def(tok, 0);
        int first = t;  // the first key t sees with no window: its document's first row
        while (first > 0 && def.sees(t, first - 1)) first--;
        ASSERT_EQ(ds[t], first) << "T=" << T << " t=" << t;
      }
      EXPECT_NO_THROW(validate_mask(AttnMask{ds.data(), 0}, 1, T, "test"));
    }
}

TEST(Mask, RowsMatchDefinition) {
  SEED_TRACE();
  std::mt19937_64 rng = test_rng();
  size_t checked = 0;
  for (int T : kTs)
    for (const std::vector<int>& tok : token_windows(T, rng)) {
      const std::vector<int> ds = document_starts(tok.data(), 1, T, kEot);
      for (int W : windows_for(T, 4, 16, rng)) {
        const SeqMask m{ds.data(), W};
        const Definition def(tok, W);
        for (int t = 0; t < T; t++) {
          ASSERT_LE(m.lo(t), t);
          if (t > 0) {
            ASSERT_LE(m.lo(t - 1), m.lo(t)) << "lo not monotone";
          }
          for (int u = 0; u < T; u++, checked++)
            ASSERT_EQ(m.visible(t, u), def.sees(t, u)) << "T=" << T << " W=" << W << " t=" << t
                                                           << " u=" << u;
        }
      }
    }
  // The causal mask ({}: no documents, no window) is u <= t.
  const SeqMask causal = AttnMask{}.seq(0, 9);
  for (int t = 0; t < 9; t++)
    for (int u = 0; u < 9; u++) EXPECT_EQ(causal.visible(t, u), u <= t);
  std::printf("  %zu (query, key) pairs checked against the definition\n", checked);
}

// Counts the visible pairs of rows q0..q1 x keys k0..k1: the definition of a tile's kind.
TileKind brute_kind(const Definition& def, int q0, int q1, int k0, int k1) {
  long seen = 0;
  for (int t = q0; t <= q1; t++)
    for (int u = k0; u <= k1; u++) seen += def.sees(t, u);
  const long all = long(q1 - q0 + 1) * (k1 - k0 + 1);
  return seen == 0 ? TileKind::kEmpty : seen == all ? TileKind::kFull : TileKind::kPartial;
}

const char* kind_name(TileKind k) {
  return k == TileKind::kEmpty ? "EMPTY" : k == TileKind::kFull ? "FULL" : "PARTIAL";
}

TEST(Mask, TilesMatchDefinition) {
  SEED_TRACE();
  std::mt19937_64 rng = test_rng();
  size_t tiles = 0, counts[3] = {0, 0, 0};
  for (int T : kTs)
    for (const auto& tl : kTiles) {
      const int Br = tl[0], Bc = tl[1], Tr = (T + Br - 1) / Br, Tc = (T + Bc - 1) / Bc;
      for (const std::vector<int>& tok : token_windows(T, rng)) {
        const std::vector<int> ds = document_starts(tok.data(), 1, T, kEot);
        for (int W : windows_for(T, Br, Bc, rng)) {
          const SeqMask m{ds.data(), W};
          const Definition def(tok, W);
          // kind[i][j] by the definition; every function must agree with it on every tile.
          std::vector<TileKind> kind(size_t(Tr) * Tc);
          for (int i = 0; i < Tr; i++)
            for (int j = 0; j < Tc; j++) {
              const int q0 = i * Br, q1 = std::min(q0 + Br, T) - 1;
              const int k0 = j * Bc, k1 = std::min(k0 + Bc, T) - 1;
              const TileKind want = brute_kind(def, q0, q1, k0, k1);
              kind[size_t(i) * Tc + j] = want;
              counts[int(want)]++;
              tiles++;
              ASSERT_EQ(kind_name(tile_kind(m, q0, q1, k0, k1)), kind_name(want))
                  << "T=" << T << " Br=" << Br << " Bc=" << Bc << " W=" << W << " i=" << i
                  << " j=" << j;
            }
          // The forward's ranges (x = a Q tile, y = its K tiles) and the backward's (x = a K
          // tile, y = its Q tiles) must give every tile pair its kind.
          for (bool fwd : {true, false})
            for (int x = 0; x < (fwd ? Tr : Tc); x++) {
              const TileRange r = fwd ? kv_tiles_for_q_tile(m, T, Br, Bc, x)
                                      : q_tiles_for_kv_tile(m, T, Br, Bc, x);
              ASSERT_LT(r.begin, r.end) << "a tile meets no tile";
              for (int y = 0; y < (fwd ? Tc : Tr); y++) {
                const int i = fwd ? x : y, j = fwd ? y : x;
                ASSERT_EQ(kind_name(r.kind(y)), kind_name(kind[size_t(i) * Tc + j]))
                    << (fwd ? "forward" : "backward") << ": T=" << T << " Br=" << Br
                    << " Bc=" << Bc << " W=" << W << " Q tile " << i << " K tile " << j
                    << " range [" << r.begin << ", " << r.end << ") full [" << r.full_begin
                    << ", " << r.full_end << ")";
              }
            }
        }
      }
    }
  std::printf("  %zu tile pairs checked: %zu EMPTY, %zu PARTIAL, %zu FULL\n", tiles, counts[0],
              counts[1], counts[2]);
  // Each kind must have been met many times, or the check covers less than it claims.
  for (size_t c : counts) EXPECT_GT(c, 1000u);
}

// The forms for rows and keys from anywhere in the sequence (a ring pair: query rows from
// q_pos0, keys from k_pos0; flash3's end-aligned row tiles) against the definition: every Q tile
// of the problem's rows (tiles from its first row, or ending at its last) against every K tile
// of its keys, and back. A ragged last K tile is never FULL in the forward (its padding keys
// are no keys).
TEST(Mask, RowFormsMatchDefinition) {
  SEED_TRACE();
  std::mt19937_64 rng = test_rng();
  size_t pairs = 0, counts[3] = {0, 0, 0}, empty_ranges = 0;
  for (int T : {1, 5, 17, 64, 100, 129})
    for (const auto& tl : kTiles) {
      const int Br = tl[0], Bc = tl[1];
      for (const std::vector<int>& tok : token_windows(T, rng)) {
        const std::vector<int> ds = document_starts(tok.data(), 1, T, kEot);
        for (int W : windows_for(T, Br, Bc, rng))
          for (int rep = 0; rep < 3; rep++) {
            const SeqMask m{ds.data(), W};
            const Definition def(tok, W);
            // A problem: Tq rows from q_pos0, Tk keys from k_pos0 (the whole sequence first).
            int q_pos0 = 0, Tq = T, k_pos0 = 0, Tk = T;
            if (rep > 0) {
              q_pos0 = int(rng() % T), Tq = 1 + int(rng() % (T - q_pos0));
              k_pos0 = int(rng() % T), Tk = 1 + int(rng() % (T - k_pos0));
            }
            const int Tr = (Tq + Br - 1) / Br, Tc = (Tk + Bc - 1) / Bc;
            auto key_tile = [&](int x, int& k0, int& k1) {
              k0 = k_pos0 + x * Bc, k1 = std::min(k0 + Bc, k_pos0 + Tk) - 1;
            };
            // Forward: row tiles from the first row, and end-aligned (the first one ragged).
            for (bool end_aligned : {false, true})
              for (int i = 0; i < Tr; i++) {
                const int start = end_aligned ? Tq - (Tr - i) * Br : i * Br;
                const int r0 = q_pos0 + std::max(start, 0),
                          r1 = q_pos0 + std::min(start + Br, Tq) - 1;
                const TileRange r = kv_tiles_for_rows(m, r0, r1, k_pos0, Tk, Bc);
                empty_ranges += r.begin == r.end;
                ASSERT_LE(r.begin, r.end);
                for (int x = 0; x < Tc; x++, pairs++) {
                  int k0, k1;
                  key_tile(x, k0, k1);
                  TileKind want = brute_kind(def, r0, r1, k0, k1);
                  if (want == TileKind::kFull && x * Bc + Bc > Tk) want = TileKind::kPartial;
                  counts[int(want)]++;
                  ASSERT_EQ(kind_name(r.kind(x)), kind_name(want))
                      << "forward: T=" << T << " W=" << W << " Br=" << Br << " Bc=" << Bc
                      << " rows " << r0 << ".." << r1 << " keys from " << k_pos0 << " (" << Tk
                      << ") tile " << x;
                }
              }
            // Backward: each K tile against the Q tiles from the first row.
            for (int x = 0; x < Tc; x++) {
              int k0, k1;
              key_tile(x, k0, k1);
              const TileRange r = q_tiles_for_keys(m, k0, k1, q_pos0, Tq, Br);
              empty_ranges += r.begin == r.end;
              ASSERT_LE(r.begin, r.end);
              for (int y = 0; y < Tr; y++, pairs++) {
                const int r0 = q_pos0 + y * Br, r1 = std::min(r0 + Br, q_pos0 + Tq) - 1;
                const TileKind want = brute_kind(def, r0, r1, k0, k1);
                counts[int(want)]++;
                ASSERT_EQ(kind_name(r.kind(y)), kind_name(want))
                    << "backward: T=" << T << " W=" << W << " Br=" << Br << " Bc=" << Bc
                    << " keys " << k0 << ".." << k1 << " rows from " << q_pos0 << " (" << Tq
                    << ") tile " << y;
              }
            }
          }
      }
    }
  std::printf("  %zu tile pairs checked: %zu EMPTY, %zu PARTIAL, %zu FULL; %zu empty ranges\n",
              pairs, counts[0], counts[1], counts[2], empty_ranges);
  for (size_t c : counts) EXPECT_GT(c, 1000u);
  EXPECT_GT(empty_ranges, 100u);
}

// The 32-way search of the backward kernels (problem_mask.cuh: one probe per lane of a warp
// each round) against the binary search, lanes simulated: the same row for every (from, end,
// key), random and at the edges (key below every lo, above every row, from = end - 1), on
// documents and windows up to T = 1M; at most 4 rounds.
TEST(Mask, SearchBy32Probes) {
  SEED_TRACE();
  std::mt19937_64 rng = test_rng();
  size_t checks = 0;
  int most_rounds = 0;
  for (int T : {1, 2, 33, 1000, 5000, 1 << 20}) {
    for (double p_eot : {0.0, 0.01, 0.5}) {
      std::bernoulli_distribution is_eot(p_eot);
      std::vector<int> tok(T);
      for (int& x : tok) x = is_eot(rng) ? kEot : 0;
      const std::vector<int> ds = document_starts(tok.data(), 1, T, kEot);
      for (int W : {0, 1, 7, 1000}) {
        const SeqMask m{ds.data(), W};
        for (int rep = 0; rep < (T > 100000 ? 20 : 200); rep++) {
          const int from = int(rng() % T), end = from + 1 + int(rng() % (T - from));
          const int keys[] = {int(rng() % T), from, m.lo(from) - 1, m.lo(from), end, T + 3};
          for (int key : keys) {
            int rounds = 0;
            const int got = first_row_past_key_32way(end, from, [&](int a, int step, int b) {
              rounds++;
              uint32_t past = 0;
              for (int l = 0; l < 32; l++)
                if (a + l * step >= b || m.lo(a + l * step) > key) past |= 1u << l;
              return past;
            });
            ASSERT_EQ(got, first_row_past_key(m, end, from, key))
                << "T=" << T << " W=" << W << " from=" << from << " end=" << end
                << " key=" << key;
            most_rounds = std::max(most_rounds, rounds);
            checks++;
          }
        }
      }
    }
  }
  std::printf("  %zu searches checked, at most %d rounds\n", checks, most_rounds);
  EXPECT_LE(most_rounds, 4);
}

TEST(Mask, PairsAndArea) {
  SEED_TRACE();
  std::mt19937_64 rng = test_rng();
  for (int T : kTs) {
    // Causal: T(T+1)/2 pairs, and the tiles of backends.h's causal_tile_area.
    EXPECT_EQ(visible_pairs(AttnMask{}, 1, T), int64_t(T) * (T + 1) / 2);
    for (const auto& tl : kTiles)
      EXPECT_EQ(visited_tile_area(AttnMask{}, 3, T, tl[0], tl[1]),
                3 * causal_tile_area(T, tl[0], tl[1]))
          << "T=" << T << " Br=" << tl[0] << " Bc=" << tl[1];
    const std::vector<std::vector<int>> wins = token_windows(T, rng);
    // All windows as one batch (B = number of layouts).
    std::vector<int> batch;
    for (const auto& w : wins) batch.insert(batch.end(), w.begin(), w.end());
    const int B = int(wins.size());
    const std::vector<int> ds = document_starts(batch.data(), B, T, kEot);
    for (int W : windows_for(T, 4, 16, rng)) {
      const AttnMask m{ds.data(), W};
      std::vector<Definition> defs;
      for (const auto& w : wins) defs.emplace_back(w, W);
      int64_t brute = 0, by_documents = 0;
      for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++)
          for (int u = 0; u < T; u++) brute += defs[b].sees(t, u);
        // The same count document by document: window_pairs of each document's length.
        int start = 0;
        for (int t = 1; t <= T; t++)
          if (t == T || wins[b][t] == kEot) by_documents += window_pairs(t - start, W), start = t;
      }
      EXPECT_EQ(visible_pairs(m, B, T), brute) << "T=" << T << " W=" << W;
      EXPECT_EQ(by_documents, brute) << "T=" << T << " W=" << W;
      for (const auto& tl : kTiles) {
        const int Br = tl[0], Bc = tl[1];
        double area = 0;
        for (int b = 0; b < B; b++)
          for (int q0 = 0; q0 < T; q0 += Br)
            for (int k0 = 0; k0 < T; k0 += Bc)
              area += brute_kind(defs[b], q0, std::min(q0 + Br, T) - 1, k0,
                                 std::min(k0 + Bc, T) - 1) != TileKind::kEmpty
                          ? double(Br) * Bc
                          : 0.0;
        EXPECT_EQ(visited_tile_area(m, B, T, Br, Bc), area)
            << "T=" << T << " W=" << W << " Br=" << Br << " Bc=" << Bc;
      }
    }
  }
  EXPECT_EQ(window_pairs(10, 0), 55);
  EXPECT_EQ(window_pairs(10, 10), 55);
  EXPECT_EQ(window_pairs(10, 3), 6 + 7 * 3);
  EXPECT_EQ(window_pairs(1, 1), 1);
  EXPECT_EQ(window_pairs(1 << 20, 1024),
            int64_t(1024) * 1025 / 2 + int64_t((1 << 20) - 1024) * 1024);
}

TEST(Mask, NamesAndChecks) {
  EXPECT_EQ(mask_kind_from_name("causal"), MaskKind::kCausal);
  EXPECT_EQ(mask_kind_from_name("document"), MaskKind::kDocument);
  try {
    mask_kind_from_name("doc");
    ADD_FAILURE() << "mask_kind_from_name(\"doc\") did not throw";
  } catch (const flashgpt::Error& e) {
    EXPECT_STREQ(e.what(), "--mask 'doc' is unknown; use one of: causal, document");
  }
  EXPECT_EQ(describe_mask(MaskSpec{}), "causal");
  EXPECT_EQ(describe_mask(MaskSpec{MaskKind::kDocument, 1024, -1}), "document, window 1024");
  EXPECT_TRUE(MaskSpec{}.is_causal());
  EXPECT_FALSE((MaskSpec{MaskKind::kCausal, 5, -1}.is_causal()));
  EXPECT_FALSE((MaskSpec{MaskKind::kDocument, 0, -1}.is_causal()));
  EXPECT_TRUE(AttnMask{}.is_causal());

  EXPECT_NO_THROW(validate_mask_spec(MaskSpec{MaskKind::kDocument, 0, 99}, 100));
  try {
    validate_mask_spec(MaskSpec{MaskKind::kCausal, -3, -1}, 100);
    ADD_FAILURE() << "a negative window did not throw";
  } catch (const flashgpt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("--window -3"), std::string::npos) << e.what();
  }
  EXPECT_THROW(validate_mask_spec(MaskSpec{MaskKind::kDocument, 0, 100}, 100), flashgpt::Error);

  // validate_mask: a doc_start that document_starts cannot make.
  const std::vector<int> bad_first = {1, 1, 1}, jumps_back = {0, 1, 0}, skips = {0, 0, 1, 1};
  EXPECT_THROW(validate_mask(AttnMask{bad_first.data(), 0}, 1, 3, "test"), flashgpt::Error);
  EXPECT_THROW(validate_mask(AttnMask{jumps_back.data(), 0}, 1, 3, "test"), flashgpt::Error);
  EXPECT_THROW(validate_mask(AttnMask{skips.data(), 0}, 1, 4, "test"), flashgpt::Error);
  EXPECT_THROW(validate_mask(AttnMask{nullptr, -1}, 1, 4, "test"), flashgpt::Error);
  const std::vector<int> ok = {0, 1, 1, 3};
  EXPECT_NO_THROW(validate_mask(AttnMask{ok.data(), 2}, 1, 4, "test"));
}

}  // namespace
