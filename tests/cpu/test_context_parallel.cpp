// test_context_parallel — the zigzag layout of context parallelism (model/
// context_parallel.{h,cpp}); the CPU ring oracle's tests: test_ring_attention_ref.cpp.
//
//   ContextParallel.ChunksCoverTheSequence      chunk boundaries, ragged lengths, local rows <->
//                                               global positions, owner_of
//   ContextParallel.ZigzagBalancesCausalWork    equal unmasked (q, k) pairs per rank (spread
//                                               <= T when T % 2N != 0); a contiguous split fails
//   ContextParallel.RingVisitsEveryBlockOnce    schedule and pair kinds: every (rank, block) once,
//                                               every causal chunk pair once, none above it
//   ContextParallel.CommBytesFormula            cp_comm_bytes vs the header's formula
//   ContextParallel.ShortSequenceRefused        T < 2*cp and cp < 1: one clear error
//   ContextParallel.PairLivenessUnderMasks      cp_pair_live and cp_rank_visible_pairs against
//                                               a brute-force count of visible pairs
//   ContextParallel.StraightSendsUnderMasks     cp_block_reach against brute
//                                               force; a masked ring's bytes; a window reaches
//                                               the neighbours
//   ContextParallel.LoaderSplitsWindows         each rank's rows (cp_scatter) of the loader's
//                                               inputs and targets: every (input, target) pair
//                                               of the T+1 window on exactly one rank
//   ContextParallel.LossIsMeanOverAllTokens     cp_loss_share and cp_token_dloss through the real
//                                               classifier: loss and replicated-parameter
//                                               gradient equal the single-GPU ones
//
// Run: make NO_CUDA=1 BUILD=build-cpu -j2 build-cpu/test_cpu &&
//      build-cpu/test_cpu --gtest_filter='ContextParallel*'   (~0.2 s on the 2-core machine)
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
#include "kernels/classifier.h"
#include "kernels/common.h"
#include "kernels/rope.h"
#include "model/context_parallel.h"
#include "model/ring_attention_ref.h"
#include "tests/cpu/ref_check.h"
#include "tests/cpu/test_helpers.h"
#include "tests/test_common.h"

namespace {

// W(x, y) = sum_{p=x}^{y-1} (p + 1): unmasked (q, k) pairs of the queries at positions [x, y).
int64_t causal_work(int64_t x, int64_t y) { return (y * (y + 1) - x * (x + 1)) / 2; }

// Fresh inputs for every check: one generator for the file, from the iteration's seed
// (tests/test_common.h: FLASHGPT_SEED=<n> repeats a run, --gtest_repeat=N runs N seeds).
std::mt19937_64& rng() { return iteration_rng(0x6370u); }

}  // namespace

// ---------------------------------------------------------------------------------------------
// layout

TEST(ContextParallel, ChunksCoverTheSequence) {
  int cases = 0;
  for (int N = 1; N <= 8; N++)
    for (int T = 2 * N; T <= 2 * N + 70; T++, cases++) {
      const CpLayout L(N, T);
      const std::string ctx = flashgpt::strformat("N=%d T=%d", N, T);
      ASSERT_EQ(L.chunk_begin(0), 0) << ctx;
      ASSERT_EQ(L.chunk_begin(2 * N), T) << ctx;
      int shortest = T, longest = 0;
      for (int k = 0; k < 2 * N; k++) {
        shortest = std::min(shortest, L.chunk_len(k));
        longest = std::max(longest, L.chunk_len(k));
      }
      EXPECT_GE(shortest, 1) << ctx;
      EXPECT_LE(longest - shortest, 1) << ctx << " (ragged chunks differ by at most one)";
      // Every global position is held by exactly one (rank, local row), in ascending order
      // inside each rank; owner_of agrees.
      std::vector<int> seen(T, 0);
      int total = 0, max_local = 0;
      for (int r = 0; r < N; r++) {
        const CpChunk a = L.chunk(r, 0), b = L.chunk(r, 1);
        EXPECT_EQ(a.index, r) << ctx;
        EXPECT_EQ(b.index, 2 * N - 1 - r) << ctx;
        EXPECT_EQ(a.local_begin, 0) << ctx;
        EXPECT_EQ(b.local_begin, a.len) << ctx;
        EXPECT_EQ(L.local_len(r), a.len + b.len) << ctx;
        for (int row = 0; row < L.local_len(r); row++) {
          const int p = L.global_pos(r, row);
          ASSERT_TRUE(p >= 0 && p < T) << ctx;
          seen[p]++;
          EXPECT_EQ(L.owner_of(p), r) << ctx << " position " << p;
          if (row > 0) {
            EXPECT_LT(L.global_pos(r, row - 1), p) << ctx;
          }
        }
        total += L.local_len(r);
        max_local = std::max(max_local, L.local_len(r));
      }
      EXPECT_EQ(total, T) << ctx;
      EXPECT_EQ(L.max_local_len(), max_local) << ctx;
      for (int p = 0; p < T; p++) EXPECT_EQ(seen[p], 1) << ctx << " position " << p;
    }
  std::printf("  %d (N, T) layouts: chunks non-empty, lengths within 1, positions held once\n",
              cases);
}

TEST(ContextParallel, ZigzagBalancesCausalWork) {
  double worst = 0;  // largest spread / T over ragged T
  std::string worst_ctx;
  for (int N = 1; N <= 8; N++)
    for (int T = 2 * N; T < 600; T++) {
      const CpLayout L(N, T);
      const std::string ctx = flashgpt::strformat("N=%d T=%d", N, T);
      int64_t lo = INT64_MAX, hi = 0, sum = 0;
      for (int r = 0; r < N; r++) {
        const int64_t w = L.causal_pairs(r);
        // The schedule's count (kind by kind) equals the closed form of the two chunks.
        const CpChunk a = L.chunk(r, 0), b = L.chunk(r, 1);
        ASSERT_EQ(w, causal_work(a.global_begin, a.global_begin + a.len) +
                         causal_work(b.global_begin, b.global_begin + b.len))
            << ctx << " rank " << r;
        lo = std::min(lo, w), hi = std::max(hi, w), sum += w;
      }
      ASSERT_EQ(sum, int64_t(T) * (T + 1) / 2) << ctx << ": the ranks must cover the triangle";
      if (T % (2 * N) == 0) {
        ASSERT_EQ(hi, lo) << ctx << ": T % 2N == 0 must balance exactly";
      }
      ASSERT_LE(hi - lo, T) << ctx << ": ragged spread over the header's bound";
      if (double(hi - lo) / T > worst) worst = double(hi - lo) / T, worst_ctx = ctx;
    }
  std::printf("  N = 1..8, T = 2N..599: exact balance when T %% 2N == 0; worst ragged spread "
              "%.2f T (bound 1 T) at %s\n", worst, worst_ctx.c_str());

  // The check above is not vacuous: a contiguous split (rank r holds [rT/N, (r+1)T/N)) has a
  // spread of about T^2 / N and fails it by far.
  const int N = 4, T = 64;
  int64_t lo = INT64_MAX, hi = 0;
  for (int r = 0; r < N; r++) {
    const int64_t w = causal_work(int64_t(r) * T / N, int64_t(r + 1) * T / N);
    lo = std::min(lo, w), hi = std::max(hi, w);
  }
  std::printf("  contiguous split N=%d T=%d: spread %lld = %.0f T (zigzag: 0)\n", N, T,
              (long long)(hi - lo), double(hi - lo) / T);
  EXPECT_GT(hi - lo, T);
}

TEST(ContextParallel, RingVisitsEveryBlockOnce) {
  for (int N = 1; N <= 6; N++) {
    const int T = 10 * N + 3;  // ragged
    const CpLayout L(N, T);
    const std::string ctx = flashgpt::strformat("N=%d T=%d", N, T);
    // computed[(q chunk, k chunk)]: how often some rank computes that chunk pair.
    std::vector<int> computed(4 * N * N, 0);
    for (int r = 0; r < N; r++) {
      std::set<int> sources;
      for (int s = 0; s < N; s++) {
        const int src = L.ring_source(r, s);
        sources.insert(src);
        // What rank r holds at step s+1 is what rank r-1 held at step s (it was sent on).
        if (s + 1 < N) {
          EXPECT_EQ(L.ring_source(r, s + 1), L.ring_source(L.ring_prev(r), s));
        }
        int kinds[3] = {0, 0, 0};
        for (const CpBlockPair& p : L.pairs(r, s)) {
          kinds[int(p.kind)]++;
          EXPECT_EQ(p.q.index == r || p.q.index == 2 * N - 1 - r, true) << ctx;
          EXPECT_EQ(p.k.index == src || p.k.index == 2 * N - 1 - src, true) << ctx;
          // The kind is what the global positions say.
          const bool all_before = p.k.global_begin + p.k.len - 1 <= p.q.global_begin;
          const bool all_after = p.k.global_begin > p.q.global_begin + p.q.len - 1;
          const CpPairKind want = all_before  ? CpPairKind::kFull
                                  : all_after ? CpPairKind::kSkipped
                                              : CpPairKind::kDiagonal;
          EXPECT_EQ(int(p.kind), int(want)) << ctx << " rank " << r << " step " << s;
          if (p.kind != CpPairKind::kSkipped) computed[p.q.index * 2 * N + p.k.index]++;
        }
        // Step 0: the rank's own chunks, two diagonal, one full, one skipped; later steps
        // two full and two skipped (the equal work of every step).
        const int want_diag = s == 0 ? 2 : 0, want_full = s == 0 ? 1 : 2;
        EXPECT_EQ(kinds[int(CpPairKind::kDiagonal)], want_diag) << ctx << " r" << r << " s" << s;
        EXPECT_EQ(kinds[int(CpPairKind::kFull)], want_full) << ctx << " r" << r << " s" << s;
      }
      EXPECT_EQ(int(sources.size()), N) << ctx << ": rank " << r << " must meet every block";
    }
    // Every chunk pair on or below the diagonal exactly once, none above it.
    for (int qc = 0; qc < 2 * N; qc++)
      for (int kc = 0; kc < 2 * N; kc++)
        EXPECT_EQ(computed[qc * 2 * N + kc], kc <= qc ? 1 : 0)
            << ctx << " q chunk " << qc << " k chunk " << kc;
  }
  std::printf("  N = 1..6: every rank meets every block once; the %s\n",
              "causal chunk triangle is computed exactly once, nothing above it");
}

TEST(ContextParallel, CommBytesFormula) {
  const int B = 2, NKV = 3, HS = 16;
  for (int N = 1; N <= 5; N++) {
    // T % N == 0: the formula with T/N rows per rank.
    const int T = 2 * N * 7;
    const CpLayout L(N, T);
    const size_t block = size_t(B) * 2 * (T / N) * NKV * HS;  // K/V elements of one rank
    for (int r = 0; r < N; r++) {
      const CpCommBytes c = cp_comm_bytes(L, r, B, NKV, HS, 2, 4);
      EXPECT_EQ(c.forward, size_t(N - 1) * block * 2) << "N=" << N;
      EXPECT_EQ(c.backward, size_t(N - 1) * block * 2 + size_t(N - 1) * block * 4) << "N=" << N;
    }
    // Ragged T: over all ranks, every block makes N-1 K/V hops and gets N-1 dK/dV
    // contributions (one from every other rank).
    const CpLayout R(N, 2 * N * 7 + N + 1);
    size_t fwd = 0, bwd = 0, blocks = 0;
    for (int r = 0; r < N; r++) {
      const CpCommBytes c = cp_comm_bytes(R, r, B, NKV, HS, 2, 4);
      fwd += c.forward, bwd += c.backward;
      blocks += size_t(B) * 2 * R.local_len(r) * NKV * HS;
    }
    EXPECT_EQ(fwd, size_t(N - 1) * blocks * 2) << "ragged N=" << N;
    EXPECT_EQ(bwd, size_t(N - 1) * blocks * 2 + size_t(N - 1) * blocks * 4) << "ragged N=" << N;
  }
  const CpLayout L(2, 256 * 1024);
  const CpCommBytes c = cp_comm_bytes(L, 0, 1, 12, 64, 2, 4);
  std::printf("  d12-like (NKV=12 HS=64) T=256K cp=2, per rank per layer: forward %.1f MiB, "
              "backward %.1f MiB\n", c.forward / 1048576.0, c.backward / 1048576.0);
}

TEST(ContextParallel, ShortSequenceRefused) {
  const std::string msg = expect_error([] { CpLayout(4, 7); }, "--seq-len 7");
  EXPECT_NE(msg.find("--cp"), std::string::npos) << msg;
  std::printf("  T=7 cp=4: %s\n", msg.c_str());
  expect_error([] { CpLayout(0, 16); }, "--cp 0");
  expect_error([] { CpLayout(1, 1); }, "--seq-len 1");
  CpLayout(4, 8);  // T = 2N: one token per chunk is fine
}

// cp_pair_live and cp_rank_visible_pairs against a brute-force count of the visible pairs of
// every chunk pair, on random documents and windows (ragged T, B = 2: a pair live in either
// sequence is live).
TEST(ContextParallel, PairLivenessUnderMasks) {
  std::bernoulli_distribution eot(0.15);
  int live = 0, dead = 0;
  for (int N = 1; N <= 4; N++)
    for (int T : {2 * N, 2 * N * 5 + 3, 61})
      for (int W : {0, 1, 3, T}) {
        const int B = 2;
        std::vector<int> tokens(size_t(B) * T);
        for (int& t : tokens) t = eot(rng()) ? 1 : 0;
        const std::vector<int> starts = document_starts(tokens.data(), B, T, 1);
        for (const AttnMask& m : {AttnMask{starts.data(), W}, AttnMask{nullptr, W}}) {
          const CpLayout L(N, T);
          const std::string ctx = flashgpt::strformat("N=%d T=%d W=%d %s", N, T, W,
                                                      m.doc_start ? "document" : "causal");
          for (int r = 0; r < N; r++)
            for (int s = 0; s < N; s++)
              for (const CpBlockPair& p : L.pairs(r, s)) {
                int64_t visible = 0;
                for (int b = 0; b < B; b++)
                  for (int q = p.q.global_begin; q < p.q.global_begin + p.q.len; q++)
                    for (int k = p.k.global_begin; k < p.k.global_begin + p.k.len; k++)
                      visible += m.seq(b, T).visible(q, k);
                EXPECT_EQ(cp_pair_live(m, B, T, p.q, p.k), visible > 0) << ctx;
                (visible > 0 ? live : dead)++;
              }
          for (int b = 0; b < B; b++) {
            const std::vector<int64_t> pairs = cp_rank_visible_pairs(L, m.seq(b, T));
            for (int r = 0; r < N; r++) {
              int64_t want = 0;
              for (int i = 0; i < L.local_len(r); i++) {
                const int q = L.global_pos(r, i);
                for (int k = 0; k < T; k++) want += m.seq(b, T).visible(q, k);
              }
              EXPECT_EQ(pairs[r], want) << ctx << " rank " << r;
            }
          }
        }
      }
  std::printf("  %d live and %d empty chunk pairs, each as counted\n", live, dead);
}

// Under a mask other than causal the GPU ring sends a rank only the rows of a block that its
// queries see: cp_block_reach (a suffix of each chunk) against brute force,
// the bytes cp_comm_bytes counts from them, and windows: one shorter than a chunk reaches the
// neighbouring ranks only, at any cp; a window of 1, none.
TEST(ContextParallel, StraightSendsUnderMasks) {
  std::bernoulli_distribution eot(0.02);
  const int B = 2, NKV = 2, HS = 8;
  const size_t per_row = size_t(B) * 2 * NKV * HS;
  for (int N = 1; N <= 8; N++)
    for (int T : {2 * N * 40, 2 * N * 40 + N + 3})
      for (int W : {0, 1, 7, 39, 100000}) {
        std::vector<int> tokens(size_t(B) * T);
        for (int& t : tokens) t = eot(rng()) ? 1 : 0;
        const std::vector<int> starts = document_starts(tokens.data(), B, T, 1);
        for (const AttnMask& m : {AttnMask{starts.data(), W}, AttnMask{nullptr, W}}) {
          if (m.is_causal()) continue;  // the ring's bytes: CommBytesFormula
          const CpLayout L(N, T);
          const std::string ctx = flashgpt::strformat("N=%d T=%d W=%d %s", N, T, W,
                                                      m.doc_start ? "document" : "window");
          std::vector<std::vector<bool>> live(N, std::vector<bool>(N));
          std::vector<std::vector<int>> rows(N, std::vector<int>(N));
          for (int q = 0; q < N; q++)
            for (int k = 0; k < N; k++) {
              // Brute force: every key row of k's block that some query row of q's sees.
              std::vector<bool> seen(L.local_len(k), false);
              for (int b = 0; b < B; b++)
                for (int i = 0; i < L.local_len(q); i++)
                  for (int j = 0; j < L.local_len(k); j++)
                    if (m.seq(b, T).visible(L.global_pos(q, i), L.global_pos(k, j))) seen[j] = true;
              const CpReach reach = cp_block_reach(L, m, B, q, k);
              for (int w = 0; w < 2; w++) {
                const CpChunk c = L.chunk(k, w);
                for (int j = 0; j < c.len; j++)  // own block: all of it (its ring step 0)
                  EXPECT_EQ(j >= reach.from[w], q == k || seen[c.local_begin + j])
                      << ctx << " q rank " << q << " k rank " << k << " chunk " << w
                      << " row " << j;
                EXPECT_EQ(reach.len[w], c.len) << ctx;
              }
              live[q][k] = q == k || std::find(seen.begin(), seen.end(), true) != seen.end();
              rows[q][k] = reach.rows();
              EXPECT_EQ(reach.any(), live[q][k]) << ctx << " q rank " << q << " k rank " << k;
            }
          for (int r = 0; r < N; r++) {
            EXPECT_TRUE(live[r][r]) << ctx;  // every row sees itself
            size_t fwd = 0, dkv = 0;
            for (int d = 0; d < N; d++) {
              if (d == r) continue;
              fwd += rows[d][r] * per_row * 2;  // bf16 K/V rows sent to d
              dkv += rows[r][d] * per_row * 4;  // fp32 dK/dV rows sent home to d
            }
            const CpCommBytes c = cp_comm_bytes(L, r, B, NKV, HS, 2, 4, &m);
            EXPECT_EQ(c.forward, fwd) << ctx << " rank " << r;
            EXPECT_EQ(c.backward, fwd + dkv) << ctx << " rank " << r;
            if (W == 0 || m.doc_start) continue;
            // A window alone: a block reaches rank r's neighbours when the window is shorter
            // than a chunk (W <= 39 here: chunks hold >= 40 tokens): chunk k's queries reach
            // chunk k-1, so rank r's block (chunks r, 2N-1-r) goes to rank r+1 (chunk r+1) and
            // rank r-1 (chunk 2N-r), of which rank 0 and rank N-1 have one. No one at W = 1.
            std::set<int> want;
            if (W > 1 && W <= 39) {
              if (r + 1 < N) want.insert(r + 1);
              if (r > 0) want.insert(r - 1);
            }
            if (W > 39)  // longer than T: every rank
              for (int d = 0; d < N; d++) want.insert(d);
            want.erase(r);
            for (int d = 0; d < N; d++) {
              if (d == r) continue;
              EXPECT_EQ(live[d][r], want.count(d) == 1) << ctx << " rank " << r << " to " << d;
            }
          }
        }
      }
  const CpLayout L(8, 1 << 20);
  const AttnMask window{nullptr, 4096};
  const CpCommBytes ring = cp_comm_bytes(L, 3, 1, 12, 64, 2, 4),
                    straight = cp_comm_bytes(L, 3, 1, 12, 64, 2, 4, &window);
  std::printf("  T=1M cp=8 window 4096, rank 3 per layer: forward %.0f MiB straight against "
              "%.0f MiB round the ring, backward %.0f against %.0f MiB\n",
              straight.forward / 1048576.0, ring.forward / 1048576.0,
              straight.backward / 1048576.0, ring.backward / 1048576.0);
}

// ---------------------------------------------------------------------------------------------
// data loader and loss

TEST(ContextParallel, LoaderSplitsWindows) {
  std::uniform_int_distribution<int> tok(0, 50256);
  for (int N = 1; N <= 4; N++)
    for (int T : {2 * N, 2 * N * 5, 2 * N * 5 + 3}) {
      const CpLayout L(N, T);
      const std::string ctx = flashgpt::strformat("N=%d T=%d", N, T);
      std::vector<int> window(T + 1);  // the loader's (T+1)-token window of one sequence
      for (int& w : window) w = tok(rng());
      // The loader's batch of that one sequence: inputs window[0..T), targets window[1..T].
      const std::vector<int> inputs(window.begin(), window.end() - 1),
          targets(window.begin() + 1, window.end());
      std::vector<int> pairs_seen(T, 0);
      for (int r = 0; r < N; r++) {
        const int Tl = L.local_len(r);
        std::vector<int> in(Tl, -1), tg(Tl, -1);
        cp_scatter(in.data(), inputs.data(), L, r, 1, 1);  // as the model keeps its rows
        cp_scatter(tg.data(), targets.data(), L, r, 1, 1);
        for (int i = 0; i < Tl; i++) {
          const int p = L.global_pos(r, i);
          // The pair the single-GPU loader gives position p: input window[p], target window[p+1].
          EXPECT_EQ(in[i], window[p]) << ctx << " rank " << r << " row " << i;
          EXPECT_EQ(tg[i], window[p + 1]) << ctx << " rank " << r << " row " << i;
          pairs_seen[p]++;
        }
      }
      for (int p = 0; p < T; p++) EXPECT_EQ(pairs_seen[p], 1) << ctx << " position " << p;
    }
  std::printf("  N = 1..4: every (input, target) pair of the window on exactly one rank\n");
}

TEST(ContextParallel, LossIsMeanOverAllTokens) {
  const int N = 3, B = 2, T = 13, V = 11, Vp = 16;  // T % 2N != 0: ranks hold 5, 4, 4 tokens
  const CpLayout L(N, T);
  const std::vector<double> logits = ref_check::uniform(size_t(B) * T * Vp, rng(), -2, 2);
  const std::vector<double> X = ref_check::uniform(size_t(B) * T * Vp, rng(), -2, 2);  // a parameter's input
  // The mean of the rank means is sum_r mean_r (1/N - Tl_r/T): it weights a rank holding
  // more than T/N tokens less than the mean does. Targets: on such a rank each token's least
  // likely class, elsewhere its most likely, so every loss there is above log V and every
  // other one below it: the wrong mean misses for certain, on any seed.
  std::vector<int> targets(size_t(B) * T);
  for (size_t t = 0; t < targets.size(); t++) {
    const double* l = &logits[t * Vp];
    const bool heavy = L.local_len(L.owner_of(int(t % T))) * N > T;
    targets[t] = int((heavy ? std::min_element(l, l + V) : std::max_element(l, l + V)) - l);
  }
  // A parameter only position 0 uses (a learned position embedding row): X there, 0 elsewhere.
  // The per-rank-mean seed scales the dloss of its tokens by T / (N * Tl) = 13/15 (rank 0
  // holds 5) on any data, so its gradient misses by 2/15.
  std::vector<double> X0(X.size(), 0.0);
  for (int b = 0; b < B; b++)
    std::copy_n(X.begin() + size_t(b) * T * Vp, Vp, X0.begin() + size_t(b) * T * Vp);
  // A replicated parameter whose gradient is sum over tokens and vocab of dlogits o X.
  auto param_grad = [&](const std::vector<double>& dl, const std::vector<double>& x) {
    double g = 0;
    for (size_t i = 0; i < dl.size(); i++) g += dl[i] * x[i];
    return g;
  };

  // One GPU: mean over B*T tokens, dloss = 1 / (B*T).
  std::vector<double> losses(size_t(B) * T), dlogits(logits.size());
  classifier_ref(losses.data(), dlogits.data(), logits.data(), targets.data(),
                 float(1.0 / (B * T)), B * T, V, Vp);
  double mean = 0;
  for (double l : losses) mean += l;
  mean /= B * T;
  const double grad = param_grad(dlogits, X), grad0 = param_grad(dlogits, X0);

  // cp ranks: local rows, dloss = cp_token_dloss, the mean of the ranks' cp_loss_share,
  // gradients averaged over the group (as the dp x cp all-reduce will).
  std::vector<double> sums(N), rank_means(N);
  double cp_mean = 0;
  double grad_avg = 0, grad0_wrong = 0;
  for (int r = 0; r < N; r++) {
    const int Tl = L.local_len(r);
    std::vector<double> lg(size_t(B) * Tl * Vp), x(lg.size()), x0(lg.size()), dl(lg.size()),
        ls(size_t(B) * Tl);
    std::vector<int> tg(size_t(B) * Tl);
    cp_scatter(lg.data(), logits.data(), L, r, B, Vp);
    cp_scatter(x.data(), X.data(), L, r, B, Vp);
    cp_scatter(x0.data(), X0.data(), L, r, B, Vp);
    cp_scatter(tg.data(), targets.data(), L, r, B, 1);
    classifier_ref(ls.data(), dl.data(), lg.data(), tg.data(), cp_token_dloss(N, B, T, 1), B * Tl,
                   V, Vp);
    for (double l : ls) sums[r] += l;
    rank_means[r] = sums[r] / (B * Tl);
    cp_mean += cp_loss_share(sums[r], N, B, T) / N;
    grad_avg += param_grad(dl, x) / N;
    // The tempting wrong seed: each rank's own mean, dloss = 1 / (B*Tl).
    std::vector<double> dl_wrong(lg.size());
    classifier_ref(ls.data(), dl_wrong.data(), lg.data(), tg.data(), float(1.0 / (B * Tl)),
                   B * Tl, V, Vp);
    grad0_wrong += param_grad(dl_wrong, x0) / N;
  }
  const double mean_of_means = (rank_means[0] + rank_means[1] + rank_means[2]) / N;
  std::printf("  loss: one GPU %.12f  cp %.12f  mean of rank means %.12f (wrong)\n", mean, cp_mean,
              mean_of_means);
  std::printf("  grad: one GPU %.12f  cp %.12f | position 0's parameter: one GPU %.12f  "
              "per-rank-mean seed %.12f (wrong)\n", grad, grad_avg, grad0, grad0_wrong);
  EXPECT_NEAR(cp_mean, mean, 1e-12);
  // dloss is a float: its rounding (~6e-8 relative) bounds the gradient match.
  EXPECT_NEAR(grad_avg, grad, 1e-6 * std::fabs(grad));
  // The checks can fail: the wrong rules miss by much more than the tolerances.
  EXPECT_GT(std::fabs(mean_of_means - mean), 1e-6);
  EXPECT_GT(std::fabs(grad0_wrong - grad0), 1e-3 * std::fabs(grad0));
}

// The ring's per-rank times (train --bench --cp prints them): add() sums reads of any step
// count, the summary divides by the number of training steps summed.
TEST(ContextParallel, RingTimesSumAndSummary) {
  RingStepTimes a, b;
  a.fwd_ms = {10, 20};
  a.bwd_ms = {30, 40};
  a.kv_wait_ms = 1;
  a.dkv_wait_ms = 2;
  b.fwd_ms = {10, 20, 5};
  b.bwd_ms = {30};
  b.dkv_wait_ms = 4;
  a.add(b);
  EXPECT_EQ(a.fwd_ms, (std::vector<double>{20, 40, 5}));
  EXPECT_EQ(a.bwd_ms, (std::vector<double>{60, 40}));
  EXPECT_DOUBLE_EQ(a.wait_ms(), 7.0);
  EXPECT_EQ(ring_times_summary(a, 2),
            "attention per ring step: fwd [10.0, 20.0, 2.5] ms, bwd [30.0, 20.0] ms | waits: K/V "
            "0.5 ms, dK/dV 3.0 ms");
}
