// ref_check.h — how the CPU reference ops (kernels/*.h) are checked (test_kernels_ref.cpp,
// test_kernels_ref_loss_optim.cpp): finite differences in double, direct formulas, and float
// results that must be the double ones rounded once. Random inputs come from test_rng()
// (tests/test_common.h: FLASHGPT_SEED repeats a run).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "tests/test_common.h"

namespace ref_check {

using Vec = std::vector<double>;
using VecF = std::vector<float>;
const double kNaN = std::numeric_limits<double>::quiet_NaN();

// Finite differences: step and tolerance. In double, a central difference with h = 1e-6 is
// off by about 1e-16 * |affected outputs| / h (rounding) + h^2 |f'''| / 6 (truncation), i.e.
// ~1e-9 for these O(1) functions (the worst seen over 500 seeds is 6e-8 relative); a wrong
// gradient (a missing term, a wrong index, = instead of +=) is off by 1e-3 or much more.
constexpr double kFdEps = 1e-6;
constexpr double kFdTol = 1e-6;
constexpr double kFdFloor = 1e-2;  // gradients smaller than this are compared in absolute terms

// ---- random inputs ---------------------------------------------------------------------------

inline Vec uniform(size_t n, std::mt19937_64& rng, double lo, double hi) {
  std::uniform_real_distribution<double> d(lo, hi);
  Vec v(n);
  for (double& x : v) x = d(rng);
  return v;
}

// Random floats, returned as doubles (exactly representable in float): the float and the
// double instantiations then see the same numbers.
inline Vec uniform_float_exact(size_t n, std::mt19937_64& rng, double lo, double hi) {
  Vec v = uniform(n, rng, lo, hi);
  for (double& x : v) x = (double)(float)x;
  return v;
}

inline std::vector<int> random_ints(size_t n, std::mt19937_64& rng, int lo, int hi_exclusive) {
  std::uniform_int_distribution<int> d(lo, hi_exclusive - 1);
  std::vector<int> v(n);
  for (int& x : v) x = d(rng);
  return v;
}

inline VecF to_float(const Vec& v) { return VecF(v.begin(), v.end()); }
inline Vec to_double(const VecF& v) { return Vec(v.begin(), v.end()); }

inline Vec minus(const Vec& a, const Vec& b) {
  Vec r(a.size());
  for (size_t i = 0; i < a.size(); i++) r[i] = a[i] - b[i];
  return r;
}

// ---- comparisons -----------------------------------------------------------------------------

// max_i |got_i - ref_i| / max(|got_i|, |ref_i|, floor); infinity if any value is NaN.
inline double max_rel_err(const Vec& got, const Vec& ref, double floor) {
  if (got.size() != ref.size()) return INFINITY;
  double worst = 0;
  for (size_t i = 0; i < got.size(); i++) {
    if (std::isnan(got[i]) || std::isnan(ref[i])) return INFINITY;
    if (got[i] == ref[i]) continue;
    double den = std::max({std::fabs(got[i]), std::fabs(ref[i]), floor});
    worst = std::max(worst, std::fabs(got[i] - ref[i]) / den);
  }
  return worst;
}

inline void expect_rel(const char* what, const Vec& got, const Vec& ref, double tol, double floor) {
  double err = max_rel_err(got, ref, floor);
  std::printf("    %-40s max rel err %.2e  (tol %.0e)\n", what, err, tol);
  EXPECT_LE(err, tol) << what;
}

// Analytic gradient vs finite differences.
inline void expect_grad(const char* what, const Vec& analytic, const Vec& numeric) {
  expect_rel(what, analytic, numeric, kFdTol, kFdFloor);
}

// Central differences of L(x) = sum_j dout_j * forward(x)_j with respect to every element of
// x (x is restored):
//   g_i = sum_j dout_j * (forward(x + h e_i)_j - forward(x - h e_i)_j) / (2h)
// Differencing the outputs before summing lets the outputs that do not depend on x_i cancel
// exactly, so only the affected ones contribute rounding error.
inline Vec numerical_grad(Vec& x, const Vec& dout, const std::function<Vec()>& forward) {
  Vec g(x.size());
  for (size_t i = 0; i < x.size(); i++) {
    double xi = x[i], hi = xi + kFdEps, lo = xi - kFdEps;
    x[i] = hi;
    Vec fp = forward();
    x[i] = lo;
    Vec fm = forward();
    x[i] = xi;
    double d = 0;
    for (size_t j = 0; j < fp.size(); j++) d += dout[j] * (fp[j] - fm[j]);
    g[i] = d / (hi - lo);
  }
  return g;
}

// Float vs double: each float result must be within (half a float ulp + slack) of the double
// result, i.e. |f - d| <= 0.5 * FLT_EPSILON * |d| (1 + 1e-6) + abs_floor. A result that is
// the double one rounded once to float passes; a float-accumulated sum does not.
inline void expect_rounded_once(const char* what, const VecF& f, const Vec& d, double abs_floor = 0) {
  ASSERT_EQ(f.size(), d.size()) << what;
  double worst = 0;  // in units of half an ulp at |d|
  for (size_t i = 0; i < f.size(); i++) {
    double half_ulp = 0.5 * FLT_EPSILON * std::fabs(d[i]) * (1 + 1e-6) + abs_floor;
    double e = std::fabs((double)f[i] - d[i]);
    double r = half_ulp > 0 ? e / half_ulp : (e == 0 ? 0 : INFINITY);
    if (std::isnan(f[i]) || std::isnan(d[i])) r = INFINITY;
    worst = std::max(worst, r);
  }
  std::printf("    %-40s max |f-d| / (half float ulp) %.3f  (tol 1)\n", what, worst);
  EXPECT_LE(worst, 1.0) << what;
}

// Absolute slack for sums over ~1000 O(1) terms, which two double summation orders may
// differ by (~1e-13); far below the float rounding of a sum accumulated in float (~1e-6).
constexpr double kSumFloor = 1e-12;

// ---- direct formulas used as independent references ------------------------------------------

inline double gelu_direct(double x) {
  const double pi = 3.14159265358979323846;
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / pi) * (x + 0.044715 * x * x * x)));
}

// out = inp @ weight^T + bias, naive triple loop in long double.
inline Vec matmul_naive(const Vec& inp, const Vec& w, const Vec* bias, int N, int C, int OC) {
  Vec out((size_t)N * OC);
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) {
      long double s = bias ? (*bias)[o] : 0.0;
      for (int c = 0; c < C; c++) s += (long double)inp[(size_t)n * C + c] * w[(size_t)o * C + c];
      out[(size_t)n * OC + o] = (double)s;
    }
  return out;
}

}  // namespace ref_check
