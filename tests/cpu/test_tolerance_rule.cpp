// test_tolerance_rule — the self-calibrating rule of the bf16 attention checks
// (calibrated_check, tests/test_common.h; its floor from plain_bf16_attention.h), on the CPU:
//
//   ToleranceRule.AcceptsFlashRounding  a correct bf16 attention that rounds where flash's
//       kernels do (below) passes the rule for out, dQ, dK, dV on 2000 seeds at the ring tests'
//       tiny shapes and 50 at T = 17 and 64. Without the floor, 2x the baseline's error alone
//       fails 3 to 5 seeds in 100 at T = 4 (the count is printed).
//   ToleranceRule.RejectsWrongResults   the same correct result made wrong, at T = 4 and
//       T = 1000: the element with the largest terms off by 10% of them, two rows swapped, every
//       value too large by a wrong scale (3% at T = 1000, 25% at T = 4); each must fail where it
//       errs by 3% of the tensor's largest terms (the one element always, the scale at T = 1000
//       always: see the test), the correct one must pass.
//   ToleranceRule.BaselineTakesTheMask  the baseline with a document mask and a window: within
//       bf16 rounding of the masked oracle, far from the causal one.
//   TestSeeds.IterationSeedRepeatsInputs  what --gtest_repeat relies on (tests/main.cpp): each
//       iteration's seed is new, and iteration_rng() and test_rng() give the inputs a run
//       started with that seed (FLASHGPT_SEED) would give.
//   TestSeeds.SharedGeneratorStartsFreshInEachTest*  iteration_rng() starts each test from the
//       seed and the test's name, whatever the tests before it drew.
//
// Flash's rounding points (kernels/attention/flash*.cu; FlashAttention-2, Dao 2023): S in fp32,
// the un-normalised P~ = exp(S - m) rounded to bf16 for P~V, O = (P~V) / l rounded to bf16 with
// l the fp32 sum of P~; backward: D = rowsum(dO * O) from the bf16 O, P = exp(S - LSE) in fp32,
// rounded to bf16 for dV += P^T dO, dP = dO V^T in fp32, dS = P (dP - D) rounded to bf16 for
// dQ and dK; fp32 accumulators, each output rounded once. The baseline rounds elsewhere (S, the
// normalised P, dP; D from its own P and dP), which is what makes the two errors independent
// draws.
//
// Run: make test-cpu, or build/test_cpu --gtest_filter='ToleranceRule*:TestSeeds*'
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/attention/attention_ref.h"
#include "tests/gpu/plain_bf16_attention.h"
#include "tests/test_common.h"

namespace {

using VecF = std::vector<float>;

// Causal attention forward and backward with flash's rounding points (see the file comment).
// Layout as attention_ref.h; inputs already bf16. out_mag, dqkv_mag: each element's terms before
// they cancel, in magnitude: sum_u P~_u |v_u| / l for O; sum P_u (|dP_u| + |D|) |k_u| scale for
// dQ (|q_t| for dK), the terms of dS = P (dP - D) taken apart; sum P_t |dO_t| for dV. A rounding
// anywhere in an element is a fraction of these, whatever the element's own size.
void flash_rounding_attention(VecF& out, VecF& dqkv, VecF& out_mag, VecF& dqkv_mag,
                              const VecF& qkv, const VecF& dout, const AttnShape& s) {
  const int T = s.T, NH = s.NH, NKV = s.NKV, HS = s.HS, G = NH / NKV;
  const size_t H3 = size_t(NH) + 2 * NKV;
  const float scale = float(1.0 / std::sqrt(double(HS)));
  auto at = [&](int b, int t, int head) { return &qkv[((size_t(b) * T + t) * H3 + head) * HS]; };
  out.assign(size_t(s.B) * T * NH * HS, 0.f);
  dqkv.assign(size_t(s.B) * T * H3 * HS, 0.f);
  out_mag.assign(out.size(), 0.f);
  dqkv_mag.assign(dqkv.size(), 0.f);
  std::vector<float> dk(size_t(T) * HS), dv(size_t(T) * HS), S(T), P(T), dq(HS), acc(HS);
  std::vector<double> dk_mag(size_t(T) * HS), dv_mag(size_t(T) * HS), dq_mag(HS), acc_mag(HS);
  for (int b = 0; b < s.B; b++)
    for (int g = 0; g < NKV; g++) {
      std::fill(dk.begin(), dk.end(), 0.f);
      std::fill(dv.begin(), dv.end(), 0.f);
      std::fill(dk_mag.begin(), dk_mag.end(), 0.0);
      std::fill(dv_mag.begin(), dv_mag.end(), 0.0);
      for (int h = g * G; h < (g + 1) * G; h++)
        for (int t = 0; t < T; t++) {
          const float* q = at(b, t, h);
          float m = -INFINITY, l = 0;
          for (int u = 0; u <= t; u++) {
            float dot = 0;
            for (int d = 0; d < HS; d++) dot += q[d] * at(b, u, NH + g)[d];
            S[u] = dot * scale;
            m = std::max(m, S[u]);
          }
          std::fill(acc.begin(), acc.end(), 0.f);
          std::fill(acc_mag.begin(), acc_mag.end(), 0.0);
          for (int u = 0; u <= t; u++) {
            const float p = std::exp(S[u] - m);
            l += p;
            const float pb = bf16_round(p);
            for (int d = 0; d < HS; d++) {
              acc[d] += pb * at(b, u, NH + NKV + g)[d];
              acc_mag[d] += std::fabs(double(pb) * at(b, u, NH + NKV + g)[d]);
            }
          }
          float* o = &out[((size_t(b) * T + t) * NH + h) * HS];
          float* o_mag = &out_mag[((size_t(b) * T + t) * NH + h) * HS];
          for (int d = 0; d < HS; d++) {
            o[d] = bf16_round(acc[d] / l);
            o_mag[d] = float(acc_mag[d] / l);
          }
          const float lse = m + std::log(l);
          const float* dO = &dout[((size_t(b) * T + t) * NH + h) * HS];
          float D = 0;
          for (int d = 0; d < HS; d++) D += dO[d] * o[d];
          std::fill(dq.begin(), dq.end(), 0.f);
          std::fill(dq_mag.begin(), dq_mag.end(), 0.0);
          for (int u = 0; u <= t; u++) {
            P[u] = std::exp(S[u] - lse);
            const float* v = at(b, u, NH + NKV + g);
            float dP = 0;
            for (int d = 0; d < HS; d++) dP += dO[d] * v[d];
            const float pb = bf16_round(P[u]), ds = bf16_round(P[u] * (dP - D));
            const double ds_mag = double(P[u]) * (std::fabs(dP) + std::fabs(D));
            const float* k = at(b, u, NH + g);
            for (int d = 0; d < HS; d++) {
              dq[d] += ds * k[d];
              dk[size_t(u) * HS + d] += ds * q[d];
              dv[size_t(u) * HS + d] += pb * dO[d];
              dq_mag[d] += ds_mag * std::fabs(k[d]);
              dk_mag[size_t(u) * HS + d] += ds_mag * std::fabs(q[d]);
              dv_mag[size_t(u) * HS + d] += std::fabs(double(P[u]) * dO[d]);
            }
          }
          float* dqo = &dqkv[((size_t(b) * T + t) * H3 + h) * HS];
          float* dqo_mag = &dqkv_mag[((size_t(b) * T + t) * H3 + h) * HS];
          for (int d = 0; d < HS; d++) {
            dqo[d] = bf16_round(dq[d] * scale);
            dqo_mag[d] = float(dq_mag[d] * scale);
          }
        }
      for (int u = 0; u < T; u++) {
        float* dko = &dqkv[((size_t(b) * T + u) * H3 + NH + g) * HS];
        float* dvo = &dqkv[((size_t(b) * T + u) * H3 + NH + NKV + g) * HS];
        float* dko_mag = &dqkv_mag[((size_t(b) * T + u) * H3 + NH + g) * HS];
        float* dvo_mag = &dqkv_mag[((size_t(b) * T + u) * H3 + NH + NKV + g) * HS];
        for (int d = 0; d < HS; d++) {
          dko[d] = bf16_round(dk[size_t(u) * HS + d] * scale);
          dvo[d] = bf16_round(dv[size_t(u) * HS + d]);
          dko_mag[d] = float(dk_mag[size_t(u) * HS + d] * scale);
          dvo_mag[d] = float(dv_mag[size_t(u) * HS + d]);
        }
      }
    }
}

// One problem's four tensors: the correct bf16 result, the baseline, the reference, the floor,
// and the magnitude of each element's terms (flash_rounding_attention).
struct Tensors {
  VecF got, base, ref;
  RoundingFloor floor;
  VecF mag;
};
struct Problem {
  AttnShape s;
  std::vector<Tensors> parts;  // out, dQ, dK, dV
};
const char* const kParts[4] = {"out", "dQ", "dK", "dV"};

Problem make_problem(const AttnShape& s, std::mt19937_64& rng) {
  std::normal_distribution<float> nd(0.f, 1.f);
  VecF qkv(size_t(s.B) * s.T * (s.NH + 2 * s.NKV) * s.HS), dout(size_t(s.B) * s.T * s.NH * s.HS);
  for (float& x : qkv) x = bf16_round(nd(rng));
  for (float& x : dout) x = bf16_round(nd(rng));
  VecF ref_out(dout.size()), lse(size_t(s.B) * s.NH * s.T), ref_dqkv(qkv.size());
  attention_flash_forward_ref<float>(ref_out.data(), lse.data(), qkv.data(), s, 64, 64);
  attention_flash_backward_ref<float>(ref_dqkv.data(), dout.data(), qkv.data(), ref_out.data(),
                                      lse.data(), s, 64, 64);
  VecF base_out, base_dqkv, got_out, got_dqkv, mag_out, mag_dqkv;
  const AttentionFloors f = plain_bf16_attention(base_out, base_dqkv, qkv, dout, s);
  flash_rounding_attention(got_out, got_dqkv, mag_out, mag_dqkv, qkv, dout, s);
  Problem p{s, {}};
  p.parts.push_back({got_out, base_out, ref_out, f.out, mag_out});
  const int ranges[3][2] = {{0, s.NH}, {s.NH, s.NH + s.NKV}, {s.NH + s.NKV, s.NH + 2 * s.NKV}};
  const RoundingFloor floors[3] = {f.dq, f.dk, f.dv};
  for (int i = 0; i < 3; i++) {
    const int h0 = ranges[i][0], h1 = ranges[i][1];
    p.parts.push_back({qkv_heads(got_dqkv, s, h0, h1), qkv_heads(base_dqkv, s, h0, h1),
                       qkv_heads(ref_dqkv, s, h0, h1), floors[i], qkv_heads(mag_dqkv, s, h0, h1)});
  }
  return p;
}

std::string shape_name(const AttnShape& s) {
  return "B" + std::to_string(s.B) + "_T" + std::to_string(s.T) + "_NH" + std::to_string(s.NH) +
         "_NKV" + std::to_string(s.NKV) + "_HS" + std::to_string(s.HS);
}

TEST(ToleranceRule, AcceptsFlashRounding) {
  SEED_TRACE();
  std::mt19937_64 rng = test_rng();
  struct Sweep {
    AttnShape s;
    int seeds;
  };
  // The ring tests' tiny shapes (cp 2 at T 4, cp 3 at T 6), then the smallest AttentionGpu one.
  const Sweep sweeps[] = {{{1, 4, 2, 2, 64}, 2000},
                          {{1, 6, 2, 1, 128}, 2000},
                          {{3, 17, 6, 3, 64}, 50},
                          {{1, 64, 2, 2, 64}, 50}};
  for (const Sweep& w : sweeps) {
    double worst[4] = {0, 0, 0, 0};
    int fails = 0, fails_without_floor = 0;
    for (int i = 0; i < w.seeds; i++) {
      const Problem p = make_problem(w.s, rng);
      bool failed = false, failed_without_floor = false;
      for (int k = 0; k < 4; k++) {
        const Tensors& t = p.parts[k];
        const CalibratedCheck c = calibrated_check(t.got, t.base, t.ref, t.floor);
        worst[k] = std::max(worst[k], c.share());
        failed |= !c.passed();
        failed_without_floor |= c.got.l2 > 2 * c.base.l2 || c.got.max > 2 * c.base.max;
      }
      fails += failed;
      fails_without_floor += failed_without_floor;
    }
    std::printf("  %-22s %4d seeds: %d fail (without the floor: %d); worst share of tolerance "
                "out %.0f%% dQ %.0f%% dK %.0f%% dV %.0f%%\n",
                shape_name(w.s).c_str(), w.seeds, fails, fails_without_floor, 100 * worst[0],
                100 * worst[1], 100 * worst[2], 100 * worst[3]);
    for (int k = 0; k < 4; k++) note_tolerance_share(worst[k], 1.0);
    EXPECT_EQ(fails, 0) << shape_name(w.s);
  }
}

// The wrong versions of one problem's correct results (RejectsWrongResults): per tensor, the
// correct result's share of its tolerance, then each wrong version's share and its largest error
// against the tensor's largest terms (max |wrong - got| / max mag; u = 1/256 is one rounding's
// worth).
struct WrongResult {
  std::string what, how;
  double share, correct_share, of_terms;
  bool always;  // must fail whatever of_terms (else only where of_terms >= kHeldOfTerms)
};
constexpr double kHeldOfTerms = 0.03;  // ~8 roundings' worth (u = 1/256) of the largest terms
std::vector<WrongResult> wrong_results(const Problem& p) {
  const AttnShape& s = p.s;
  const float wrong_scale = s.T == 4 ? 1.25f : 1.03f;
  const std::string scale_name = s.T == 4 ? "every value x1.25" : "every value x1.03";
  const size_t row_len = s.HS;
  std::vector<WrongResult> r;
  for (int k = 0; k < 4; k++) {
    const Tensors& t = p.parts[k];
    const std::string what = shape_name(s) + " " + kParts[k];
    const double correct = calibrated_check(t.got, t.base, t.ref, t.floor).share();
    // The element whose terms are largest, off by a tenth of them; the rows of the first and
    // the last token of the first head (row 0 of dQ is zero: one key, dS = 0); every value.
    size_t top = 0;
    for (size_t i = 0; i < t.mag.size(); i++)
      if (t.mag[i] > t.mag[top]) top = i;
    const size_t rows_per_token = t.ref.size() / (size_t(s.T) * row_len);
    const size_t last = (size_t(s.T) - 1) * rows_per_token * row_len;
    VecF one = t.got, swapped = t.got, scaled = t.got;
    one[top] += 0.1f * t.mag[top];
    std::swap_ranges(swapped.begin(), swapped.begin() + row_len, swapped.begin() + last);
    for (float& x : scaled) x *= wrong_scale;
    // Always held: the one-element error (10% of the largest terms by construction) and, at
    // T = 1000, the wrong scale (its error is over every element, where the L2 norms concentrate).
    const struct {
      std::string how;
      const VecF* v;
      bool always;
    } wrong[3] = {{"one element +10% of its terms", &one, true},
                  {"rows of tokens 0 and T-1 swapped", &swapped, false},
                  {scale_name, &scaled, s.T > 4}};
    for (const auto& w : wrong) {
      double err = 0;
      for (size_t i = 0; i < t.got.size(); i++)
        err = std::max(err, std::fabs(double((*w.v)[i]) - t.got[i]));
      const double of_terms = t.mag[top] > 0 ? err / t.mag[top] : INFINITY;
      r.push_back({what, w.how, calibrated_check(*w.v, t.base, t.ref, t.floor).share(), correct,
                   of_terms, w.always});
    }
  }
  return r;
}

// A wrong version must fail where it errs by 3% of the tensor's largest terms somewhere; the
// one-element error (10% of them) always does, and so must a wrong scale at T = 1000. Results can
// be small beside their terms while their roundings are not: dQ and dK at T = 4, where
// dS = P (dP - D) cancels (an element moved by 10% of the largest result passed the rule on 112
// of 20000 seeds there, swapped rows on 18), and one row of dQ at T = 1000 (swapping it with the
// zero row 0 erred by 0.5-0.7% of the largest terms and read 99% and 82% of the tolerance on 2
// seeds of 80).
// Least share of a wrong version held to fail: 324% over 20000 seeds at T = 4, 150% over 60 at
// T = 1000 (dK's wrong scale). dQ's swapped rows at T = 1000 err by less than 3% on 59 of those
// 60: a row of dQ is small beside the terms of its 1000 keys, and so it is not held there.
TEST(ToleranceRule, RejectsWrongResults) {
  SEED_TRACE();
  std::mt19937_64 rng = test_rng();
  for (const AttnShape& s : {AttnShape{1, 4, 2, 2, 64}, AttnShape{1, 1000, 4, 2, 64}}) {
    const Problem p = make_problem(s, rng);
    int checked = 0;
    for (const WrongResult& w : wrong_results(p)) {
      EXPECT_LE(w.correct_share, 1.0) << w.what << ": the correct result";
      const bool held = w.always || w.of_terms >= kHeldOfTerms;
      std::printf("  %-26s %-34s share of tolerance %6.0f%% (correct: %3.0f%%), of its terms "
                  "%5.1f%%%s\n",
                  w.what.c_str(), w.how.c_str(), 100 * w.share, 100 * w.correct_share,
                  100 * w.of_terms, held ? "" : " (below 3%: not held to fail)");
      if (!held) continue;
      checked++;
      EXPECT_GT(w.share, 1.0) << w.what << ": " << w.how << " passed the rule";
    }
    EXPECT_GE(checked, 4) << shape_name(s) << ": the one-element error of each tensor";
  }
}

// The baseline with a mask (the GPU mask tests' baseline, tests/gpu/test_attention_mask.cu):
// within bf16 rounding of the masked oracle, and far from the causal one (the mask is applied).
TEST(ToleranceRule, BaselineTakesTheMask) {
  SEED_TRACE();
  std::mt19937_64 rng = test_rng();
  const AttnShape s{2, 200, 2, 1, 64};
  std::normal_distribution<float> nd(0.f, 1.f);
  VecF qkv(size_t(s.B) * s.T * (s.NH + 2 * s.NKV) * s.HS), dout(size_t(s.B) * s.T * s.NH * s.HS);
  for (float& x : qkv) x = bf16_round(nd(rng));
  for (float& x : dout) x = bf16_round(nd(rng));
  std::vector<int> tok(size_t(s.B) * s.T, 0);
  tok[50] = tok[130] = tok[131] = 1;  // sequence 0: documents from 50, 130, 131; sequence 1: one
  std::vector<int> doc_start = document_starts(tok.data(), s.B, s.T, 1);
  const AttnMask mask{doc_start.data(), 40};
  VecF P(size_t(s.B) * s.NH * s.T * s.T), ref_out(dout.size()), ref_dqkv(qkv.size()),
      causal_out(dout.size()), causal_dqkv(qkv.size()), base_out, base_dqkv;
  attention_naive_forward_ref<float>(ref_out.data(), P.data(), qkv.data(), s, mask);
  attention_naive_backward_ref<float>(ref_dqkv.data(), dout.data(), qkv.data(), P.data(), s, mask);
  attention_naive_forward_ref<float>(causal_out.data(), P.data(), qkv.data(), s);
  attention_naive_backward_ref<float>(causal_dqkv.data(), dout.data(), qkv.data(), P.data(), s);
  const AttentionFloors f = plain_bf16_attention(base_out, base_dqkv, qkv, dout, s, mask);
  const VecF* ref[2] = {&ref_out, &ref_dqkv};
  const VecF* causal[2] = {&causal_out, &causal_dqkv};
  const VecF* base[2] = {&base_out, &base_dqkv};
  for (int k = 0; k < 2; k++) {
    const ErrorStats e = error_stats(*base[k], *ref[k]), c = error_stats(*base[k], *causal[k]);
    std::printf("  %-4s baseline vs masked oracle rel L2 %.2e, vs causal oracle %.2e\n",
                k ? "dqkv" : "out", e.l2 / e.ref_l2, c.l2 / c.ref_l2);
    EXPECT_LT(e.l2, 1e-2 * e.ref_l2) << (k ? "dqkv" : "out");
    EXPECT_GT(c.l2, 0.1 * c.ref_l2) << (k ? "dqkv" : "out") << ": the mask made no difference";
  }
  for (const RoundingFloor& r : {f.out, f.dq, f.dk, f.dv}) {
    EXPECT_GT(r.l2, 0);
    EXPECT_TRUE(std::isfinite(r.l2) && std::isfinite(r.max));
  }
}

TEST(TestSeeds, IterationSeedRepeatsInputs) {
  const uint64_t run_seed = base_seed();
  auto draws = [] {
    std::mt19937_64& g = iteration_rng(0x5eed);
    std::mt19937_64 t = test_rng();
    return std::vector<uint64_t>{g(), g(), t(), t()};
  };
  test_seed::set(12345);
  const std::vector<uint64_t> first = draws();
  test_seed::set(test_seed::next(12345));  // the next iteration
  const std::vector<uint64_t> second = draws();
  test_seed::set(12345);  // a run started with FLASHGPT_SEED=12345
  const std::vector<uint64_t> again = draws();
  test_seed::set(run_seed);
  EXPECT_NE(test_seed::next(12345), 12345u);
  EXPECT_NE(first, second) << "a new iteration must draw new inputs";
  EXPECT_EQ(first, again) << "the seed alone must repeat an iteration's inputs";
}

// iteration_rng(salt) seeds itself from the seed, the salt and the running test's name, so a
// test's inputs do not depend on the tests before it, and FLASHGPT_SEED=<n>
// --gtest_filter=<test> repeats them alone. Two tests of one salt, in this order: the second
// fails if the first one's draws carried over.
void expect_fresh_shared_generator() {
  std::mt19937_64 expect(base_seed() ^ 0x5eed2 ^ std::hash<std::string>{}(current_test_name()));
  std::mt19937_64& g = iteration_rng(0x5eed2);
  for (int i = 0; i < 3; i++) EXPECT_EQ(g(), expect()) << "draw " << i;
}
TEST(TestSeeds, SharedGeneratorStartsFreshInEachTest1) { expect_fresh_shared_generator(); }
TEST(TestSeeds, SharedGeneratorStartsFreshInEachTest2) { expect_fresh_shared_generator(); }

}  // namespace
