// test_kernels_ref.cpp — checks of the CPU reference ops of a transformer layer (kernels/*.h:
// encoder, layernorm, matmul, gelu, scale, residual), the oracles of the CUDA kernels:
//   * every backward against central finite differences of its forward, in double;
//   * every forward against a direct formula written here;
//   * accumulate (+=) outputs pre-filled with random values, overwritten (=) outputs poisoned
//     with NaN, so the wrong semantics or an unwritten element fails.
// The classifier, AdamW, the grad norm and the float-vs-double checks of every op:
// test_kernels_ref_loss_optim.cpp. How a check is made: ref_check.h.
// Inputs are fresh random numbers each run; the seed is printed on failure and can be fixed
// with FLASHGPT_SEED=<n>. Run: make test-cpu (or build/test_cpu --gtest_filter='*Ref*').
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

#include "kernels/common.h"
#include "kernels/encoder.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/residual.h"
#include "kernels/scale.h"
#include "tests/cpu/ref_check.h"

namespace {

using namespace ref_check;

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
