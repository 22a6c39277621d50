// test_common.h — what the CPU and the GPU tests share (no CUDA here):
//   base_seed()     this iteration's seed: FLASHGPT_SEED=<n> from the environment, else a fresh
//                   random one; --gtest_repeat=N draws a new seed for each further iteration
//                   (tests/main.cpp). Each seed is printed as "[ seed     ] FLASHGPT_SEED=<n>"
//                   before its iteration, and SEED_TRACE() names it in every failure of a test,
//                   so any iteration can be repeated alone with FLASHGPT_SEED=<n>.
//   test_rng()      a generator per test: the seed mixed with the test's name (so a test's
//                   inputs do not depend on which tests ran before it).
//   iteration_rng() a generator shared by a file's helpers (fresh inputs for every check),
//                   re-seeded at the start of every test, from the seed and the test's name
//                   (so FLASHGPT_SEED=<n> --gtest_filter=<test> repeats a test's inputs alone).
//   bf16_round      float -> the nearest bf16 (ties to even), as __float2bfloat16_rn; NaN stays.
//   qkv_heads       the elements of a qkv-shaped array (dqkv) of some heads (dQ, dK or dV).
//   expect_close    relative L2 error and max error (relative to max|ref|) against tolerances,
//                   one printed line per check with each error as a percentage of its tolerance.
//   expect_calibrated  the self-calibrating rule of the bf16 attention checks (see there).
//   Every check notes the share of its tolerance it used; tests/main.cpp prints the largest
//   share of each test ("[ tol      ] <test> <share>% of tolerance"), which the GPU stress run
//   (scripts/gpu_stress.sh) sums up per suite.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention/backends.h"  // AttnShape

namespace test_seed {
inline uint64_t& current() {
  static uint64_t seed = 0;
  return seed;
}
inline uint64_t& generation() {  // how many times a seed was set (iteration_rng re-seeds on it)
  static uint64_t n = 0;
  return n;
}
inline void set(uint64_t seed) {
  current() = seed;
  generation()++;
}
// The next iteration's seed from this one: splitmix64's mixing step (a bijection of 64-bit
// values, so the next seed never equals this one).
inline uint64_t next(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
// Called by tests/main.cpp before each iteration: the first takes FLASHGPT_SEED or a random
// seed, each further one the next seed; printed either way.
inline void start_iteration(int iteration) {
  if (iteration == 0) {
    const char* env = std::getenv("FLASHGPT_SEED");
    set(env ? std::strtoull(env, nullptr, 10)
            : (uint64_t)std::random_device{}() << 32 ^ std::random_device{}());
  } else {
    set(next(current()));
  }
  std::printf("[ seed     ] FLASHGPT_SEED=%llu repeats this iteration's random inputs\n",
              (unsigned long long)current());
  std::fflush(stdout);
}
}  // namespace test_seed

inline uint64_t base_seed() { return test_seed::current(); }
#define SEED_TRACE() SCOPED_TRACE("FLASHGPT_SEED=" + std::to_string(base_seed()))

// The running test's full name ("" outside a test).
inline std::string current_test_name() {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return info ? std::string(info->test_suite_name()) + "." + info->name() : std::string();
}

inline std::mt19937_64 test_rng() {
  return std::mt19937_64(base_seed() ^ std::hash<std::string>{}(current_test_name()));
}

// One generator per salt, seeded with base_seed() ^ salt ^ hash(the test's name) at the first
// draw of each test and whenever a seed is set (each --gtest_repeat iteration): a test's inputs
// are those of a run with its seed, whichever tests ran before it.
inline std::mt19937_64& iteration_rng(uint64_t salt) {
  struct Seeded {
    uint64_t generation = 0;  // 0: never seeded (test_seed::set counts from 1)
    const ::testing::TestInfo* test = nullptr;
    std::mt19937_64 gen;
  };
  static std::map<uint64_t, Seeded> gens;
  Seeded& g = gens[salt];
  const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
  if (g.generation != test_seed::generation() || g.test != test)
    g = {test_seed::generation(), test,
         std::mt19937_64(base_seed() ^ salt ^ std::hash<std::string>{}(current_test_name()))};
  return g.gen;
}

// The share of its tolerance a check used (error / tolerance; infinity for NaN). Each check
// notes it; tests/main.cpp prints the largest of each test and resets it.
inline double& worst_tolerance_share() {
  static double worst = 0;
  return worst;
}
inline void note_tolerance_share(double err, double tol) {
  const double share = std::isnan(err) ? INFINITY : tol > 0 ? err / tol : (err == 0 ? 0 : INFINITY);
  worst_tolerance_share() = std::max(worst_tolerance_share(), share);
}
// EXPECT_LE(err, tol) that also notes the share of the tolerance used.
inline double noted_error(double err, double tol) {
  note_tolerance_share(err, tol);
  return err;
}
#define EXPECT_WITHIN(err, tol) EXPECT_LE(noted_error((err), (tol)), (tol))

inline float bf16_round(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return x;  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  float y;
  std::memcpy(&y, &u, 4);
  return y;
}

// ||got - ref|| / ||ref|| <= tol_l2 and max|got - ref| / max|ref| <= tol_max, no NaN/Inf in got.
// ref_floor > 0: errors relative to max(|ref|, ref_floor) per element scale, for outputs that
// cross zero by cancellation of O(ref_floor) terms (a lone element there has no relative scale).
inline void expect_close(const std::string& what, const std::vector<float>& got,
                         const std::vector<float>& ref, double tol_l2, double tol_max,
                         double ref_floor = 0) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  double num = 0, den = 0, maxerr = 0, maxref = 0;
  size_t bad = 0, first_bad = 0;
  for (size_t i = 0; i < got.size(); i++) {
    if (!std::isfinite(got[i])) {
      if (bad++ == 0) first_bad = i;
      continue;
    }
    const double e = (double)got[i] - ref[i];
    num += e * e;
    den += (double)ref[i] * ref[i];
    maxerr = std::max(maxerr, std::fabs(e));
    maxref = std::max(maxref, (double)std::fabs(ref[i]));
  }
  den = std::max(den, ref_floor * ref_floor * (double)got.size());
  maxref = std::max(maxref, ref_floor);
  const double l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  const double mx = maxref > 0 ? maxerr / maxref : maxerr;
  std::printf("  %-34s n=%-8zu rel_l2=%.2e (tol %.0e, %5.1f%%)  max=%.2e (tol %.0e, %5.1f%%)\n",
              what.c_str(), got.size(), l2, tol_l2, 100 * l2 / tol_l2, mx, tol_max,
              100 * mx / tol_max);
  note_tolerance_share(bad ? NAN : l2, tol_l2);
  note_tolerance_share(mx, tol_max);
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " non-finite elements, first at " << first_bad
                     << " (unwritten, or NaN/Inf produced)";
  EXPECT_LE(l2, tol_l2) << what;
  EXPECT_LE(mx, tol_max) << what;
}

// Errors of got against ref over the elements pick(i) selects: the L2 norms of the difference
// and of ref, the largest difference, and whether got is finite there.
struct ErrorStats {
  double l2 = 0, ref_l2 = 0, max = 0;
  size_t n = 0;
  bool finite = true;
};
template <typename Pick>
ErrorStats error_stats(const std::vector<float>& got, const std::vector<float>& ref, Pick pick) {
  ErrorStats e;
  for (size_t i = 0; i < ref.size(); i++) {
    if (!pick(i)) continue;
    if (!std::isfinite(got[i])) e.finite = false;
    const double d = double(got[i]) - ref[i];
    e.l2 += d * d;
    e.ref_l2 += double(ref[i]) * ref[i];
    e.max = std::max(e.max, std::fabs(d));
    e.n++;
  }
  e.l2 = std::sqrt(e.l2);
  e.ref_l2 = std::sqrt(e.ref_l2);
  return e;
}
inline ErrorStats error_stats(const std::vector<float>& got, const std::vector<float>& ref) {
  return error_stats(got, ref, [](size_t) { return true; });
}

// Elements of a (B, T, NH + 2*NKV, HS) qkv-shaped array (dqkv) that belong to heads [h0, h1)
// of every token: [0, NH) the queries, [NH, NH + NKV) the keys, then the values.
inline std::vector<float> qkv_heads(const std::vector<float>& x, const AttnShape& s, int h0,
                                    int h1) {
  const size_t H3 = size_t(s.NH) + 2 * s.NKV, tokens = size_t(s.B) * s.T;
  std::vector<float> r;
  r.reserve(tokens * (h1 - h0) * s.HS);
  for (size_t t = 0; t < tokens; ++t)
    r.insert(r.end(), x.begin() + (t * H3 + h0) * s.HS, x.begin() + (t * H3 + h1) * s.HS);
  return r;
}

// u: the largest relative error of one rounding to bf16 (8 significant bits, to nearest).
constexpr double kBf16Unit = 1.0 / 256;

// The floor of the self-calibrating rule for one tensor: the first-order bound on one output
// row's error when the values that feed it are rounded to bf16 (each output element's own
// rounding and the intermediates'), the largest over the tensor's rows, in L2 norm and in max
// norm. The baseline knows its intermediates and computes it (plain_bf16_attention.h); for an
// elementwise op it is the rounding of the largest output.
struct RoundingFloor {
  double l2 = 0, max = 0;
};

// The self-calibrating rule of the bf16 checks (DESIGN.md), for one tensor (out, dQ, dK, dV):
//   ||got - ref||_2 <= 2 ||base - ref||_2 + floor.l2
//   max|got - ref|  <= 2 max|base - ref|  + floor.max
// ref: an fp32/double reference; base: a plain bf16 implementation of the same maths (or the
// reference rounded to floatX); floor: RoundingFloor.
// Why every correct bf16 kernel passes on every seed, and a wrong one fails:
//  * Each error is a sum of contributions, one per value rounded to bf16 (S, P, dP, D, dS, the
//    outputs), each at most u |value| times that value's weight in the tensor. The kernel and
//    the baseline round at different points: their errors are different draws of sums of the
//    same kind.
//  * With many comparable contributions (most shapes) each norm concentrates near its expected
//    size, and twice the baseline's covers a kernel that rounds about as much as the baseline.
//  * With a few dominant ones (query rows that see 1 to 4 keys: T = 4 in the ring tests, and the
//    first rows of every causal problem), a norm is as large as those few roundings happened to
//    make it: for a correct attention with flash's rounding points, 2x alone fails 3 to 5 seeds
//    in 100 at T = 4 (ToleranceRule.AcceptsFlashRounding, tests/cpu/test_tolerance_rule.cpp,
//    prints the count). The floor is the sum of the few contributions such a row has, each at
//    its bound: it absorbs such a draw (in 77 runs of 2000 problems at T = 4 the worst was 97%
//    of the tolerance; with the largest single contribution as the floor, 2 of 24 runs failed,
//    at 109% and 115%), and it stays small beside the 2x term where contributions are many.
//  * A wrong result errs by a whole term somewhere (a missing term, a swapped row, a wrong scale
//    or mask): many roundings' worth. test_tolerance_rule.cpp checks that such results fail at
//    T = 4 and T = 1000.
struct CalibratedCheck {
  ErrorStats got, base;
  double l2_tol = 0, max_tol = 0;
  double share() const {  // the larger of the two errors as a fraction of its tolerance
    if (!got.finite || std::isnan(got.l2) || std::isnan(got.max)) return INFINITY;
    return std::max(got.l2 / l2_tol, got.max / max_tol);
  }
  bool passed() const { return share() <= 1.0; }
};
template <typename Pick>
CalibratedCheck calibrated_check(const std::vector<float>& got, const std::vector<float>& base,
                                 const std::vector<float>& ref, RoundingFloor floor, Pick pick) {
  CalibratedCheck c;
  c.got = error_stats(got, ref, pick);
  c.base = error_stats(base, ref, pick);
  c.l2_tol = 2.0 * c.base.l2 + floor.l2;
  c.max_tol = 2.0 * c.base.max + floor.max;
  return c;
}
inline CalibratedCheck calibrated_check(const std::vector<float>& got,
                                        const std::vector<float>& base,
                                        const std::vector<float>& ref, RoundingFloor floor) {
  return calibrated_check(got, base, ref, floor, [](size_t) { return true; });
}

// calibrated_check as a test expectation: one printed line with each error as a percentage of
// its tolerance. An all-zero reference (dQ at T = 1) is compared in absolute terms.
template <typename Pick>
void expect_calibrated(const std::string& what, const std::vector<float>& got,
                       const std::vector<float>& base, const std::vector<float>& ref,
                       RoundingFloor floor, Pick pick) {
  const CalibratedCheck c = calibrated_check(got, base, ref, floor, pick);
  const ErrorStats& e = c.got;
  const double norm = e.ref_l2 > 0 ? e.ref_l2 : 1.0;
  std::printf("  %-30s n=%-9zu %s L2 %.3e (base %.3e) %5.1f%% of tol | max %.3e (base %.3e) "
              "%5.1f%% of tol\n",
              what.c_str(), e.n, e.ref_l2 > 0 ? "rel" : "abs", e.l2 / norm, c.base.l2 / norm,
              100 * e.l2 / c.l2_tol, e.max, c.base.max, 100 * e.max / c.max_tol);
  note_tolerance_share(e.l2, c.l2_tol);
  note_tolerance_share(e.max, c.max_tol);
  EXPECT_TRUE(e.finite) << what << ": NaN/Inf in the output (unwritten element?)";
  EXPECT_LE(e.l2, c.l2_tol) << what << ": L2 error above 2x the baseline's + the rounding floor";
  EXPECT_LE(e.max, c.max_tol) << what << ": max error above 2x the baseline's + the rounding floor";
}
inline void expect_calibrated(const std::string& what, const std::vector<float>& got,
                              const std::vector<float>& base, const std::vector<float>& ref,
                              RoundingFloor floor) {
  expect_calibrated(what, got, base, ref, floor, [](size_t) { return true; });
}

// max_i |got_i - ref_i|; infinity where got is not finite (an element left unwritten).
inline double max_abs_error(const std::vector<float>& got, const std::vector<float>& ref) {
  double w = 0;
  for (size_t i = 0; i < got.size(); i++)
    w = std::isfinite(got[i]) ? std::max(w, std::fabs(double(got[i]) - ref[i])) : INFINITY;
  return w;
}

// max_i |got_i - ref_i| / max(|ref_i|, floor); infinity on NaN.
inline double max_rel_error(const std::vector<double>& got, const std::vector<double>& ref,
                            double floor = 1.0) {
  double w = 0;
  for (size_t i = 0; i < got.size(); i++) {
    const double e = std::fabs(got[i] - ref[i]);
    if (std::isnan(e)) return INFINITY;
    w = std::max(w, e / std::max(std::fabs(ref[i]), floor));
  }
  return w;
}
// err <= tol, printed with the context and as a percentage of tol.
inline void expect_le(const char* what, const std::string& ctx, double err, double tol) {
  std::printf("  %-34s %-48s err %.2e  tol %.0e (%5.1f%% of tol)\n", what, ctx.c_str(), err, tol,
              tol > 0 ? 100.0 * err / tol : (err == 0 ? 0.0 : INFINITY));
  note_tolerance_share(err, tol);
  EXPECT_LE(err, tol) << what << " " << ctx;
}
