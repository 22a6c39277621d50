// test_layers.cpp — checks of the CPU reference ops (kernels/*_ref), the oracles of the CUDA
// kernels:
//   * every backward against central finite differences of its forward, in double;
//   * every forward against a direct formula written here;
//   * accumulate (+=) outputs pre-filled with random values, overwritten (=) outputs poisoned
//     with NaN, so the wrong semantics or an unwritten element fails;
//   * the float instantiation against the double one on the same inputs: each output must be
//     the double result rounded once to float (at most half a float ulp away), which also
//     proves the sums are accumulated in double.
// Inputs are fresh random numbers each run; the seed is printed on failure and can be fixed
// with FLASHGPT_SEED=<n>. Run: make test-cpu (or build/test_cpu --gtest_filter='*Ref*').
// common.h defines FAIL(...) (throw); keep GoogleTest's FAIL() out of the way (GTEST_FAIL()
// remains available).
#ifndef GTEST_DONT_DEFINE_FAIL
#define GTEST_DONT_DEFINE_FAIL 1
#endif
#include <gtest/gtest.h>
#include <omp.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/adamw.h"
#include "kernels/classifier.h"
#include "kernels/common.h"
#include "kernels/encoder.h"
#include "kernels/gelu.h"
#include "kernels/global_norm.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/residual.h"
#include "kernels/scale.h"

namespace {

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

uint64_t base_seed() {
  static const uint64_t seed = [] {
    const char* env = std::getenv("FLASHGPT_SEED");
    return env ? std::strtoull(env, nullptr, 10) : (uint64_t)std::random_device{}();
  }();
  return seed;
}

// A generator per test: the base seed mixed with the test's name, so a failing test can be
// rerun alone with the same numbers.
std::mt19937_64 test_rng() {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = std::string(info->test_suite_name()) + "." + info->name();
  return std::mt19937_64(base_seed() ^ std::hash<std::string>{}(name));
}

#define SEED_TRACE() SCOPED_TRACE("FLASHGPT_SEED=" + std::to_string(base_seed()))

Vec uniform(size_t n, std::mt19937_64& rng, double lo, double hi) {
  std::uniform_real_distribution<double> d(lo, hi);
  Vec v(n);
  for (double& x : v) x = d(rng);
  return v;
}

// Random floats, returned as doubles (exactly representable in float): the float and the
// double instantiations then see the same numbers.
Vec uniform_float_exact(size_t n, std::mt19937_64& rng, double lo, double hi) {
  Vec v = uniform(n, rng, lo, hi);
  for (double& x : v) x = (double)(float)x;
  return v;
}

std::vector<int> random_ints(size_t n, std::mt19937_64& rng, int lo, int hi_exclusive) {
  std::uniform_int_distribution<int> d(lo, hi_exclusive - 1);
  std::vector<int> v(n);
  for (int& x : v) x = d(rng);
  return v;
}

VecF to_float(const Vec& v) { return VecF(v.begin(), v.end()); }
Vec to_double(const VecF& v) { return Vec(v.begin(), v.end()); }

Vec minus(const Vec& a, const Vec& b) {
  Vec r(a.size());
  for (size_t i = 0; i < a.size(); i++) r[i] = a[i] - b[i];
  return r;
}

// ---- comparisons -----------------------------------------------------------------------------

// max_i |got_i - ref_i| / max(|got_i|, |ref_i|, floor); infinity if any value is NaN.
double max_rel_err(const Vec& got, const Vec& ref, double floor) {
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

void expect_rel(const char* what, const Vec& got, const Vec& ref, double tol, double floor) {
  double err = max_rel_err(got, ref, floor);
  std::printf("    %-40s max rel err %.2e  (tol %.0e)\n", what, err, tol);
  EXPECT_LE(err, tol) << what;
}

// Analytic gradient vs finite differences.
void expect_grad(const char* what, const Vec& analytic, const Vec& numeric) {
  expect_rel(what, analytic, numeric, kFdTol, kFdFloor);
}

// Central differences of L(x) = sum_j dout_j * forward(x)_j with respect to every element of
// x (x is restored):
//   g_i = sum_j dout_j * (forward(x + h e_i)_j - forward(x - h e_i)_j) / (2h)
// Differencing the outputs before summing lets the outputs that do not depend on x_i cancel
// exactly, so only the affected ones contribute rounding error.
Vec numerical_grad(Vec& x, const Vec& dout, const std::function<Vec()>& forward) {
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
void expect_rounded_once(const char* what, const VecF& f, const Vec& d, double abs_floor = 0) {
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

double gelu_direct(double x) {
  const double pi = 3.14159265358979323846;
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / pi) * (x + 0.044715 * x * x * x)));
}

// out = inp @ weight^T + bias, naive triple loop in long double.
Vec matmul_naive(const Vec& inp, const Vec& w, const Vec* bias, int N, int C, int OC) {
  Vec out((size_t)N * OC);
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) {
      long double s = bias ? (*bias)[o] : 0.0;
      for (int c = 0; c < C; c++) s += (long double)inp[(size_t)n * C + c] * w[(size_t)o * C + c];
      out[(size_t)n * OC + o] = (double)s;
    }
  return out;
}

// =============================================================================================
// encoder
// =============================================================================================

TEST(EncoderRef, ForwardIsTokenPlusPositionRow) {
  SEED_TRACE();
  auto rng = test_rng();
  const int B = 3, T = 5, C = 7, Vp = 11, maxT = 8;
  Vec wte = uniform(Vp * C, rng, -1, 1), wpe = uniform(maxT * C, rng, -1, 1);
  std::vector<int> inp = random_ints(B * T, rng, 0, Vp);
  Vec out(B * T * C, kNaN);
  encoder_forward_ref(out.data(), inp.data(), wte.data(), wpe.data(), B, T, C);
  Vec ref(out.size());
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      for (int c = 0; c < C; c++)
        ref[(b * T + t) * C + c] = wte[inp[b * T + t] * C + c] + wpe[t * C + c];
  expect_rel("encoder out", out, ref, 0, 0);
}

TEST(EncoderRef, BackwardFiniteDifferenceAccumulates) {
  SEED_TRACE();
  auto rng = test_rng();
  // B*T = 10 tokens drawn from 7 ids: some ids repeat (their rows sum several dout rows),
  // maxT > T: rows T.. of dwpe must keep their prior values.
  const int B = 2, T = 5, C = 3, Vp = 7, maxT = 6;
  Vec wte = uniform(Vp * C, rng, -1, 1), wpe = uniform(maxT * C, rng, -1, 1);
  Vec dout = uniform(B * T * C, rng, -1, 1);
  std::vector<int> inp = random_ints(B * T, rng, 0, Vp);
  auto forward = [&] {
    Vec out(B * T * C, kNaN);
    encoder_forward_ref(out.data(), inp.data(), wte.data(), wpe.data(), B, T, C);
    return out;
  };
  Vec dwte_pre = uniform(wte.size(), rng, -1, 1), dwpe_pre = uniform(wpe.size(), rng, -1, 1);
  Vec dwte = dwte_pre, dwpe = dwpe_pre;
  encoder_backward_ref(dwte.data(), dwpe.data(), dout.data(), inp.data(), B, T, C);
  expect_grad("encoder dwte (accumulated)", minus(dwte, dwte_pre),
              numerical_grad(wte, dout, forward));
  expect_grad("encoder dwpe (accumulated)", minus(dwpe, dwpe_pre),
              numerical_grad(wpe, dout, forward));
}

// =============================================================================================
// layernorm
// =============================================================================================

TEST(LayernormRef, ForwardNormalisesEachRow) {
  SEED_TRACE();
  auto rng = test_rng();
  const int N = 7, C = 5;
  const double eps = 1e-5;
  // Rows with an offset and different scales; the last row has variance ~1e-6, well below
  // eps, so a wrong eps (or none) shows up in its output.
  Vec inp((size_t)N * C);
  for (int i = 0; i < N; i++) {
    double offset = uniform(1, rng, -3, 3)[0], scale = i == N - 1 ? 1e-3 : std::pow(2.0, i - 3);
    for (int c = 0; c < C; c++) inp[i * C + c] = offset + scale * uniform(1, rng, -1, 1)[0];
  }
  Vec ones(C, 1.0), zeros(C, 0.0);
  Vec out(N * C, kNaN), mean(N, kNaN), rstd(N, kNaN);
  layernorm_forward_ref(out.data(), mean.data(), rstd.data(), inp.data(), ones.data(), zeros.data(),
                        N, C);
  // Before the affine part: each row has mean 0 and variance var / (var + eps).
  Vec row_mean(N), row_var(N), want_var(N), want_mean(N), want_rstd(N);
  for (int i = 0; i < N; i++) {
    double m = 0, v = 0, mo = 0, vo = 0;
    for (int c = 0; c < C; c++) m += inp[i * C + c] / C;
    for (int c = 0; c < C; c++) v += (inp[i * C + c] - m) * (inp[i * C + c] - m) / C;
    for (int c = 0; c < C; c++) mo += out[i * C + c] / C;
    for (int c = 0; c < C; c++) vo += (out[i * C + c] - mo) * (out[i * C + c] - mo) / C;
    row_mean[i] = mo;
    row_var[i] = vo;
    want_var[i] = v / (v + eps);
    want_mean[i] = m;
    want_rstd[i] = 1 / std::sqrt(v + eps);
  }
  expect_rel("layernorm row mean of xhat (abs)", row_mean, Vec(N, 0.0), 1e-12, 1.0);
  expect_rel("layernorm row var of xhat", row_var, want_var, 1e-12, 0);
  expect_rel("layernorm saved mean (rel to max(|m|,1))", mean, want_mean, 1e-12, 1.0);
  expect_rel("layernorm saved rstd", rstd, want_rstd, 1e-12, 0);
  // With the affine part: y = xhat * weight + bias, column by column.
  Vec w = uniform(C, rng, -2, 2), b = uniform(C, rng, -1, 1);
  Vec y(N * C, kNaN), ref(N * C);
  layernorm_forward_ref(y.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
  for (int i = 0; i < N; i++)
    for (int c = 0; c < C; c++) ref[i * C + c] = out[i * C + c] * w[c] + b[c];
  expect_rel("layernorm affine out", y, ref, 1e-12, 1e-9);
}

TEST(LayernormRef, BackwardFiniteDifferenceAccumulates) {
  SEED_TRACE();
  auto rng = test_rng();
  const int N = 7, C = 5;
  Vec inp = uniform(N * C, rng, -2, 3), w = uniform(C, rng, 0.5, 1.5), b = uniform(C, rng, -1, 1);
  Vec dout = uniform(N * C, rng, -1, 1);
  Vec mean(N, kNaN), rstd(N, kNaN);
  auto forward = [&] {
    Vec out(N * C, kNaN);
    layernorm_forward_ref(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N,
                          C);
    return out;
  };
  forward();  // mean, rstd of the unperturbed input, for the backward
  Vec mean0 = mean, rstd0 = rstd;
  Vec dinp_pre = uniform(inp.size(), rng, -1, 1), dw_pre = uniform(C, rng, -1, 1),
      db_pre = uniform(C, rng, -1, 1);
  Vec dinp = dinp_pre, dw = dw_pre, db = db_pre;
  layernorm_backward_ref(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(),
                         mean0.data(), rstd0.data(), N, C);
  expect_grad("layernorm dinp (accumulated)", minus(dinp, dinp_pre),
              numerical_grad(inp, dout, forward));
  expect_grad("layernorm dweight (accumulated)", minus(dw, dw_pre),
              numerical_grad(w, dout, forward));
  expect_grad("layernorm dbias (accumulated)", minus(db, db_pre), numerical_grad(b, dout, forward));
}

// =============================================================================================
// matmul
// =============================================================================================

struct MatmulShape {
  int N, C, OC;
};
constexpr double kNaiveTol = 1e-12;
// Ragged shapes that hit the full 4x2 tiles, the partial row blocks and the odd column, and a
// long C.
const MatmulShape kMatmulShapes[] = {{7, 5, 3}, {9, 6, 5},    {1, 1, 1},
                                     {4, 2, 2}, {37, 70, 23}, {6, 1030, 200}};

TEST(MatmulRef, ForwardMatchesNaiveTripleLoop) {
  SEED_TRACE();
  auto rng = test_rng();
  for (const MatmulShape& s : kMatmulShapes) {
    SCOPED_TRACE("N=" + std::to_string(s.N) + " C=" + std::to_string(s.C) +
                 " OC=" + std::to_string(s.OC));
    Vec inp = uniform((size_t)s.N * s.C, rng, -1, 1), w = uniform((size_t)s.OC * s.C, rng, -1, 1),
        b = uniform(s.OC, rng, -1, 1);
    Vec out((size_t)s.N * s.OC, kNaN);
    matmul_forward_ref(out.data(), inp.data(), w.data(), b.data(), s.N, s.C, s.OC);
    // Errors relative to max(|out|, 1). Summing C products in double in another order than the
    // naive loop costs ~sqrt(C) * 1e-16 of the sum (2e-14 seen at C = 1030); kNaiveTol leaves
    // room for that, and any wrong index or missing term is off by O(1).
    expect_rel("matmul out (bias)", out, matmul_naive(inp, w, &b, s.N, s.C, s.OC), kNaiveTol, 1.0);
    Vec out_nb((size_t)s.N * s.OC, kNaN);
    matmul_forward_ref<double>(out_nb.data(), inp.data(), w.data(), nullptr, s.N, s.C, s.OC);
    expect_rel("matmul out (no bias)", out_nb, matmul_naive(inp, w, nullptr, s.N, s.C, s.OC),
               kNaiveTol, 1.0);
  }
}

TEST(MatmulRef, BackwardFiniteDifference) {
  SEED_TRACE();
  auto rng = test_rng();
  for (const MatmulShape& s : {kMatmulShapes[0], kMatmulShapes[1]}) {
    const int N = s.N, C = s.C, OC = s.OC;
    SCOPED_TRACE("N=" + std::to_string(N) + " C=" + std::to_string(C) +
                 " OC=" + std::to_string(OC));
    std::printf("    N=%d C=%d OC=%d\n", N, C, OC);
    Vec inp = uniform(N * C, rng, -1, 1), w = uniform(OC * C, rng, -1, 1),
        b = uniform(OC, rng, -1, 1), dout = uniform(N * OC, rng, -1, 1);
    auto forward = [&] {
      Vec out(N * OC, kNaN);
      matmul_forward_ref(out.data(), inp.data(), w.data(), b.data(), N, C, OC);
      return out;
    };
    Vec dinp(N * C, kNaN);  // overwritten: any element left unwritten stays NaN and fails
    Vec dw_pre = uniform(w.size(), rng, -1, 1), db_pre = uniform(OC, rng, -1, 1);
    Vec dw = dw_pre, db = db_pre;
    matmul_backward_ref(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, C,
                        OC);
    expect_grad("matmul dinp (overwritten)", dinp, numerical_grad(inp, dout, forward));
    expect_grad("matmul dweight (accumulated)", minus(dw, dw_pre),
                numerical_grad(w, dout, forward));
    expect_grad("matmul dbias (accumulated)", minus(db, db_pre), numerical_grad(b, dout, forward));

    // Overwrite, not accumulate: a second call from random garbage gives the same dinp.
    Vec dinp2 = uniform(N * C, rng, -1, 1), dw2 = dw_pre;
    matmul_backward_ref<double>(dinp2.data(), dw2.data(), nullptr, dout.data(), inp.data(),
                                w.data(), N, C, OC);
    expect_rel("matmul dinp again, dbias = nullptr", dinp2, dinp, 0, 0);
    expect_rel("matmul dweight again, dbias = nullptr", dw2, dw, 0, 0);
  }
}

TEST(MatmulRef, BackwardMatchesNaiveLoopsLargerShapes) {
  SEED_TRACE();
  auto rng = test_rng();
  for (const MatmulShape& s : {kMatmulShapes[4], kMatmulShapes[5]}) {
    const int N = s.N, C = s.C, OC = s.OC;
    SCOPED_TRACE("N=" + std::to_string(N) + " C=" + std::to_string(C) +
                 " OC=" + std::to_string(OC));
    Vec inp = uniform(N * C, rng, -1, 1), w = uniform(OC * C, rng, -1, 1),
        dout = uniform(N * OC, rng, -1, 1);
    Vec dinp(N * C, kNaN), dw_pre = uniform(OC * C, rng, -1, 1), db_pre = uniform(OC, rng, -1, 1);
    Vec dw = dw_pre, db = db_pre;
    matmul_backward_ref(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, C,
                        OC);
    Vec ref_dinp(N * C), ref_dw(OC * C), ref_db(OC);
    for (int n = 0; n < N; n++)
      for (int c = 0; c < C; c++) {
        long double s = 0;
        for (int o = 0; o < OC; o++) s += (long double)dout[n * OC + o] * w[o * C + c];
        ref_dinp[n * C + c] = (double)s;
      }
    for (int o = 0; o < OC; o++) {
      long double sb = db_pre[o];
      for (int n = 0; n < N; n++) sb += dout[n * OC + o];
      ref_db[o] = (double)sb;
      for (int c = 0; c < C; c++) {
        long double s = dw_pre[o * C + c];
        for (int n = 0; n < N; n++) s += (long double)dout[n * OC + o] * inp[n * C + c];
        ref_dw[o * C + c] = (double)s;
      }
    }
    // Relative to max(|value|, 1), as in the forward.
    expect_rel("matmul dinp vs naive", dinp, ref_dinp, kNaiveTol, 1.0);
    expect_rel("matmul dweight vs naive", dw, ref_dw, kNaiveTol, 1.0);
    expect_rel("matmul dbias vs naive", db, ref_db, kNaiveTol, 1.0);
  }
}

// Each output is summed by one thread in a fixed order, so 1 and 2 threads agree bit for bit.
// (N*C*OC is above matmul.cpp's kParallelMinWork, so two threads do run.)
TEST(MatmulRef, SameBitsWithOneOrTwoThreads) {
  SEED_TRACE();
  auto rng = test_rng();
  const int N = 67, C = 65, OC = 19;
  VecF inp = to_float(uniform(N * C, rng, -1, 1)), w = to_float(uniform(OC * C, rng, -1, 1)),
       b = to_float(uniform(OC, rng, -1, 1)), dout = to_float(uniform(N * OC, rng, -1, 1));
  VecF out[2], dinp[2], dw[2], db[2];
  const int saved = omp_get_max_threads();
  for (int k = 0; k < 2; k++) {
    omp_set_num_threads(k + 1);
    out[k].assign(N * OC, 0.f);
    dinp[k].assign(N * C, 0.f);
    dw[k].assign(OC * C, 0.5f);
    db[k].assign(OC, 0.25f);
    matmul_forward_ref(out[k].data(), inp.data(), w.data(), b.data(), N, C, OC);
    matmul_backward_ref(dinp[k].data(), dw[k].data(), db[k].data(), dout.data(), inp.data(),
                        w.data(), N, C, OC);
  }
  omp_set_num_threads(saved);
  EXPECT_EQ(out[0], out[1]);
  EXPECT_EQ(dinp[0], dinp[1]);
  EXPECT_EQ(dw[0], dw[1]);
  EXPECT_EQ(db[0], db[1]);
}

// =============================================================================================
// gelu
// =============================================================================================

TEST(GeluRef, ForwardIsGpt2TanhForm) {
  SEED_TRACE();
  auto rng = test_rng();
  Vec x = uniform(101, rng, -6, 6);
  x.push_back(0.0);
  x.push_back(1.0);
  Vec y(x.size(), kNaN), ref(x.size());
  gelu_forward_ref(y.data(), x.data(), x.size());
  for (size_t i = 0; i < x.size(); i++) ref[i] = gelu_direct(x[i]);
  expect_rel("gelu out vs tanh formula", y, ref, 1e-14, 1e-12);
  // The tanh form, not the exact erf form: at x = 1 they differ by 1.5e-4.
  // 0.5 (1 + tanh(sqrt(2/pi) * 1.044715)) = 0.8411919906082768 (tanh form); erf form 0.8413447.
  EXPECT_NEAR(y.back(), 0.8411919906082768, 1e-15);
  EXPECT_EQ(y[x.size() - 2], 0.0);
}

TEST(GeluRef, BackwardFiniteDifferenceOverwrites) {
  SEED_TRACE();
  auto rng = test_rng();
  const size_t n = 37;
  Vec x = uniform(n, rng, -5, 5), dout = uniform(n, rng, -1, 1);
  auto forward = [&] {
    Vec y(n, kNaN);
    gelu_forward_ref(y.data(), x.data(), n);
    return y;
  };
  Vec dinp(n, kNaN);
  gelu_backward_ref(dinp.data(), x.data(), dout.data(), n);
  expect_grad("gelu dinp (overwritten)", dinp, numerical_grad(x, dout, forward));
  Vec dinp2 = uniform(n, rng, -1, 1);
  gelu_backward_ref(dinp2.data(), x.data(), dout.data(), n);
  expect_rel("gelu dinp from garbage", dinp2, dinp, 0, 0);
}

// =============================================================================================
// residual
// =============================================================================================

// scale_add: y += a x; scale: x = a x. Linear, so the finite-difference check is exact up to
// rounding: d(sum w*y)/dx = a w.
TEST(ScaleRef, ValuesAndFiniteDifference) {
  SEED_TRACE();
  auto rng = test_rng();
  const size_t n = 33;
  std::vector<double> y = uniform(n, rng, -1, 1), x = uniform(n, rng, -1, 1), y0 = y, x0 = x;
  scale_add_ref(y.data(), x.data(), 0.25f, n);
  scale_ref(x.data(), -3.0f, n);
  for (size_t i = 0; i < n; i++) {
    EXPECT_DOUBLE_EQ(y[i], y0[i] + 0.25 * x0[i]);
    EXPECT_DOUBLE_EQ(x[i], -3.0 * x0[i]);
  }
  const double eps = 1e-6;
  std::vector<double> a = y0, b = y0, xp = x0, xm = x0;
  xp[5] += eps;
  xm[5] -= eps;
  scale_add_ref(a.data(), xp.data(), 0.25f, n);
  scale_add_ref(b.data(), xm.data(), 0.25f, n);
  EXPECT_NEAR((a[5] - b[5]) / (2 * eps), 0.25, 1e-9);
}

TEST(ResidualRef, ForwardAddsAndWorksInPlace) {
  SEED_TRACE();
  auto rng = test_rng();
  const size_t n = 29;
  VecF a = to_float(uniform(n, rng, -1, 1)), b = to_float(uniform(n, rng, -1, 1));
  VecF out(n, NAN), ref(n);
  residual_forward_ref(out.data(), a.data(), b.data(), n);
  for (size_t i = 0; i < n; i++) ref[i] = a[i] + b[i];
  EXPECT_EQ(out, ref);
  residual_forward_ref(a.data(), a.data(), b.data(), n);  // residual stream updated in place
  EXPECT_EQ(a, ref);
}

// =============================================================================================
// classifier
// =============================================================================================

// Shape for the classifier tests. Padded columns hold large logits: if they leaked into the
// softmax, the loss would change by ~40.
const int kClsN = 7, kClsV = 11, kClsVp = 16;
struct ClassifierCase {
  Vec logits;
  std::vector<int> targets;
  float dloss;
};
ClassifierCase make_classifier_case(std::mt19937_64& rng) {
  ClassifierCase k;
  k.logits = uniform_float_exact(kClsN * kClsVp, rng, -4, 4);
  for (int i = 0; i < kClsN; i++)
    for (int v = kClsV; v < kClsVp; v++) k.logits[i * kClsVp + v] = 40 + v;
  k.targets = random_ints(kClsN, rng, 0, kClsV);
  k.targets[0] = kClsV - 1;  // the last real column is a target
  k.dloss = 1.0f / (kClsN * 3);
  return k;
}

TEST(ClassifierRef, LossIsMinusLogSoftmaxOverRealVocab) {
  SEED_TRACE();
  auto rng = test_rng();
  ClassifierCase k = make_classifier_case(rng);
  Vec losses(kClsN, kNaN), ref(kClsN);
  classifier_ref<double>(losses.data(), nullptr, k.logits.data(), k.targets.data(), k.dloss, kClsN,
                         kClsV, kClsVp);
  for (int i = 0; i < kClsN; i++) {  // -log(softmax), no max subtraction: logits are small
    double z = 0;
    for (int v = 0; v < kClsV; v++) z += std::exp(k.logits[i * kClsVp + v]);
    ref[i] = -std::log(std::exp(k.logits[i * kClsVp + k.targets[i]]) / z);
  }
  expect_rel("classifier losses", losses, ref, 1e-13, 1e-12);
  // Large logits do not overflow (max subtracted): shift a row by +1000, loss is unchanged.
  Vec shifted = k.logits;
  for (int v = 0; v < kClsVp; v++) shifted[v] += 1000;
  Vec losses2(kClsN, kNaN);
  classifier_ref<double>(losses2.data(), nullptr, shifted.data(), k.targets.data(), k.dloss, kClsN,
                         kClsV, kClsVp);
  expect_rel("classifier loss, row shifted by 1000", losses2, ref, 1e-11, 1e-12);
}

TEST(ClassifierRef, DlogitsFiniteDifferencePaddedColumnsZero) {
  SEED_TRACE();
  auto rng = test_rng();
  ClassifierCase k = make_classifier_case(rng);
  // dlogits is the gradient of sum_i dloss * loss_i.
  auto forward = [&] {
    Vec losses(kClsN, kNaN);
    classifier_ref<double>(losses.data(), nullptr, k.logits.data(), k.targets.data(), k.dloss,
                           kClsN, kClsV, kClsVp);
    return losses;
  };
  const Vec dlosses(kClsN, (double)k.dloss);
  Vec losses(kClsN, kNaN);
  Vec dlogits(kClsN * kClsVp, kNaN);
  classifier_ref(losses.data(), dlogits.data(), k.logits.data(), k.targets.data(), k.dloss, kClsN,
                 kClsV, kClsVp);
  expect_rel("classifier losses (with dlogits) vs eval", losses, forward(), 0, 0);
  Vec numeric = numerical_grad(k.logits, dlosses, forward);
  expect_grad("classifier dlogits", dlogits, numeric);
  for (int i = 0; i < kClsN; i++)
    for (int v = kClsV; v < kClsVp; v++) {
      EXPECT_EQ(dlogits[i * kClsVp + v], 0.0) << "padded column " << v << " row " << i;
      EXPECT_EQ(numeric[i * kClsVp + v], 0.0) << "padded column " << v << " row " << i;
    }
}

TEST(ClassifierRef, InPlaceMatchesSeparateBuffers) {
  SEED_TRACE();
  auto rng = test_rng();
  ClassifierCase k = make_classifier_case(rng);
  Vec losses(kClsN, kNaN), dlogits(kClsN * kClsVp, kNaN);
  classifier_ref(losses.data(), dlogits.data(), k.logits.data(), k.targets.data(), k.dloss, kClsN,
                 kClsV, kClsVp);
  Vec buf = k.logits, losses_ip(kClsN, kNaN);
  classifier_ref(losses_ip.data(), buf.data(), buf.data(), k.targets.data(), k.dloss, kClsN, kClsV,
                 kClsVp);
  expect_rel("classifier in-place losses", losses_ip, losses, 0, 0);
  expect_rel("classifier in-place dlogits", buf, dlogits, 0, 0);
  // And against finite differences directly.
  auto forward = [&] {
    Vec l(kClsN, kNaN);
    classifier_ref<double>(l.data(), nullptr, k.logits.data(), k.targets.data(), k.dloss, kClsN,
                           kClsV, kClsVp);
    return l;
  };
  expect_grad("classifier in-place dlogits vs FD", buf,
              numerical_grad(k.logits, Vec(kClsN, (double)k.dloss), forward));
  // Eval mode (dlogits = nullptr) gives the same losses and leaves logits alone.
  Vec logits_before = k.logits, losses_eval(kClsN, kNaN);
  classifier_ref<double>(losses_eval.data(), nullptr, k.logits.data(), k.targets.data(), k.dloss,
                         kClsN, kClsV, kClsVp);
  expect_rel("classifier eval losses", losses_eval, losses, 0, 0);
  EXPECT_EQ(k.logits, logits_before);
}

TEST(ClassifierRef, RejectsTargetOutsideVocab) {
  VecF logits(2 * kClsVp, 0.f), losses(2);
  std::vector<int> bad_high = {0, kClsV}, bad_neg = {-1, 0};
  EXPECT_THROW(classifier_ref<float>(losses.data(), nullptr, logits.data(), bad_high.data(), 1.f, 2,
                                     kClsV, kClsVp),
               flashgpt::Error);
  EXPECT_THROW(classifier_ref<float>(losses.data(), nullptr, logits.data(), bad_neg.data(), 1.f, 2,
                                     kClsV, kClsVp),
               flashgpt::Error);
}

// =============================================================================================
// adamw
// =============================================================================================

struct AdamHyper {
  float lr, beta1, beta2, eps, wd, grad_scale;
};

// One AdamW step written out per element, straight from the paper's algorithm (with the
// decoupled decay term lr * wd * p), in double.
void adamw_direct(Vec& p, const Vec& g, Vec& m, Vec& v, const AdamHyper& h, int t) {
  for (size_t i = 0; i < p.size(); i++) {
    double gi = g[i] * (double)h.grad_scale;
    m[i] = (double)h.beta1 * m[i] + (1 - (double)h.beta1) * gi;
    v[i] = (double)h.beta2 * v[i] + (1 - (double)h.beta2) * gi * gi;
    double mhat = m[i] / (1 - std::pow((double)h.beta1, t));
    double vhat = v[i] / (1 - std::pow((double)h.beta2, t));
    double update = mhat / (std::sqrt(vhat) + (double)h.eps);
    if (h.wd != 0) update += (double)h.wd * p[i];
    p[i] -= (double)h.lr * update;
  }
}

// Steps t = 1..steps, fresh gradients each step, from random m, v (or zero at t = 1).
void check_adamw_steps(std::mt19937_64& rng, const AdamHyper& h, int steps, const char* what) {
  const size_t n = 23;
  Vec p = uniform(n, rng, -1, 1), m(n, 0.0), v(n, 0.0);
  Vec p_start = p, p_ref = p, m_ref = m, v_ref = v;
  for (int t = 1; t <= steps; t++) {
    Vec g = uniform(n, rng, -1e-2, 1e-2);
    adamw_update_ref(p.data(), g.data(), m.data(), v.data(), n, h.lr, h.beta1, h.beta2, h.eps, h.wd,
                     h.grad_scale, t);
    adamw_direct(p_ref, g, m_ref, v_ref, h, t);
  }
  std::string s(what);
  expect_rel((s + " params").c_str(), p, p_ref, 1e-14, 1e-12);
  expect_rel((s + " m").c_str(), m, m_ref, 1e-14, 1e-12);
  expect_rel((s + " v").c_str(), v, v_ref, 1e-14, 1e-12);
  // The parameters moved by about lr per step: the comparison is not between no-ops.
  EXPECT_GT(max_rel_err(p, p_start, 1.0), 0.1 * h.lr) << what;
}

TEST(AdamwRef, OneStepMatchesScalarFormula) {
  SEED_TRACE();
  auto rng = test_rng();
  check_adamw_steps(rng, {1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f}, 1, "adamw 1 step");
}

TEST(AdamwRef, SeveralStepsMatchScalarFormula) {
  SEED_TRACE();
  auto rng = test_rng();
  check_adamw_steps(rng, {3e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, 1.0f}, 6, "adamw 6 steps");
  check_adamw_steps(rng, {3e-3f, 0.8f, 0.95f, 1e-3f, 0.5f, 0.3f}, 6, "adamw 6 steps, eps 1e-3");
}

TEST(AdamwRef, ZeroWeightDecayLeavesDecayOut) {
  SEED_TRACE();
  auto rng = test_rng();
  check_adamw_steps(rng, {1e-2f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f}, 3, "adamw wd=0");
  // With wd = 0 the first step is exactly lr * sign(g) * |g| / (|g| + eps): p moves by ~lr.
  const size_t n = 5;
  Vec p = uniform(n, rng, -1, 1), p0 = p, m(n, 0.0), v(n, 0.0), g = uniform(n, rng, 0.1, 1);
  adamw_update_ref(p.data(), g.data(), m.data(), v.data(), n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.f, 1.f,
                   1);
  Vec want(n);
  for (size_t i = 0; i < n; i++) want[i] = p0[i] - (double)1e-2f * g[i] / (g[i] + (double)1e-8f);
  expect_rel("adamw wd=0 first step = p - lr*g/(|g|+eps)", p, want, 1e-14, 1e-12);
}

TEST(AdamwRef, GradScaleMultipliesGradsFirst) {
  SEED_TRACE();
  auto rng = test_rng();
  // eps comparable to the gradients, so the step depends on the gradients' scale.
  const size_t n = 17;
  const float scale = 0.25f;
  Vec p = uniform(n, rng, -1, 1), g = uniform(n, rng, -1e-3, 1e-3);
  Vec m = uniform(n, rng, -1e-3, 1e-3), v = uniform(n, rng, 0, 1e-6);
  Vec pa = p, ma = m, va = v, pb = p, mb = m, vb = v, g_scaled(n);
  for (size_t i = 0; i < n; i++) g_scaled[i] = g[i] * (double)scale;
  adamw_update_ref(pa.data(), g.data(), ma.data(), va.data(), n, 1e-2f, 0.9f, 0.95f, 1e-3f, 0.1f,
                   scale, 3);
  adamw_update_ref(pb.data(), g_scaled.data(), mb.data(), vb.data(), n, 1e-2f, 0.9f, 0.95f, 1e-3f,
                   0.1f, 1.0f, 3);
  expect_rel("adamw grad_scale: params", pa, pb, 1e-15, 1e-12);
  expect_rel("adamw grad_scale: m", ma, mb, 1e-15, 1e-12);
  expect_rel("adamw grad_scale: v", va, vb, 1e-15, 1e-12);
  // And unscaled gradients give a different step (the test can tell).
  Vec pc = p, mc = m, vc = v;
  adamw_update_ref(pc.data(), g.data(), mc.data(), vc.data(), n, 1e-2f, 0.9f, 0.95f, 1e-3f, 0.1f,
                   1.0f, 3);
  EXPECT_GT(max_rel_err(mc, ma, 1e-12), 0.1);
}

TEST(AdamwRef, RejectsStepZero) {
  Vec p(1, 1.0), g(1, 1.0), m(1, 0.0), v(1, 0.0);
  EXPECT_THROW(adamw_update_ref(p.data(), g.data(), m.data(), v.data(), 1, 1e-3f, 0.9f, 0.95f,
                                1e-8f, 0.f, 1.f, 0),
               flashgpt::Error);
}

// =============================================================================================
// global norm
// =============================================================================================

TEST(GlobalNormRef, SumOfSquaresAccumulatedInDouble) {
  SEED_TRACE();
  auto rng = test_rng();
  // 1e6 floats: a float accumulator would be off by ~1e-4 relative, double by ~1e-13.
  const size_t n = 1000003;
  VecF g = to_float(uniform(n, rng, -1, 1));
  long double ref = 0;
  for (float x : g) ref += (long double)x * x;
  double got = global_norm_squared_ref(g.data(), n);
  double err = std::fabs(got - (double)ref) / (double)ref;
  std::printf("    %-40s rel err %.2e  (tol 1e-12)\n", "global norm^2 (float data)", err);
  EXPECT_LE(err, 1e-12);
  Vec gd = to_double(g);
  double got_d = global_norm_squared_ref(gd.data(), n);
  double err_d = std::fabs(got_d - (double)ref) / (double)ref;
  std::printf("    %-40s rel err %.2e  (tol 1e-12)\n", "global norm^2 (double data)", err_d);
  EXPECT_LE(err_d, 1e-12);
  EXPECT_EQ(global_norm_squared_ref(g.data(), 0), 0.0);
  float three_four[2] = {3.f, 4.f};
  EXPECT_EQ(global_norm_squared_ref(three_four, 2), 25.0);
}

// =============================================================================================
// float instantiation vs double instantiation
// =============================================================================================

TEST(FloatVsDouble, Matmul) {
  SEED_TRACE();
  auto rng = test_rng();
  // C and N long enough that summing in float would miss the half-ulp bound by far.
  const int N = 67, C = 1001, OC = 300;
  Vec inp = uniform_float_exact(N * C, rng, -1, 1), w = uniform_float_exact(OC * C, rng, -1, 1),
      b = uniform_float_exact(OC, rng, -1, 1), dout = uniform_float_exact(N * OC, rng, -1, 1),
      dw_pre = uniform_float_exact(OC * C, rng, -1, 1),
      db_pre = uniform_float_exact(OC, rng, -1, 1);
  VecF inpf = to_float(inp), wf = to_float(w), bf = to_float(b), doutf = to_float(dout);
  Vec out(N * OC), dinp(N * C), dw = dw_pre, db = db_pre;
  VecF outf(N * OC), dinpf(N * C), dwf = to_float(dw_pre), dbf = to_float(db_pre);
  matmul_forward_ref(out.data(), inp.data(), w.data(), b.data(), N, C, OC);
  matmul_forward_ref(outf.data(), inpf.data(), wf.data(), bf.data(), N, C, OC);
  matmul_backward_ref(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, C,
                      OC);
  matmul_backward_ref(dinpf.data(), dwf.data(), dbf.data(), doutf.data(), inpf.data(), wf.data(), N,
                      C, OC);
  expect_rounded_once("matmul out", outf, out, kSumFloor);
  expect_rounded_once("matmul dinp", dinpf, dinp, kSumFloor);
  expect_rounded_once("matmul dweight", dwf, dw, kSumFloor);
  expect_rounded_once("matmul dbias", dbf, db, kSumFloor);
}

TEST(FloatVsDouble, Layernorm) {
  SEED_TRACE();
  auto rng = test_rng();
  const int N = 9, C = 773;
  Vec inp = uniform_float_exact(N * C, rng, -2, 3), w = uniform_float_exact(C, rng, 0.5, 1.5),
      b = uniform_float_exact(C, rng, -1, 1), dout = uniform_float_exact(N * C, rng, -1, 1);
  VecF inpf = to_float(inp), wf = to_float(w), bf = to_float(b), doutf = to_float(dout);
  Vec out(N * C), mean(N), rstd(N);
  VecF outf(N * C), meanf(N), rstdf(N);
  layernorm_forward_ref(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
  layernorm_forward_ref(outf.data(), meanf.data(), rstdf.data(), inpf.data(), wf.data(), bf.data(),
                        N, C);
  expect_rounded_once("layernorm out", outf, out, kSumFloor);
  expect_rounded_once("layernorm mean", meanf, mean);
  expect_rounded_once("layernorm rstd", rstdf, rstd);
  // Backward from the same (float) saved statistics, into the same pre-filled gradients.
  Vec dinp_pre = uniform_float_exact(N * C, rng, -1, 1),
      dw_pre = uniform_float_exact(C, rng, -1, 1), db_pre = uniform_float_exact(C, rng, -1, 1);
  Vec dinp = dinp_pre, dw = dw_pre, db = db_pre, mean_s = to_double(meanf),
      rstd_s = to_double(rstdf);
  VecF dinpf = to_float(dinp_pre), dwf = to_float(dw_pre), dbf = to_float(db_pre);
  layernorm_backward_ref(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(),
                         mean_s.data(), rstd_s.data(), N, C);
  layernorm_backward_ref(dinpf.data(), dwf.data(), dbf.data(), doutf.data(), inpf.data(), wf.data(),
                         meanf.data(), rstdf.data(), N, C);
  expect_rounded_once("layernorm dinp", dinpf, dinp, kSumFloor);
  expect_rounded_once("layernorm dweight", dwf, dw, kSumFloor);
  expect_rounded_once("layernorm dbias", dbf, db, kSumFloor);
}

TEST(FloatVsDouble, EncoderGeluResidual) {
  SEED_TRACE();
  auto rng = test_rng();
  const int B = 2, T = 3, C = 4, Vp = 5;
  Vec wte = uniform_float_exact(Vp * C, rng, -1, 1), wpe = uniform_float_exact(T * C, rng, -1, 1);
  std::vector<int> inp = random_ints(B * T, rng, 0, Vp);
  Vec out(B * T * C);
  VecF outf(B * T * C);
  encoder_forward_ref(out.data(), inp.data(), wte.data(), wpe.data(), B, T, C);
  encoder_forward_ref(outf.data(), inp.data(), to_float(wte).data(), to_float(wpe).data(), B, T, C);
  expect_rounded_once("encoder out", outf, out);

  const size_t n = 257;
  Vec x = uniform_float_exact(n, rng, -6, 6), dy = uniform_float_exact(n, rng, -1, 1), y(n), dx(n);
  VecF xf = to_float(x), dyf = to_float(dy), yf(n), dxf(n);
  gelu_forward_ref(y.data(), x.data(), n);
  gelu_forward_ref(yf.data(), xf.data(), n);
  gelu_backward_ref(dx.data(), x.data(), dy.data(), n);
  gelu_backward_ref(dxf.data(), xf.data(), dyf.data(), n);
  expect_rounded_once("gelu out", yf, y, 1e-300);
  expect_rounded_once("gelu dinp", dxf, dx, 1e-300);

  Vec r(n);
  VecF rf(n);
  residual_forward_ref(r.data(), x.data(), dy.data(), n);
  residual_forward_ref(rf.data(), xf.data(), dyf.data(), n);
  expect_rounded_once("residual out", rf, r);
}

TEST(FloatVsDouble, Classifier) {
  SEED_TRACE();
  auto rng = test_rng();
  const int N = 5, V = 1000, Vp = 1024;
  Vec logits = uniform_float_exact(N * Vp, rng, -8, 8);
  std::vector<int> targets = random_ints(N, rng, 0, V);
  const float dloss = 1.0f / 96;
  Vec losses(N), dl(N * Vp);
  VecF lossesf(N), dlf(N * Vp);
  classifier_ref(losses.data(), dl.data(), logits.data(), targets.data(), dloss, N, V, Vp);
  classifier_ref(lossesf.data(), dlf.data(), to_float(logits).data(), targets.data(), dloss, N, V,
                 Vp);
  expect_rounded_once("classifier losses", lossesf, losses);
  expect_rounded_once("classifier dlogits", dlf, dl);
}

TEST(FloatVsDouble, AdamwEachStep) {
  SEED_TRACE();
  auto rng = test_rng();
  const size_t n = 101;
  VecF p = to_float(uniform(n, rng, -1, 1)), m(n, 0.f), v(n, 0.f);
  for (int t = 1; t <= 4; t++) {
    // The double step starts from the float state, so each step is compared on its own.
    Vec g = uniform_float_exact(n, rng, -1e-2, 1e-2);
    Vec pd = to_double(p), md = to_double(m), vd = to_double(v);
    adamw_update_ref(pd.data(), g.data(), md.data(), vd.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f,
                     0.5f, t);
    adamw_update_ref(p.data(), to_float(g).data(), m.data(), v.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f,
                     0.1f, 0.5f, t);
    std::string s = "adamw step " + std::to_string(t);
    expect_rounded_once((s + " params").c_str(), p, pd);
    expect_rounded_once((s + " m").c_str(), m, md);
    expect_rounded_once((s + " v").c_str(), v, vd);
  }
}

TEST(FloatVsDouble, GlobalNorm) {
  SEED_TRACE();
  auto rng = test_rng();
  const size_t n = 100003;
  Vec g = uniform_float_exact(n, rng, -1, 1);
  // Both sum in double, possibly in different orders (vector widths): they may differ by the
  // double summation bound n * 2^-53 = 1.1e-11; a float accumulator would be off by ~1e-4.
  double a = global_norm_squared_ref(to_float(g).data(), n),
         b = global_norm_squared_ref(g.data(), n);
  const double tol = n * DBL_EPSILON / 2;
  std::printf("    %-40s rel diff %.2e  (tol %.1e)\n", "global norm^2 float vs double",
              std::fabs(a - b) / b, tol);
  EXPECT_LE(std::fabs(a - b) / b, tol);
}

// =============================================================================================
// encoder without learned positions (wpe == nullptr, dwpe == nullptr; RoPE models)
// =============================================================================================

TEST(EncoderRef, NoPositionTableIsTokenRowAlone) {
  SEED_TRACE();
  auto rng = test_rng();
  const int B = 2, T = 5, C = 3, Vp = 7;
  Vec wte = uniform(Vp * C, rng, -1, 1), dout = uniform(B * T * C, rng, -1, 1);
  std::vector<int> inp = random_ints(B * T, rng, 0, Vp);
  auto forward = [&] {
    Vec out(B * T * C, kNaN);
    encoder_forward_ref(out.data(), inp.data(), wte.data(), (const double*)nullptr, B, T, C);
    return out;
  };
  Vec ref(B * T * C);
  for (int bt = 0; bt < B * T; bt++)
    for (int c = 0; c < C; c++) ref[bt * C + c] = wte[inp[bt] * C + c];
  expect_rel("encoder out (wpe = nullptr)", forward(), ref, 0, 0);
  Vec dwte_pre = uniform(wte.size(), rng, -1, 1), dwte = dwte_pre;
  encoder_backward_ref(dwte.data(), (double*)nullptr, dout.data(), inp.data(), B, T, C);
  expect_grad("encoder dwte (dwpe = nullptr)", minus(dwte, dwte_pre),
              numerical_grad(wte, dout, forward));
  // Same dwte as with a position table.
  Vec dwte2 = dwte_pre, dwpe((size_t)T * C, 0.0);
  encoder_backward_ref(dwte2.data(), dwpe.data(), dout.data(), inp.data(), B, T, C);
  expect_rel("encoder dwte with vs without dwpe", dwte, dwte2, 0, 0);
}

}  // namespace
