// test_common.h — what the CPU and the GPU tests share (no CUDA here):
//   base_seed()     FLASHGPT_SEED=<n> from the environment, else a fresh random seed; printed
//                   once per binary, and SEED_TRACE() names it in every failure of a test, so
//                   any run can be repeated exactly.
//   test_rng()      a generator per test: the base seed mixed with the test's name (so a test's
//                   inputs do not depend on which tests ran before it).
//   bf16_round      float -> the nearest bf16 (ties to even), as __float2bfloat16_rn; NaN stays.
//   expect_close    relative L2 error and max error (relative to max|ref|) against tolerances,
//                   one printed line per check with each error as a percentage of its tolerance.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

inline uint64_t base_seed() {
  static const uint64_t seed = [] {
    const char* env = std::getenv("FLASHGPT_SEED");
    const uint64_t s = env ? std::strtoull(env, nullptr, 10) : (uint64_t)std::random_device{}();
    std::printf("[ seed     ] FLASHGPT_SEED=%llu repeats this run's random inputs\n",
                (unsigned long long)s);
    return s;
  }();
  return seed;
}
#define SEED_TRACE() SCOPED_TRACE("FLASHGPT_SEED=" + std::to_string(base_seed()))

inline std::mt19937_64 test_rng() {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string name = std::string(info->test_suite_name()) + "." + info->name();
  return std::mt19937_64(base_seed() ^ std::hash<std::string>{}(name));
}

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

// DESIGN.md's self-calibrating rule: a kernel's error against the reference may be at most that
// of a baseline (a plain bf16 implementation, or the reference rounded to floatX) against the
// same reference, times 2 in L2 and max_factor in max error, plus a tiny absolute floor:
//   ||got - ref|| <= 2 ||base - ref|| + 1e-5 sqrt(n),  max|got - ref| <= F max|base - ref| + 1e-5
// One printed line with each error as a percentage of its tolerance.
template <typename Pick>
void expect_calibrated(const std::string& what, const std::vector<float>& got,
                       const std::vector<float>& base, const std::vector<float>& ref,
                       double max_factor, Pick pick) {
  const ErrorStats e = error_stats(got, ref, pick), eb = error_stats(base, ref, pick);
  const double l2_tol = 2.0 * eb.l2 + 1e-5 * std::sqrt(double(e.n));
  const double max_tol = max_factor * eb.max + 1e-5;
  const double norm = e.ref_l2 > 0 ? e.ref_l2 : 1.0;  // absolute where ref is exactly zero
  std::printf("  %-30s n=%-9zu %s L2 %.3e (base %.3e) %5.1f%% of tol | max %.3e (base %.3e) "
              "%5.1f%% of tol\n",
              what.c_str(), e.n, e.ref_l2 > 0 ? "rel" : "abs", e.l2 / norm, eb.l2 / norm,
              100 * e.l2 / l2_tol, e.max, eb.max, 100 * e.max / max_tol);
  EXPECT_TRUE(e.finite) << what << ": NaN/Inf in the output (unwritten element?)";
  EXPECT_LE(e.l2, l2_tol) << what << ": L2 error above 2x the baseline's";
  EXPECT_LE(e.max, max_tol) << what << ": max error above " << max_factor << "x the baseline's";
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
  EXPECT_LE(err, tol) << what << " " << ctx;
}
