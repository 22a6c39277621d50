// test_kernels — every CUDA op of kernels/*.cuh against its CPU reference (kernels/*.h, the
// float instantiation, which accumulates in double), forward and backward.
//
// Each check, on fresh random inputs (seed printed; FLASHGPT_SEED=<n> repeats a run):
//   * inputs are drawn in fp32, rounded to floatX, and the reference gets the rounded values,
//     so only the kernel's own error is measured;
//   * overwritten (=) outputs are filled with NaN before the call, so an unwritten element
//     fails; accumulated (+=) outputs start from random values, the same on both sides;
//   * shapes are ragged (N = 37, C = 100, OC = 300, V = 1000 / Vp = 1024, odd n) and GPT-2
//     sized (C = 768), with misaligned pointers, so both the 128-bit and the scalar paths run;
//   * compared by relative L2 error ||gpu - ref|| / ||ref|| and by max error relative to
//     max|ref|; each line prints the errors and their ratio to the tolerance.
// Tolerances:
//   floatX outputs, bf16 build: rounding one exact value to bf16 (8 significant bits) errs
//     by at most u = 2^-8 = 3.9e-3 relative (at the bottom of a binade) and by 1.66e-3 RMS
//     over many values (measured: every 128-bit-path check lands at 1.66e-3 on H200); a
//     kernel computing in fp32 and rounding once lands there. kTolX = 5e-3 (L2) holds even
//     for a check dominated by one or a few elements at worst-case rounding (the classifier
//     at V = 50257, N = 5 measured 3.4e-3); kTolXMax = 8e-3 = 2u (max). A wrong index or
//     formula errs by O(1).
//   fp32 outputs (parameter gradients, losses, master weights): fp32 arithmetic over bf16 or
//     fp32 inputs in a different order than the double reference: kTolF = 2e-5 (L2),
//     kTolFMax = 1e-4 (max), about 100x the fp32 unit roundoff.
//   FP32 build: the floatX tolerances are the fp32 ones.
// Determinism: the backward kernels that reduce (encoder, layernorm, dbias, global norm) run
// twice on the same inputs and must agree bit for bit.
//
// Run (GPU machine): build/test_gpu --gtest_filter='Kernels.*'
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "kernels/adamw.cuh"
#include "kernels/cuda_timer.cuh"
#include "kernels/adamw.h"
#include "kernels/classifier.cuh"
#include "kernels/classifier.h"
#include "kernels/encoder.cuh"
#include "kernels/encoder.h"
#include "kernels/gelu.cuh"
#include "kernels/gelu.h"
#include "kernels/global_norm.cuh"
#include "kernels/global_norm.h"
#include "kernels/layernorm.cuh"
#include "kernels/layernorm.h"
#include "kernels/matmul.cuh"
#include "kernels/matmul.h"
#include "kernels/residual.cuh"
#include "kernels/residual.h"
#include "kernels/scale.cuh"
#include "kernels/scale.h"
#include "tests/gpu/gpu_test.h"

namespace {

using VecF = std::vector<float>;

#if defined(ENABLE_FP32)
constexpr double kTolX = 2e-5, kTolXMax = 1e-4;
#else
constexpr double kTolX = 5e-3, kTolXMax = 8e-3;
#endif
constexpr double kTolF = 2e-5, kTolFMax = 1e-4;

// ---- random inputs ---------------------------------------------------------------------------

VecF uniform(size_t n, std::mt19937_64& rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  VecF v(n);
  for (float& x : v) x = d(rng);
  return v;
}
std::vector<int> tokens(size_t n, int V, std::mt19937_64& rng) {
  std::uniform_int_distribution<int> d(0, V - 1);
  std::vector<int> v(n);
  for (int& x : v) x = d(rng);
  return v;
}
// Rounds each value to floatX (identity in the FP32 build).
VecF round_x(VecF v) {
  for (float& x : v) x = float(floatX(x));
  return v;
}

// ---- device buffers --------------------------------------------------------------------------

template <class T>
using Dev = DeviceBuffer<T>;  // tests/gpu/gpu_test.h
using DevMem = DeviceBuffer<char>;

Dev<floatX>* upload_x(const VecF& h, int offset = 0) {
  auto* d = new Dev<floatX>(h.size(), offset);
  std::vector<floatX> tmp(h.size());
  for (size_t i = 0; i < h.size(); i++) tmp[i] = floatX(h[i]);
  CUDA_CHECK(cudaMemcpy(d->ptr, tmp.data(), h.size() * sizeof(floatX), cudaMemcpyHostToDevice));
  return d;
}
template <class T>
Dev<T>* upload(const std::vector<T>& h, int offset = 0) {
  auto* d = new Dev<T>(h.size(), offset);
  CUDA_CHECK(cudaMemcpy(d->ptr, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}
VecF download_x(const floatX* p, size_t n) {
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<floatX> tmp(n);
  CUDA_CHECK(cudaMemcpy(tmp.data(), p, n * sizeof(floatX), cudaMemcpyDeviceToHost));
  VecF r(n);
  for (size_t i = 0; i < n; i++) r[i] = float(tmp[i]);
  return r;
}
template <class T>
std::vector<T> download(const T* p, size_t n) {
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<T> r(n);
  CUDA_CHECK(cudaMemcpy(r.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
  return r;
}
template <class T>
using Own = std::unique_ptr<Dev<T>>;

// ---- comparison ------------------------------------------------------------------------------

void expect_bitwise_equal(const std::string& what, const void* a, const void* b, size_t bytes) {
  EXPECT_EQ(std::memcmp(a, b, bytes), 0) << what << ": two runs on the same inputs differ";
}

// ---- fixture -----------------------------------------------------------------------------------

class Kernels : public GpuTest {
 protected:
  static void* workspace_;
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    if (workspace_ == nullptr) CUDA_CHECK(cudaMalloc(&workspace_, matmul_workspace_bytes()));
    matmul_init(workspace_, matmul_workspace_bytes());  // a model test may have detached its own
  }
};
void* Kernels::workspace_ = nullptr;

// ---- encoder ---------------------------------------------------------------------------------

void check_encoder(int B, int T, int C, int V, int Vp, int maxT, bool one_token, int offset,
                   std::mt19937_64& rng) {
  SCOPED_TRACE("B=" + std::to_string(B) + " T=" + std::to_string(T) + " C=" + std::to_string(C));
  std::printf("encoder B=%d T=%d C=%d V=%d%s offset=%d\n", B, T, C, V,
              one_token ? " (every token the same)" : "", offset);
  const size_t N = (size_t)B * T;
  std::vector<int> inp = tokens(N, V, rng);
  if (one_token) std::fill(inp.begin(), inp.end(), V / 2);
  VecF wte = round_x(uniform((size_t)Vp * C, rng)), wpe = round_x(uniform((size_t)maxT * C, rng));
  VecF dout = round_x(uniform(N * C, rng));
  VecF dwte0 = uniform((size_t)Vp * C, rng), dwpe0 = uniform((size_t)maxT * C, rng);

  Own<int> d_inp(upload(inp));
  Own<floatX> d_wte(upload_x(wte, offset)), d_wpe(upload_x(wpe, offset)),
      d_dout(upload_x(dout, offset));
  Own<floatX> d_out(new Dev<floatX>(N * C, offset));
  d_out->poison();
  encoder_forward(d_out->ptr, d_inp->ptr, d_wte->ptr, d_wpe->ptr, B, T, C, 0);
  VecF ref(N * C);
  encoder_forward_ref(ref.data(), inp.data(), wte.data(), wpe.data(), B, T, C);
  expect_close("encoder_forward out", download_x(d_out->ptr, N * C), ref, kTolX, kTolXMax);

  Own<float> d_dwte(upload(dwte0)), d_dwpe(upload(dwpe0));
  DevMem scratch(encoder_backward_scratch_bytes(B, T, encoder_sort_temp_bytes(B, T)));
  encoder_backward(d_dwte->ptr, d_dwpe->ptr, d_dout->ptr, d_inp->ptr, B, T, C, scratch.base, 0);
  VecF dwte = dwte0, dwpe = dwpe0;
  encoder_backward_ref(dwte.data(), dwpe.data(), dout.data(), inp.data(), B, T, C);
  VecF g_dwte = download(d_dwte->ptr, dwte.size()), g_dwpe = download(d_dwpe->ptr, dwpe.size());
  expect_close("encoder_backward dwte", g_dwte, dwte, kTolF, kTolFMax);
  expect_close("encoder_backward dwpe", g_dwpe, dwpe, kTolF, kTolFMax);
  // Determinism: again from the same starting values.
  CUDA_CHECK(cudaMemcpy(d_dwte->ptr, dwte0.data(), dwte0.size() * 4, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(d_dwpe->ptr, dwpe0.data(), dwpe0.size() * 4, cudaMemcpyHostToDevice));
  encoder_backward(d_dwte->ptr, d_dwpe->ptr, d_dout->ptr, d_inp->ptr, B, T, C, scratch.base, 0);
  expect_bitwise_equal("encoder_backward dwte", download(d_dwte->ptr, dwte.size()).data(),
                       g_dwte.data(), dwte.size() * 4);
  expect_bitwise_equal("encoder_backward dwpe", download(d_dwpe->ptr, dwpe.size()).data(),
                       g_dwpe.data(), dwpe.size() * 4);
}

TEST_F(Kernels, Encoder) {
  SEED_TRACE();
  auto rng = test_rng();
  check_encoder(3, 17, 100, 1000, 1024, 20, false, 0, rng);    // ragged C: scalar path
  check_encoder(4, 64, 768, 50, 128, 64, false, 0, rng);       // 128-bit path, many repeats
  check_encoder(2, 33, 64, 1000, 1024, 40, true, 0, rng);      // one run of N equal tokens
  check_encoder(3, 17, 64, 1000, 1024, 17, false, 1, rng);     // misaligned: scalar path
}

// ---- layernorm -------------------------------------------------------------------------------

void check_layernorm(int N, int C, int offset, std::mt19937_64& rng) {
  SCOPED_TRACE("N=" + std::to_string(N) + " C=" + std::to_string(C));
  std::printf("layernorm N=%d C=%d offset=%d\n", N, C, offset);
  // A per-row offset and scale, so mean and rstd vary (and the variance is not trivially 1/3).
  VecF inp = uniform((size_t)N * C, rng);
  VecF rs = uniform(N, rng, 0.5f, 3.0f), ro = uniform(N, rng, -2.0f, 2.0f);
  for (int i = 0; i < N; i++)
    for (int c = 0; c < C; c++) inp[(size_t)i * C + c] = inp[(size_t)i * C + c] * rs[i] + ro[i];
  inp = round_x(inp);
  VecF w = round_x(uniform(C, rng, 0.5f, 1.5f)), b = round_x(uniform(C, rng, -0.5f, 0.5f));
  VecF dout = round_x(uniform((size_t)N * C, rng));
  VecF dinp0 = round_x(uniform((size_t)N * C, rng));
  VecF dw0 = uniform(C, rng), db0 = uniform(C, rng);

  Own<floatX> d_inp(upload_x(inp, offset)), d_w(upload_x(w, offset)), d_b(upload_x(b, offset)),
      d_dout(upload_x(dout, offset)), d_out(new Dev<floatX>((size_t)N * C, offset));
  Own<float> d_mean(new Dev<float>(N)), d_rstd(new Dev<float>(N));
  d_out->poison();
  d_mean->poison();
  d_rstd->poison();
  layernorm_forward(d_out->ptr, d_mean->ptr, d_rstd->ptr, d_inp->ptr, d_w->ptr, d_b->ptr, N, C, 0);
  VecF out((size_t)N * C), mean(N), rstd(N);
  layernorm_forward_ref(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
  expect_close("layernorm_forward out", download_x(d_out->ptr, out.size()), out, kTolX, kTolXMax);
  expect_close("layernorm_forward mean", download(d_mean->ptr, N), mean, kTolF, kTolFMax);
  expect_close("layernorm_forward rstd", download(d_rstd->ptr, N), rstd, kTolF, kTolFMax);

  // Backward from the reference's mean/rstd (the same statistics on both sides).
  Own<float> d_rmean(upload(mean)), d_rrstd(upload(rstd)), d_dw(upload(dw0)), d_db(upload(db0));
  Own<floatX> d_dinp(upload_x(dinp0, offset));
  DevMem scratch(layernorm_backward_scratch_bytes(C));
  layernorm_backward(d_dinp->ptr, d_dw->ptr, d_db->ptr, d_dout->ptr, d_inp->ptr, d_w->ptr,
                     d_rmean->ptr, d_rrstd->ptr, N, C, (float*)scratch.base, 0);
  VecF dinp = dinp0, dw = dw0, db = db0;
  layernorm_backward_ref(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(),
                         mean.data(), rstd.data(), N, C);
  VecF g_dw = download(d_dw->ptr, C), g_db = download(d_db->ptr, C);
  VecF g_dinp = download_x(d_dinp->ptr, dinp.size());
  expect_close("layernorm_backward dinp (+=)", g_dinp, dinp, kTolX, kTolXMax);
  expect_close("layernorm_backward dweight (+=)", g_dw, dw, kTolF, kTolFMax);
  expect_close("layernorm_backward dbias (+=)", g_db, db, kTolF, kTolFMax);
  // Determinism.
  CUDA_CHECK(cudaMemcpy(d_dw->ptr, dw0.data(), C * 4, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(d_db->ptr, db0.data(), C * 4, cudaMemcpyHostToDevice));
  layernorm_backward(d_dinp->ptr, d_dw->ptr, d_db->ptr, d_dout->ptr, d_inp->ptr, d_w->ptr,
                     d_rmean->ptr, d_rrstd->ptr, N, C, (float*)scratch.base, 0);
  expect_bitwise_equal("layernorm_backward dweight", download(d_dw->ptr, C).data(), g_dw.data(),
                       C * 4);
  expect_bitwise_equal("layernorm_backward dbias", download(d_db->ptr, C).data(), g_db.data(),
                       C * 4);
}

TEST_F(Kernels, LayerNorm) {
  SEED_TRACE();
  auto rng = test_rng();
  check_layernorm(37, 100, 0, rng);    // ragged: scalar path
  check_layernorm(300, 768, 0, rng);   // GPT-2 width: 128-bit path
  check_layernorm(5000, 64, 0, rng);   // more rows than backward blocks x warps
  check_layernorm(37, 64, 1, rng);     // misaligned: scalar path
  check_layernorm(40, 1600, 0, rng);   // d48 width: row in registers forward, looping backward
  check_layernorm(40, 300, 1, rng);    // scalar, 10 chunks per lane: looping forward and backward
}

// ---- matmul ----------------------------------------------------------------------------------

// gelu: forward through matmul_forward_gelu; residual: through matmul_forward_residual;
// dgelu: backward with dinp_pre_gelu (the GELU backward fused into dinp).
void check_matmul(int N, int C, int OC, bool with_bias, bool gelu, float dout_scale,
                  std::mt19937_64& rng, bool residual = false, bool dgelu = false) {
  SCOPED_TRACE("N=" + std::to_string(N) + " C=" + std::to_string(C) + " OC=" + std::to_string(OC));
  std::printf("matmul N=%d C=%d OC=%d%s%s%s%s dout_scale=%g\n", N, C, OC, with_bias ? " bias" : "",
              gelu ? " gelu" : "", residual ? " residual" : "", dgelu ? " dgelu" : "", dout_scale);
  VecF inp = round_x(uniform((size_t)N * C, rng)), w = round_x(uniform((size_t)OC * C, rng));
  VecF b = round_x(uniform(OC, rng)), dout = round_x(uniform((size_t)N * OC, rng));
  VecF dw0 = uniform((size_t)OC * C, rng), db0 = uniform(OC, rng);
  Own<floatX> d_inp(upload_x(inp)), d_w(upload_x(w)), d_b(upload_x(b)), d_dout(upload_x(dout));
  Own<floatX> d_out(new Dev<floatX>((size_t)N * OC)), d_pre(new Dev<floatX>((size_t)N * OC));
  d_out->poison();
  d_pre->poison();
  const float* bias_ref = with_bias ? b.data() : nullptr;
  const floatX* bias_dev = with_bias ? d_b->ptr : nullptr;
  VecF out((size_t)N * OC);
  matmul_forward_ref(out.data(), inp.data(), w.data(), bias_ref, N, C, OC);
  if (gelu) {
    matmul_forward_gelu(d_out->ptr, d_pre->ptr, d_inp->ptr, d_w->ptr, bias_dev, N, C, OC, 0);
    expect_close("matmul_forward_gelu pre_gelu", download_x(d_pre->ptr, out.size()), out, kTolX,
                 kTolXMax);
    VecF g(out.size());
    gelu_forward_ref(g.data(), out.data(), out.size());
    expect_close("matmul_forward_gelu out", download_x(d_out->ptr, out.size()), g, kTolX,
                 kTolXMax);
  } else if (residual) {
    VecF res = round_x(uniform((size_t)N * OC, rng));
    Own<floatX> d_res(upload_x(res));
    matmul_forward_residual(d_out->ptr, d_inp->ptr, d_w->ptr, bias_dev, d_res->ptr, N, C, OC, 0);
    VecF o2(out.size());
    residual_forward_ref(o2.data(), out.data(), res.data(), out.size());
    expect_close("matmul_forward_residual out", download_x(d_out->ptr, out.size()), o2, kTolX,
                 kTolXMax);
  } else {
    matmul_forward(d_out->ptr, d_inp->ptr, d_w->ptr, bias_dev, N, C, OC, 0);
    expect_close("matmul_forward out", download_x(d_out->ptr, out.size()), out, kTolX, kTolXMax);
  }

  // Backward. dout_scale != 1 is checked against the reference on a scaled dout.
  VecF dout_s = dout;
  for (float& x : dout_s) x *= dout_scale;
  Own<floatX> d_dinp(new Dev<floatX>((size_t)N * C));
  Own<float> d_dw(upload(dw0)), d_db(upload(db0));
  d_dinp->poison();
  DevMem scratch(matmul_backward_scratch_bytes(N, OC));
  VecF pre = round_x(uniform((size_t)N * C, rng, -3.0f, 3.0f));
  Own<floatX> d_pre_in(upload_x(pre));
  matmul_backward(d_dinp->ptr, d_dw->ptr, with_bias ? d_db->ptr : nullptr, d_dout->ptr,
                  d_inp->ptr, d_w->ptr, N, C, OC, (float*)scratch.base, 0, dout_scale,
                  dgelu ? d_pre_in->ptr : nullptr);
  VecF dinp((size_t)N * C), dw = dw0, db = db0;
  dinp.assign(dinp.size(), NAN);
  matmul_backward_ref(dinp.data(), dw.data(), with_bias ? db.data() : nullptr, dout_s.data(),
                      inp.data(), w.data(), N, C, OC);
  if (dgelu) gelu_backward_ref(dinp.data(), pre.data(), VecF(dinp).data(), dinp.size());
  expect_close(dgelu ? "matmul_backward dinp (dgelu)" : "matmul_backward dinp",
               download_x(d_dinp->ptr, dinp.size()), dinp, kTolX, kTolXMax);
  expect_close("matmul_backward dweight (+=)", download(d_dw->ptr, dw.size()), dw, kTolF,
               kTolFMax);
  VecF g_db = download(d_db->ptr, OC);
  expect_close("matmul_backward dbias (+=)", g_db, db, kTolF, kTolFMax);
  if (with_bias) {  // determinism of the dbias reduction
    CUDA_CHECK(cudaMemcpy(d_db->ptr, db0.data(), OC * 4, cudaMemcpyHostToDevice));
    matmul_backward(nullptr, d_dw->ptr, d_db->ptr, d_dout->ptr, d_inp->ptr, d_w->ptr, N, C, OC,
                    (float*)scratch.base, 0, dout_scale);
    expect_bitwise_equal("matmul_backward dbias", download(d_db->ptr, OC).data(), g_db.data(),
                         OC * 4);
  }
}

TEST_F(Kernels, Matmul) {
  SEED_TRACE();
  auto rng = test_rng();
  check_matmul(37, 100, 300, true, false, 1.0f, rng);    // ragged (bias-add fallback likely)
  check_matmul(37, 100, 300, false, false, 1.0f, rng);   // no bias
  check_matmul(64, 96, 1024, false, false, 0.25f, rng);  // lm-head shape: no bias, scaled dout
  check_matmul(256, 768, 2304, true, false, 1.0f, rng);  // GPT-2 qkv: bias epilogue
  check_matmul(300, 96, 37, true, false, 1.0f, rng);     // OC ragged: scalar dbias path
}

TEST_F(Kernels, MatmulResidualDgelu) {
  SEED_TRACE();
  auto rng = test_rng();
  check_matmul(37, 100, 300, true, false, 1.0f, rng, true, false);     // ragged: fallbacks
  check_matmul(256, 3072, 768, true, false, 1.0f, rng, true, true);    // GPT-2 fcproj
  check_matmul(256, 768, 768, true, false, 1.0f, rng, true, false);    // GPT-2 attproj
  check_matmul(37, 100, 300, true, false, 1.0f, rng, false, true);     // dgelu, C % 8 != 0
}

TEST_F(Kernels, MatmulGelu) {
  SEED_TRACE();
  auto rng = test_rng();
  check_matmul(37, 100, 400, true, true, 1.0f, rng);     // ragged N, C
  check_matmul(256, 768, 3072, true, true, 1.0f, rng);   // GPT-2 fc: GELU_AUX_BIAS epilogue
  check_matmul(37, 100, 300, true, true, 1.0f, rng);     // OC % 8 != 0: fallback path
}

// With tuning every candidate runs on the real operands first: results stay the reference's,
// and an accumulating product (dweight +=, beta = 1 into D) still adds once, its candidates
// timed into an allocation of their own or into the scratch the model plans.
TEST_F(Kernels, MatmulTuned) {
  SEED_TRACE();
  auto rng = test_rng();
  matmul_init(workspace_, matmul_workspace_bytes(), true);
  check_matmul(256, 768, 2304, true, false, 1.0f, rng);               // qkv
  check_matmul(256, 3072, 768, true, false, 1.0f, rng, true, true);   // fcproj: residual, DGELU
  check_matmul(256, 768, 3072, true, true, 1.0f, rng);                // fc: GELU_AUX_BIAS
  check_matmul(64, 96, 1024, false, false, 0.25f, rng);               // lm-head shape
  check_matmul(37, 100, 300, true, false, 1.0f, rng);                 // ragged
  // With the model's planned tuning scratch (matmul_init's tune_scratch): the accumulating
  // products' candidates are timed there, so it must have been written; one too small for the
  // product leaves the heuristic's choice, still correct. (A change of `tune` empties the
  // algorithm cache, so that the products are timed again.)
  DevMem scratch(matmul_tune_scratch_bytes(768, 2304));
  scratch.poison();
  matmul_init(workspace_, matmul_workspace_bytes());
  matmul_init(workspace_, matmul_workspace_bytes(), true, nullptr, nullptr, scratch.ptr,
              scratch.bytes());
  check_matmul(256, 768, 2304, true, false, 1.0f, rng);
  const std::vector<char> host = scratch.download();
  EXPECT_FALSE(std::all_of(host.begin(), host.end(), [](char b) { return b == (char)0xff; }))
      << "the accumulating product was not timed in the tuning scratch";
  matmul_init(workspace_, matmul_workspace_bytes());
  matmul_init(workspace_, matmul_workspace_bytes(), true, nullptr, nullptr, scratch.ptr, 64);
  check_matmul(256, 3072, 768, true, false, 1.0f, rng);
  matmul_init(workspace_, matmul_workspace_bytes());
}

// The model's backward queues each product's dinp on its stream and the dweight and dbias on a
// second one (matmul_init's second stream, with its own workspace), running at once: the bits
// must be those of matmul_backward on one stream, itself checked against the reference above.
// d12's fc shape with a deep k (the dweight product's k is N), where cuBLASLt uses its workspace.
TEST_F(Kernels, MatmulBackwardOnTwoStreams) {
  SEED_TRACE();
  auto rng = test_rng();
  const int N = 4096, C = 768, OC = 3072;
  VecF inp = round_x(uniform((size_t)N * C, rng)), w = round_x(uniform((size_t)OC * C, rng));
  VecF dout = round_x(uniform((size_t)N * OC, rng)), pre = round_x(uniform((size_t)N * C, rng));
  VecF dw0 = uniform((size_t)OC * C, rng), db0 = uniform(OC, rng);
  Own<floatX> d_inp(upload_x(inp)), d_w(upload_x(w)), d_dout(upload_x(dout)), d_pre(upload_x(pre));
  Own<floatX> d_dinp(new Dev<floatX>((size_t)N * C));
  Own<float> d_dw(upload(dw0)), d_db(upload(db0));
  DevMem scratch(matmul_backward_scratch_bytes(N, OC)), second_ws(matmul_workspace_bytes());
  matmul_backward(d_dinp->ptr, d_dw->ptr, d_db->ptr, d_dout->ptr, d_inp->ptr, d_w->ptr, N, C, OC,
                  (float*)scratch.base, 0, 1.0f, d_pre->ptr);
  const VecF want_dinp = download_x(d_dinp->ptr, (size_t)N * C);
  const VecF want_dw = download(d_dw->ptr, dw0.size()), want_db = download(d_db->ptr, OC);

  cudaStream_t chain, wgrad;
  CUDA_CHECK(cudaStreamCreate(&chain));
  CUDA_CHECK(cudaStreamCreate(&wgrad));
  matmul_init(workspace_, matmul_workspace_bytes(), false, wgrad, second_ws.base);
  for (int round = 0; round < 3; round++) {
    CUDA_CHECK(cudaMemcpy(d_dw->ptr, dw0.data(), dw0.size() * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_db->ptr, db0.data(), OC * 4, cudaMemcpyHostToDevice));
    d_dinp->poison();
    CUDA_CHECK(cudaDeviceSynchronize());
    matmul_backward_dweight(d_dw->ptr, d_db->ptr, d_dout->ptr, d_inp->ptr, N, C, OC,
                            (float*)scratch.base, wgrad);
    matmul_backward_dinp(d_dinp->ptr, d_dout->ptr, d_w->ptr, N, C, OC, chain, 1.0f, d_pre->ptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    expect_bitwise_equal("two streams: dinp", download_x(d_dinp->ptr, want_dinp.size()).data(),
                         want_dinp.data(), want_dinp.size() * sizeof(float));
    expect_bitwise_equal("two streams: dweight", download(d_dw->ptr, want_dw.size()).data(),
                         want_dw.data(), want_dw.size() * sizeof(float));
    expect_bitwise_equal("two streams: dbias", download(d_db->ptr, OC).data(), want_db.data(),
                         OC * sizeof(float));
  }
  matmul_init(workspace_, matmul_workspace_bytes());
  CUDA_CHECK(cudaStreamDestroy(chain));
  CUDA_CHECK(cudaStreamDestroy(wgrad));
}

// ---- gelu, residual --------------------------------------------------------------------------

TEST_F(Kernels, Gelu) {
  SEED_TRACE();
  auto rng = test_rng();
  for (size_t n : {(size_t)1, (size_t)7, (size_t)1001, (size_t)100003}) {
    for (int offset : {0, 1}) {
      std::printf("gelu n=%zu offset=%d\n", n, offset);
      VecF x = round_x(uniform(n, rng, -4.0f, 4.0f)), dout = round_x(uniform(n, rng));
      Own<floatX> d_x(upload_x(x, offset)), d_dout(upload_x(dout, offset)),
          d_out(new Dev<floatX>(n, offset)), d_dinp(new Dev<floatX>(n, offset));
      d_out->poison();
      d_dinp->poison();
      gelu_forward(d_out->ptr, d_x->ptr, n, 0);
      gelu_backward(d_dinp->ptr, d_x->ptr, d_dout->ptr, n, 0);
      VecF out(n), dinp(n);
      gelu_forward_ref(out.data(), x.data(), n);
      gelu_backward_ref(dinp.data(), x.data(), dout.data(), n);
      // gelu and gelu' pass through zero where O(0.1..1) terms cancel (gelu' near x = -0.75):
      // fp32 keeps their absolute error, not the result's relative one (FP32 build, n = 1).
      const double floor = 0.1;
      expect_close("gelu_forward out", download_x(d_out->ptr, n), out, kTolX, kTolXMax, floor);
      expect_close("gelu_backward dinp", download_x(d_dinp->ptr, n), dinp, kTolX, kTolXMax, floor);
      // In place (dinp == dout), as the model runs it.
      gelu_backward(d_dout->ptr, d_x->ptr, d_dout->ptr, n, 0);
      expect_close("gelu_backward dinp (in place)", download_x(d_dout->ptr, n), dinp, kTolX,
                   kTolXMax, floor);
    }
  }
}

TEST_F(Kernels, Residual) {
  SEED_TRACE();
  auto rng = test_rng();
  for (size_t n : {(size_t)3, (size_t)3700, (size_t)100003}) {
    for (int offset : {0, 1}) {
      std::printf("residual n=%zu offset=%d\n", n, offset);
      VecF a = round_x(uniform(n, rng)), b = round_x(uniform(n, rng));
      Own<floatX> d_a(upload_x(a, offset)), d_b(upload_x(b, offset)), d_o(new Dev<floatX>(n, offset));
      d_o->poison();
      residual_forward(d_o->ptr, d_a->ptr, d_b->ptr, n, 0);
      VecF o(n);
      residual_forward_ref(o.data(), a.data(), b.data(), n);
      expect_close("residual_forward out", download_x(d_o->ptr, n), o, kTolX, kTolXMax);
    }
  }
}

TEST_F(Kernels, Scale) {  // the chunked classifier's two scalings (model/gpt_cuda.cu)
  SEED_TRACE();
  auto rng = test_rng();
  for (size_t n : {(size_t)1, (size_t)3700, (size_t)1000003}) {
    std::printf("scale n=%zu\n", n);
    VecF y = uniform(n, rng), x = uniform(n, rng), z = round_x(uniform(n, rng));
    Own<float> d_y(upload(y)), d_x(upload(x));
    Own<floatX> d_z(upload_x(z));
    scale_add(d_y->ptr, d_x->ptr, 0.37f, n, 0);
    scale_floatX(d_z->ptr, 0.37f, n, 0);
    scale_add_ref(y.data(), x.data(), 0.37f, n);
    scale_ref(z.data(), 0.37f, n);
    expect_close("scale_add y", download(d_y->ptr, n), y, kTolF, kTolFMax);
    expect_close("scale_floatX x", download_x(d_z->ptr, n), z, kTolX, kTolXMax);
  }
}

// ---- classifier ------------------------------------------------------------------------------

void check_classifier(int N, int V, int Vp, bool in_place, bool with_grad, std::mt19937_64& rng) {
  SCOPED_TRACE("N=" + std::to_string(N) + " V=" + std::to_string(V) + " Vp=" + std::to_string(Vp));
  std::printf("classifier N=%d V=%d Vp=%d%s%s\n", N, V, Vp, in_place ? " in-place" : "",
              with_grad ? "" : " losses-only");
  VecF logits = round_x(uniform((size_t)N * Vp, rng, -6.0f, 6.0f));
  // Padded columns hold garbage in the model's buffer too (never part of the softmax).
  std::vector<int> targets = tokens(N, V, rng);
  const float dloss = 1.0f / (N * 3.0f);
  Own<floatX> d_logits(upload_x(logits)), d_dlogits(new Dev<floatX>((size_t)N * Vp));
  Own<int> d_t(upload(targets));
  Own<float> d_losses(new Dev<float>(N));
  d_losses->poison();
  d_dlogits->poison();
  floatX* dl = !with_grad ? nullptr : in_place ? d_logits->ptr : d_dlogits->ptr;
  classifier(d_losses->ptr, dl, d_logits->ptr, d_t->ptr, dloss, N, V, Vp, 0);
  VecF losses(N), dlogits((size_t)N * Vp);
  classifier_ref(losses.data(), dlogits.data(), logits.data(), targets.data(), dloss, N, V, Vp);
  expect_close("classifier losses", download(d_losses->ptr, N), losses, kTolF, kTolFMax);
  if (with_grad)
    expect_close(in_place ? "classifier dlogits (in place)" : "classifier dlogits",
                 download_x(dl, dlogits.size()), dlogits, kTolX, kTolXMax);
  // mean_loss
  Own<float> d_mean(new Dev<float>(1));
  d_mean->poison();
  mean_loss(d_mean->ptr, d_losses->ptr, N, 0);
  double s = 0;
  for (float l : losses) s += l;
  expect_close("mean_loss", download(d_mean->ptr, 1), VecF{(float)(s / N)}, kTolF, kTolFMax);
}

TEST_F(Kernels, Classifier) {
  SEED_TRACE();
  auto rng = test_rng();
  check_classifier(37, 1000, 1024, false, true, rng);
  check_classifier(37, 1000, 1024, true, true, rng);
  check_classifier(37, 1000, 1024, false, false, rng);
  check_classifier(5, 50257, 50304, true, true, rng);  // GPT-2 vocabulary: many chunks per thread
  check_classifier(9, 100, 103, false, true, rng);     // Vp % 8 != 0: scalar path
}

// ---- adamw, global norm ------------------------------------------------------------------------

// The multi-tensor update against adamw_update_ref piece by piece. The pieces sit in one buffer
// the way the model's tensors and ZeRO-1 slices do: 128-bit aligned ones, one 4 bytes past
// alignment (the one-element path), tails of n % 4, empty and one-element pieces, moments at
// other offsets than the parameters, different weight decays; the elements between pieces
// must not change. The clip scale comes from a norm on the device: clipping on, off by the
// norm, off by clip <= 0; a NaN or infinite norm must leave every buffer bit for bit.
TEST_F(Kernels, AdamW) {
  SEED_TRACE();
  auto rng = test_rng();
  //                 begin  count   opt_offset  weight decay
  const std::vector<AdamWPiece> pieces = {{0, 1001, 8, 0.1f},
                                          {1004, 300007, 1012, 0.0f},    // aligned, n % 4 = 3
                                          {301013, 4099, 301020, 0.1f},  // 4 bytes past alignment
                                          {305200, 0, 305300, 0.1f},     // empty
                                          {305200, 1, 305300, 0.0f},
                                          {305204, 70000, 305304, 0.5f}};
  const size_t P = 375300, S = 375400;
  const float lr = 1e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f;
  const int t = 5;
  struct Case { double norm_squared; float clip; const char* what; };
  const Case cases[] = {{4.0, 1.0f, "clipped (norm 2, clip 1)"},
                        {0.25, 1.0f, "norm 0.5 under clip 1"},
                        {9.0, 0.0f, "clip off"},
                        {std::nan(""), 1.0f, "NaN norm: no update"},
                        {INFINITY, 1.0f, "infinite norm: no update"}};
  for (const Case& c : cases) {
    std::printf("adamw: %s\n", c.what);
    VecF p = uniform(P, rng), g = uniform(P, rng, -0.1f, 0.1f), m = uniform(S, rng, -0.01f, 0.01f),
         v = uniform(S, rng, 0.0f, 1e-4f);
    Own<float> d_p(upload(p)), d_g(upload(g)), d_m(upload(m)), d_v(upload(v));
    Own<floatX> d_px(new Dev<floatX>(P));
    d_px->poison();
    Own<double> d_norm(upload(std::vector<double>{c.norm_squared}));
    adamw_update(d_p->ptr, d_px->ptr, d_g->ptr, d_m->ptr, d_v->ptr, pieces.data(),
                 (int)pieces.size(), d_norm->ptr, c.clip, lr, b1, b2, eps, t, 0);
    const VecF gp = download(d_p->ptr, P), gm = download(d_m->ptr, S), gv = download(d_v->ptr, S);
    const std::vector<floatX> gpx = download(d_px->ptr, P);
    auto poisoned = [](floatX x) {  // still the 0xff bytes of poison(): never written
      unsigned char bytes[sizeof(floatX)];
      std::memcpy(bytes, &x, sizeof x);
      return std::all_of(bytes, bytes + sizeof x, [](unsigned char b) { return b == 0xff; });
    };
    const float norm = grad_norm_from_squared(c.norm_squared);
    if (!std::isfinite(norm)) {
      EXPECT_EQ(std::memcmp(gp.data(), p.data(), P * sizeof(float)), 0) << "params changed";
      EXPECT_EQ(std::memcmp(gm.data(), m.data(), S * sizeof(float)), 0) << "m changed";
      EXPECT_EQ(std::memcmp(gv.data(), v.data(), S * sizeof(float)), 0) << "v changed";
      EXPECT_TRUE(std::all_of(gpx.begin(), gpx.end(), poisoned)) << "params_x written";
      continue;
    }
    const float scale = clip_scale(norm, c.clip);
    EXPECT_EQ(scale, c.clip > 0 && c.norm_squared > c.clip * c.clip ? c.clip / norm : 1.0f);
    VecF p0 = p, m0 = m, v0 = v;
    std::vector<char> in_piece(P, 0), in_opt(S, 0);
    for (const AdamWPiece& pc : pieces) {
      adamw_update_ref(p.data() + pc.begin, g.data() + pc.begin, m.data() + pc.opt_offset,
                       v.data() + pc.opt_offset, pc.count, lr, b1, b2, eps, pc.weight_decay,
                       scale, t);
      for (size_t i = 0; i < pc.count; i++) in_piece[pc.begin + i] = in_opt[pc.opt_offset + i] = 1;
    }
    // The update itself is ~lr; compare the change p - p0 so that the tolerance bites on it.
    VecF dp_got(P), dp_ref(P);
    for (size_t i = 0; i < P; i++) { dp_got[i] = gp[i] - p0[i]; dp_ref[i] = p[i] - p0[i]; }
    expect_close("adamw update (p - p0)", dp_got, dp_ref, 1e-3, 2e-3);  // fp32 p - p0 cancels ~3 digits
    expect_close("adamw params", gp, p, kTolF, kTolFMax);
    expect_close("adamw m", gm, m, kTolF, kTolFMax);
    expect_close("adamw v", gv, v, kTolF, kTolFMax);
    int outside_changed = 0, px_wrong = 0;
    for (size_t i = 0; i < P; i++) {
      const bool x_poisoned = poisoned(gpx[i]);
      if (!in_piece[i]) outside_changed += gp[i] != p0[i] || !x_poisoned;
      else px_wrong += x_poisoned;
    }
    for (size_t i = 0; i < S; i++)
      if (!in_opt[i]) outside_changed += gm[i] != m0[i] || gv[i] != v0[i];
    EXPECT_EQ(outside_changed, 0) << "elements outside every piece changed";
    EXPECT_EQ(px_wrong, 0) << "params_x left unwritten inside a piece";
    VecF px = to_float(gpx), pref = p;
    for (size_t i = 0; i < P; i++) if (!in_piece[i]) px[i] = pref[i] = 0;
    expect_close("adamw params_x", px, pref, kTolX, kTolXMax);
  }
  // copy_float_to_floatX
  VecF x = uniform(1001, rng);
  Own<float> d_x(upload(x));
  Own<floatX> d_y(new Dev<floatX>(x.size()));
  d_y->poison();
  copy_float_to_floatX(d_y->ptr, d_x->ptr, x.size(), 0);
  expect_close("copy_float_to_floatX", download_x(d_y->ptr, x.size()), round_x(x), 1e-30, 1e-30);
}

TEST_F(Kernels, GlobalNorm) {
  SEED_TRACE();
  auto rng = test_rng();
  for (size_t n : {(size_t)1, (size_t)1000, (size_t)12345677}) {
    std::printf("global_norm n=%zu\n", n);
    VecF g = uniform(n, rng, -0.01f, 0.01f);
    Own<float> d_g(upload(g));
    Own<double> d_out(new Dev<double>(1));
    d_out->poison();
    DevMem scratch(global_norm_scratch_bytes());
    global_norm_squared(d_out->ptr, d_g->ptr, n, (double*)scratch.base, 0);
    const double got = download(d_out->ptr, 1)[0], ref = global_norm_squared_ref(g.data(), n);
    expect_close("global_norm_squared", VecF{(float)got}, VecF{(float)ref}, kTolF, kTolFMax);
    global_norm_squared(d_out->ptr, d_g->ptr, n, (double*)scratch.base, 0);
    const double again = download(d_out->ptr, 1)[0];
    expect_bitwise_equal("global_norm_squared", &got, &again, sizeof(double));
  }
}

// ---- encoder without learned positions (wpe == nullptr, dwpe == nullptr; RoPE models) ------

TEST_F(Kernels, EncoderNoPositionTable) {
  SEED_TRACE();
  auto rng = test_rng();
  for (int C : {100, 768}) {  // scalar and 128-bit paths
    const int B = 3, T = 17, V = 1000, Vp = 1024;
    const size_t N = (size_t)B * T;
    std::printf("encoder (no wpe) B=%d T=%d C=%d\n", B, T, C);
    std::vector<int> inp = tokens(N, V, rng);
    VecF wte = round_x(uniform((size_t)Vp * C, rng)), dout = round_x(uniform(N * C, rng));
    VecF dwte0 = uniform((size_t)Vp * C, rng);
    Own<int> d_inp(upload(inp));
    Own<floatX> d_wte(upload_x(wte)), d_dout(upload_x(dout)), d_out(new Dev<floatX>(N * C));
    d_out->poison();
    encoder_forward(d_out->ptr, d_inp->ptr, d_wte->ptr, nullptr, B, T, C, 0);
    VecF ref(N * C);
    encoder_forward_ref(ref.data(), inp.data(), wte.data(), (const float*)nullptr, B, T, C);
    // A copy of bf16 rows: exact.
    expect_close("encoder_forward out (wpe = nullptr)", download_x(d_out->ptr, N * C), ref, 1e-30,
                 1e-30);
    Own<float> d_dwte(upload(dwte0));
    DevMem scratch(encoder_backward_scratch_bytes(B, T, encoder_sort_temp_bytes(B, T)));
    encoder_backward(d_dwte->ptr, nullptr, d_dout->ptr, d_inp->ptr, B, T, C, scratch.base, 0);
    VecF dwte = dwte0;
    encoder_backward_ref(dwte.data(), (float*)nullptr, dout.data(), inp.data(), B, T, C);
    expect_close("encoder_backward dwte (dwpe = nullptr)", download(d_dwte->ptr, dwte.size()), dwte,
                 kTolF, kTolFMax);
  }
}

// ---- the CUDA event timer (kernels/cuda_timer.cuh) -------------------------------------------

// Spins one thread for `ns` nanoseconds of the GPU's global timer.
__global__ void spin_kernel(unsigned long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}

// Three 2 ms intervals through a timer that holds two at a time (the third folds the first two
// in), then median_ms of the same kernel: both measure what the kernel takes, not the host.
TEST_F(Kernels, CudaEventTimer) {
  cudaStream_t st;
  CUDA_CHECK(cudaStreamCreate(&st));
  CudaEventTimer timer(2);
  for (int i = 0; i < 3; i++) {
    timer.start(st);
    spin_kernel<<<1, 1, 0, st>>>(2000000ull);
    CUDA_CHECK_LAUNCH();
    timer.stop(st);
    spin_kernel<<<1, 1, 0, st>>>(1000000ull);  // between intervals: not counted
  }
  const double ms = timer.take_ms();
  std::printf("  3 intervals of 2 ms: %.3f ms; median_ms of one: ", ms);
  // 2% below for the global timer's and the events' clocks disagreeing; the 3 ms outside the
  // intervals would push the sum past 9.
  EXPECT_GE(ms, 0.98 * 6.0);
  EXPECT_LT(ms, 7.5);
  EXPECT_EQ(timer.take_ms(), 0.0);  // taken: starts again from zero
  const double one = median_ms([&] { spin_kernel<<<1, 1, 0, st>>>(2000000ull); }, 1, 5, 0, st);
  std::printf("%.3f ms\n", one);
  EXPECT_GE(one, 0.98 * 2.0);
  EXPECT_LT(one, 2.5);
  // warmup_ms: untimed runs until 20 ms of them (about 10 of 2 ms), then the 5 timed ones
  int calls = 0;
  const double warmed = median_ms(
      [&] {
        ++calls;
        spin_kernel<<<1, 1, 0, st>>>(2000000ull);
      },
      1, 5, 0, st, /*warmup_ms=*/20.0);
  std::printf("  median_ms after a 20 ms warm-up: %.3f ms, %d runs\n", warmed, calls);
  EXPECT_GE(warmed, 0.98 * 2.0);
  EXPECT_GE(calls, 5 + 9);   // 20 ms of 2 ms runs (at most 2.5 ms each: 8 + the counted one)
  EXPECT_LE(calls, 5 + 11);  // and no more than the 20 ms need
  CUDA_CHECK(cudaStreamDestroy(st));
}

}  // namespace
