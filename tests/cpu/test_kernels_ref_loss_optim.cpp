// test_kernels_ref_loss_optim.cpp — checks of the CPU reference ops of the loss and the optimizer
// (kernels/classifier.h, adamw.h, global_norm.h) by finite differences and direct formulas,
// and of every reference op's float instantiation against its double one on the same inputs:
// each float output must be the double result rounded once to float (at most half a float ulp
// away), which also proves the sums are accumulated in double. The layer ops:
// test_kernels_ref.cpp; how a check is made: ref_check.h.
// Inputs are fresh random numbers each run (FLASHGPT_SEED=<n> repeats a run).
// Run: build/test_cpu --gtest_filter='ClassifierRef*:AdamwRef*:GlobalNormRef*:FloatVsDouble*'
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
#include "tests/cpu/ref_check.h"

namespace {

using namespace ref_check;

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

// Clipping as both models and the GPU kernel compute it (adamw.h): min(1, clip / norm), off
// for clip <= 0; the norm from its square rounded to float.
TEST(AdamwRef, ClipScale) {
  EXPECT_EQ(grad_norm_from_squared(6.25), 2.5f);
  EXPECT_EQ(grad_norm_from_squared(2.0), (float)std::sqrt(2.0));
  EXPECT_EQ(clip_scale(2.0f, 1.0f), 0.5f);
  EXPECT_EQ(clip_scale(4.0f, 3.0f), 0.75f);
  EXPECT_EQ(clip_scale(0.5f, 1.0f), 1.0f);   // under the threshold
  EXPECT_EQ(clip_scale(1.0f, 1.0f), 1.0f);   // at it
  EXPECT_EQ(clip_scale(100.0f, 0.0f), 1.0f);  // clip 0: off
  EXPECT_EQ(clip_scale(100.0f, -1.0f), 1.0f);
  EXPECT_FALSE(std::isfinite(grad_norm_from_squared(std::nan(""))));
  EXPECT_FALSE(std::isfinite(grad_norm_from_squared(1e300)));  // past float: no update
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

}  // namespace
