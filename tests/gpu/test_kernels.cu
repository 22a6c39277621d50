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
#define GTEST_DONT_DEFINE_FAIL 1  // kernels/common.h defines FAIL(...)
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

uint64_t base_seed() {
  static const uint64_t seed = [] {
    const char* env = std::getenv("FLASHGPT_SEED");
    return env ? std::strtoull(env, nullptr, 10) : (uint64_t)std::random_device{}();
  }();
  return seed;
}
std::mt19937_64 test_rng() {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = std::string(info->test_suite_name()) + "." + info->name();
  return std::mt19937_64(base_seed() ^ std::hash<std::string>{}(name));
}
#define SEED_TRACE() SCOPED_TRACE("FLASHGPT_SEED=" + std::to_string(base_seed()))

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

// A raw device allocation with `pad` spare bytes in front, so tests can hand out pointers at
// a chosen misalignment.
struct DevMem {
  char* base = nullptr;
  size_t bytes = 0;
  explicit DevMem(size_t n) : bytes(n) { CUDA_CHECK(cudaMalloc(&base, std::max<size_t>(n, 1) + 256)); }
  ~DevMem() { cudaFree(base); }
  DevMem(const DevMem&) = delete;
  DevMem& operator=(const DevMem&) = delete;
};

template <class T>
struct Dev {
  DevMem mem;
  T* ptr;
  size_t n;
  // offset_elems > 0 misaligns the pointer (e.g. 1 bf16 = 2 bytes off 16-byte alignment).
  explicit Dev(size_t n_, int offset_elems = 0)
      : mem(n_ * sizeof(T) + offset_elems * sizeof(T)), n(n_) {
    ptr = reinterpret_cast<T*>(mem.base) + offset_elems;
  }
  void poison() { CUDA_CHECK(cudaMemset(ptr, 0xFF, n * sizeof(T))); }  // NaN in fp32 and bf16
};

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

// ref_floor > 0: errors relative to max(|ref|, ref_floor) per element scale, for outputs that
// cross zero by cancellation of O(ref_floor) terms (a lone element there has no relative scale).
void expect_close(const std::string& what, const VecF& got, const VecF& ref, double tol_l2,
                  double tol_max, double ref_floor = 0) {
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
  DevMem scratch(encoder_backward_scratch_bytes(B, T));
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

TEST_F(Kernels, AdamW) {
  SEED_TRACE();
  auto rng = test_rng();
  for (size_t n : {(size_t)1, (size_t)1001, (size_t)300007}) {
    std::printf("adamw n=%zu\n", n);
    VecF p = uniform(n, rng), g = uniform(n, rng, -0.1f, 0.1f), m = uniform(n, rng, -0.01f, 0.01f),
         v = uniform(n, rng, 0.0f, 1e-4f);
    Own<float> d_p(upload(p)), d_g(upload(g)), d_m(upload(m)), d_v(upload(v));
    Own<floatX> d_px(new Dev<floatX>(n));
    d_px->poison();
    const float lr = 1e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.7f;
    const int t = 5;
    adamw_update(d_p->ptr, d_px->ptr, d_g->ptr, d_m->ptr, d_v->ptr, n, lr, b1, b2, eps, wd, gs, t, 0);
    VecF p0 = p;
    adamw_update_ref(p.data(), g.data(), m.data(), v.data(), n, lr, b1, b2, eps, wd, gs, t);
    // The update itself is ~lr; compare the change p - p0 so that the tolerance bites on it.
    VecF gp = download(d_p->ptr, n), dp_got(n), dp_ref(n);
    for (size_t i = 0; i < n; i++) { dp_got[i] = gp[i] - p0[i]; dp_ref[i] = p[i] - p0[i]; }
    expect_close("adamw update (p - p0)", dp_got, dp_ref, 1e-3, 2e-3);  // fp32 p - p0 cancels ~3 digits
    expect_close("adamw params", gp, p, kTolF, kTolFMax);
    expect_close("adamw m", download(d_m->ptr, n), m, kTolF, kTolFMax);
    expect_close("adamw v", download(d_v->ptr, n), v, kTolF, kTolFMax);
    expect_close("adamw params_x", download_x(d_px->ptr, n), p, kTolX, kTolXMax);
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

// ---- timing at GPT-2 124M shapes (not a check; run with --gtest_also_run_disabled_tests) -----
//   build/test_gpu --gtest_also_run_disabled_tests --gtest_filter='Kernels.DISABLED_Bench*'
// Each op on random data at d12, B=32, T=1024 (N = 32768, C = 768, Vp = 50304): median of 20
// timed calls after 3 warm-ups (CUDA events), the minimum bytes it must move and the rate
// that gives, or TFLOP/s for the products.

template <class T>
__global__ void fill_random_kernel(T* p, size_t n, uint32_t seed, float scale) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  uint32_t h = (uint32_t)i * 2654435761u ^ seed;
  h ^= h >> 16; h *= 0x7feb352du; h ^= h >> 15; h *= 0x846ca68bu; h ^= h >> 16;
  p[i] = T(scale * ((h >> 8) * (1.0f / 16777216.0f) * 2.0f - 1.0f));
}
template <class T>
T* dev_random(size_t n, uint32_t seed, float scale = 1.0f) {
  T* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, n * sizeof(T)));
  fill_random_kernel<T><<<ceil_div(n, (size_t)256), 256>>>(p, n, seed, scale);
  CUDA_CHECK_LAUNCH();
  return p;
}

void report_bw(const char* what, double us, double bytes) {
  std::printf("  %-44s %9.1f us  %7.0f GB/s   (%.0f MB moved at least)\n", what, us,
              bytes / (us * 1e-6) / 1e9, bytes / 1e6);
}
void report_flops(const char* what, double us, double flops) {
  std::printf("  %-44s %9.1f us  %7.0f TFLOP/s\n", what, us, flops / (us * 1e-6) / 1e12);
}

TEST_F(Kernels, DISABLED_BenchD12Shapes) {
  const int B = 32, T = 1024, N = B * T, C = 768, V = 50257, Vp = 50304, L = 12;
  const size_t NC = (size_t)N * C, P = 124475904;
  const double es = sizeof(floatX);
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("kernel timings on %s (%s), N=%d C=%d Vp=%d\n", prop.name, PRECISION_NAME, N, C, Vp);
  floatX *x = dev_random<floatX>(NC, 1), *y = dev_random<floatX>(NC, 2), *z = dev_random<floatX>(NC, 3);
  floatX *h4 = dev_random<floatX>(4 * NC, 4), *g4 = dev_random<floatX>(4 * NC, 5);
  floatX *w = dev_random<floatX>(4 * (size_t)C * C, 6, 0.02f), *bias = dev_random<floatX>(4 * C, 7);
  floatX *wte = dev_random<floatX>((size_t)Vp * C, 8, 0.02f), *wpe = dev_random<floatX>((size_t)T * C, 9);
  floatX* logits = dev_random<floatX>((size_t)N * Vp, 10, 4.0f);
  float *fw = dev_random<float>(4 * (size_t)C * C, 11), *fb = dev_random<float>(4 * C, 12);
  float *mean = dev_random<float>(N, 13), *rstd = dev_random<float>(N, 14);
  float* losses = dev_random<float>(N, 15);
  float *master = dev_random<float>(P, 16), *grads = dev_random<float>(P, 17, 1e-3f),
        *m = dev_random<float>(P, 18, 1e-3f), *v = dev_random<float>(P, 19, 1e-6f);
  floatX* params = dev_random<floatX>(P, 20);
  std::mt19937_64 rng(1);
  std::vector<int> tok = tokens(N, V, rng);
  int* d_tok = nullptr;
  CUDA_CHECK(cudaMalloc(&d_tok, N * sizeof(int)));
  CUDA_CHECK(cudaMemcpy(d_tok, tok.data(), N * sizeof(int), cudaMemcpyHostToDevice));
  void* scratch = nullptr;
  const size_t sb = std::max({layernorm_backward_scratch_bytes(C),
                              matmul_backward_scratch_bytes(N, 4 * C),
                              encoder_backward_scratch_bytes(B, T), global_norm_scratch_bytes()});
  CUDA_CHECK(cudaMalloc(&scratch, sb));
  float* ks = (float*)scratch;
  double* dnorm = nullptr;
  CUDA_CHECK(cudaMalloc(&dnorm, sizeof(double)));
  float* dwte = dev_random<float>((size_t)Vp * C, 21), *dwpe = dev_random<float>((size_t)T * C, 22);
  CUDA_CHECK(cudaDeviceSynchronize());

  std::printf("memory-bound ops (per call; a d12 step has L=%d of each per-layer op):\n", L);
  report_bw("encoder_forward", median_us([&] { encoder_forward(x, d_tok, wte, wpe, B, T, C, 0); }),
            3 * NC * es);
  report_bw("encoder_backward (sort + dwte + dwpe)",
            median_us([&] { encoder_backward(dwte, dwpe, y, d_tok, B, T, C, scratch, 0); }),
            NC * es + 2 * NC * 4.0 / 64);
  report_bw("layernorm_forward", median_us([&] { layernorm_forward(z, mean, rstd, x, w, bias, N, C, 0); }),
            2 * NC * es + 2 * N * 4.0);
  report_bw("layernorm_backward (dinp +=, dw/db partials)",
            median_us([&] { layernorm_backward(z, fw, fb, y, x, w, mean, rstd, N, C, ks, 0); }),
            4 * NC * es + 2 * N * 4.0);
  report_bw("residual_forward", median_us([&] { residual_forward(z, x, y, NC, 0); }), 3 * NC * es);
  report_bw("gelu_forward (N x 4C)", median_us([&] { gelu_forward(g4, h4, 4 * NC, 0); }),
            2 * 4 * NC * es);
  report_bw("gelu_backward (N x 4C)", median_us([&] { gelu_backward(g4, h4, g4, 4 * NC, 0); }),
            3 * 4 * NC * es);
  {
    std::vector<int> tg = tokens(N, V, rng);
    int* d_tg = nullptr;
    CUDA_CHECK(cudaMalloc(&d_tg, N * sizeof(int)));
    CUDA_CHECK(cudaMemcpy(d_tg, tg.data(), N * sizeof(int), cudaMemcpyHostToDevice));
    report_bw("classifier losses only", median_us([&] {
                classifier(losses, nullptr, logits, d_tg, 1.0f / N, N, V, Vp, 0);
              }), (double)N * Vp * es);
    // In place over the same logits every call: the values change but the work does not.
    report_bw("classifier losses + dlogits in place", median_us([&] {
                classifier(losses, logits, logits, d_tg, 1.0f / N, N, V, Vp, 0);
              }), 2.0 * N * Vp * es);
    CUDA_CHECK(cudaFree(d_tg));
  }
  report_bw("adamw (124M params, fp32 + floatX copy)", median_us([&] {
              adamw_update(master, params, grads, m, v, P, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f, 3, 0);
            }), P * (4.0 * 4 + 3 * 4 + es));
  report_bw("global_norm_squared (124M fp32)",
            median_us([&] { global_norm_squared(dnorm, grads, P, (double*)scratch, 0); }), P * 4.0);

  std::printf("matrix products (2*N*C*OC flops each; backward = dinp + dweight (+ dbias)):\n");
  struct Shape { const char* name; int Cin, OC; };
  const Shape shapes[] = {{"qkv     C->3C", C, 3 * C}, {"attproj C->C", C, C},
                          {"fc      C->4C", C, 4 * C}, {"fcproj 4C->C", 4 * C, C}};
  for (const Shape& sh : shapes) {
    const double f = 2.0 * N * sh.Cin * sh.OC;
    floatX* in = sh.Cin == C ? x : h4;
    floatX* out = sh.OC == C ? z : g4;
    char name[96];
    std::snprintf(name, sizeof(name), "%s forward (bias epilogue)", sh.name);
    report_flops(name, median_us([&] { matmul_forward(out, in, w, bias, N, sh.Cin, sh.OC, 0); }), f);
    if (sh.OC == 4 * C) {
      std::snprintf(name, sizeof(name), "%s forward (GELU_AUX_BIAS epilogue)", sh.name);
      report_flops(name, median_us([&] { matmul_forward_gelu(g4, h4, x, w, bias, N, C, 4 * C, 0); }), f);
    }
    if (sh.OC == C) {
      std::snprintf(name, sizeof(name), "%s forward (bias + residual)", sh.name);
      report_flops(name, median_us([&] { matmul_forward_residual(z, in, w, bias, y, N, sh.Cin, C, 0); }), f);
    }
    floatX* dinp = sh.Cin == C ? y : g4;
    std::snprintf(name, sizeof(name), "%s backward", sh.name);
    report_flops(name, median_us([&] {
                   matmul_backward(dinp, fw, fb, out, in, w, N, sh.Cin, sh.OC, ks, 0);
                 }), 2 * f);
    if (sh.Cin == 4 * C) {
      std::snprintf(name, sizeof(name), "%s backward (DGELU epilogue)", sh.name);
      report_flops(name, median_us([&] {
                     matmul_backward(g4, fw, fb, z, h4, w, N, 4 * C, C, ks, 0, 1.0f, h4);
                   }), 2 * f);
    }
  }
  {
    const double f = 2.0 * N * C * Vp;
    report_flops("lm-head C->Vp forward", median_us([&] { matmul_forward(logits, x, wte, nullptr, N, C, Vp, 0); }), f);
    report_flops("lm-head C->Vp backward", median_us([&] {
                   matmul_backward(y, dwte, nullptr, logits, x, wte, N, C, Vp, ks, 0);
                 }), 2 * f);
  }
  for (void* p : std::initializer_list<void*>{x, y, z, h4, g4, w, bias, wte, wpe, logits, fw, fb,
                                              mean, rstd, losses, master, grads, m, v, params,
                                              d_tok, scratch, dnorm, dwte, dwpe})
    CUDA_CHECK(cudaFree(p));
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
    DevMem scratch(encoder_backward_scratch_bytes(B, T));
    encoder_backward(d_dwte->ptr, nullptr, d_dout->ptr, d_inp->ptr, B, T, C, scratch.base, 0);
    VecF dwte = dwte0;
    encoder_backward_ref(dwte.data(), (float*)nullptr, dout.data(), inp.data(), B, T, C);
    expect_close("encoder_backward dwte (dwpe = nullptr)", download(d_dwte->ptr, dwte.size()), dwte,
                 kTolF, kTolFMax);
  }
}

}  // namespace
