// test_flash — the "flash" backend (our FlashAttention-2 kernels) against the CPU oracle. The
// FP32 build has no flash (its kernels are bf16 tensor-core code and it says so); there these
// checks run on its LSE backend, "scalar", with the FP32 build's tight tolerance.
//
//   FlashShapes/FlashGpu.Matches/B_T_NH_NKV_HS   forward out + LSE, backward dQ, dK, dV
//   FlashGpuMisc.Unsupported                      shapes refused with a reason, sizes
//
// Each case, on fresh random inputs (seed printed):
//   * reference: attention_flash_{forward,backward}_ref<float> (double arithmetic inside) on
//     the bf16-rounded qkv and dout;
//   * baseline: a plain bf16 implementation on the CPU (below): rounds to bf16 where a bf16
//     framework would (S = scale Q K^T, P, O, dP, dS, dQ, dK, dV; wide accumulation inside);
//   * rule (DESIGN.md), for out, dQ, dK, dV separately:
//       ||gpu - ref||_2 <= 2 ||bf16 - ref||_2 + 1e-5 sqrt(n)   and
//       max|gpu - ref|  <= 4 max|bf16 - ref|  + 1e-5
//     printed as ratios (<= 1 passes); LSE: max|gpu - ref| <= 2e-4 (fp32 all the way).
//     FP32 build ("scalar"): ||gpu - ref|| <= 1e-5 ||ref|| + 1e-6 sqrt(n).
//   * no NaN/Inf; out, LSE, dqkv and scratch are filled with NaN before every call;
//   * a second forward+backward on the same inputs: out, LSE, dK, dV bitwise identical; dQ
//     bitwise when the backend's spec says so (scalar), else (flash: fp32 reduce-adds in L2,
//     arrival order varies) within the same tolerance, the count of differing elements printed.
//
// Run (GPU machine): ./build/test_gpu --gtest_filter='Flash*'
// Small case for compute-sanitizer: --gtest_filter='FlashShapes/FlashGpu.Matches/B3_T17_*'
#define GTEST_DONT_DEFINE_FAIL 1  // kernels/common.h defines FAIL(...)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention/attention_ref.h"
#include "kernels/attention/flash.cuh"
#include "tests/gpu/gpu_test.h"

namespace {

const char* const kLseBackend = lse_attention();  // flash; scalar in the FP32 build

float round_bf16(float x) {  // round to nearest even, as __float2bfloat16_rn
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return x;
  u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  float y;
  std::memcpy(&y, &u, 4);
  return y;
}

struct FlashCase {
  int B, T, NH, NKV, HS;
};
std::string case_name(const FlashCase& c) {
  return "B" + std::to_string(c.B) + "_T" + std::to_string(c.T) + "_NH" + std::to_string(c.NH) +
         "_NKV" + std::to_string(c.NKV) + "_HS" + std::to_string(c.HS);
}

struct DevBuf {
  void* p = nullptr;
  size_t bytes = 0;
  explicit DevBuf(size_t n) : bytes(n) { CUDA_CHECK(cudaMalloc(&p, n ? n : 1)); }
  ~DevBuf() { cudaFree(p); }
  void poison() { CUDA_CHECK(cudaMemset(p, 0xff, bytes)); }  // NaN in bf16 and fp32
  template <typename T>
  T* as() {
    return static_cast<T*>(p);
  }
};

std::vector<floatX> to_dev_type(const std::vector<float>& v) {
  std::vector<floatX> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = floatX(v[i]);
  return r;
}
std::vector<float> from_dev(const DevBuf& d, size_t n) {
  std::vector<floatX> tmp(n);
  CUDA_CHECK(cudaMemcpy(tmp.data(), d.p, n * sizeof(floatX), cudaMemcpyDeviceToHost));
  std::vector<float> r(n);
  for (size_t i = 0; i < n; ++i) r[i] = float(tmp[i]);
  return r;
}

#if !defined(ENABLE_FP32)
// Plain bf16 attention (forward and backward) on the CPU: the error a bf16 framework makes.
void plain_bf16_attention(std::vector<float>& out, std::vector<float>& dqkv,
                          const std::vector<float>& qkv, const std::vector<float>& dout,
                          const AttnShape& s) {
  const int B = s.B, T = s.T, NH = s.NH, NKV = s.NKV, HS = s.HS, G = NH / NKV;
  const size_t H3 = size_t(NH) + 2 * NKV, TT = size_t(T) * T;
  const double scale = 1.0 / std::sqrt(double(HS));
  auto at = [&](int b, int t, int head) { return ((size_t(b) * T + t) * H3 + head) * HS; };
  auto oat = [&](int b, int t, int h) { return ((size_t(b) * T + t) * NH + h) * HS; };
  std::vector<float> P(size_t(B) * NH * TT, 0.f), dS(size_t(B) * NH * TT, 0.f);
  out.assign(size_t(B) * T * NH * HS, 0.f);
  dqkv.assign(size_t(B) * T * H3 * HS, 0.f);
#pragma omp parallel for collapse(3) schedule(dynamic, 8)
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        const int g = h / G;
        float* prow = &P[(size_t(b) * NH + h) * TT + size_t(t) * T];
        float* dsrow = &dS[(size_t(b) * NH + h) * TT + size_t(t) * T];
        const float* q = &qkv[at(b, t, h)];
        const float* dO = &dout[oat(b, t, h)];
        std::vector<double> sr(t + 1);
        double mx = -1e300;
        for (int u = 0; u <= t; u++) {
          const float* k = &qkv[at(b, u, NH + g)];
          double acc = 0;
          for (int d = 0; d < HS; d++) acc += double(q[d]) * k[d];
          sr[u] = round_bf16(float(acc * scale));
          mx = std::max(mx, sr[u]);
        }
        double sum = 0;
        for (int u = 0; u <= t; u++) sum += std::exp(sr[u] - mx);
        for (int u = 0; u <= t; u++) prow[u] = round_bf16(float(std::exp(sr[u] - mx) / sum));
        float* o = &out[oat(b, t, h)];
        for (int d = 0; d < HS; d++) {
          double acc = 0;
          for (int u = 0; u <= t; u++) acc += double(prow[u]) * qkv[at(b, u, NH + NKV + g) + d];
          o[d] = round_bf16(float(acc));
        }
        std::vector<double> dp(t + 1);
        double Drow = 0;
        for (int u = 0; u <= t; u++) {
          const float* v = &qkv[at(b, u, NH + NKV + g)];
          double acc = 0;
          for (int d = 0; d < HS; d++) acc += double(dO[d]) * v[d];
          dp[u] = round_bf16(float(acc));
          Drow += dp[u] * prow[u];
        }
        for (int u = 0; u <= t; u++) dsrow[u] = round_bf16(float(prow[u] * (dp[u] - Drow)));
        float* dq = &dqkv[at(b, t, h)];
        for (int d = 0; d < HS; d++) {
          double acc = 0;
          for (int u = 0; u <= t; u++) acc += double(dsrow[u]) * qkv[at(b, u, NH + g) + d];
          dq[d] = round_bf16(float(acc * scale));
        }
      }
      // dK, dV per key row, summed over the group's query heads before rounding.
#pragma omp parallel for collapse(3) schedule(dynamic, 8)
  for (int b = 0; b < B; b++)
    for (int g = 0; g < NKV; g++)
      for (int u = 0; u < T; u++) {
        std::vector<double> dk(HS, 0.0), dv(HS, 0.0);
        for (int h = g * G; h < (g + 1) * G; h++)
          for (int t = u; t < T; t++) {
            const double p = P[(size_t(b) * NH + h) * TT + size_t(t) * T + u];
            const double ds = dS[(size_t(b) * NH + h) * TT + size_t(t) * T + u];
            const float* q = &qkv[at(b, t, h)];
            const float* dO = &dout[oat(b, t, h)];
            for (int d = 0; d < HS; d++) {
              dv[d] += p * dO[d];
              dk[d] += ds * q[d];
            }
          }
        for (int d = 0; d < HS; d++) {
          dqkv[at(b, u, NH + g) + d] = round_bf16(float(dk[d] * scale));
          dqkv[at(b, u, NH + NKV + g) + d] = round_bf16(float(dv[d]));
        }
      }
}
#endif

// Elements of dqkv that belong to heads [h0, h1) of every token.
std::vector<float> heads(const std::vector<float>& x, const AttnShape& s, int h0, int h1) {
  const size_t H3 = size_t(s.NH) + 2 * s.NKV, tokens = size_t(s.B) * s.T;
  std::vector<float> r;
  r.reserve(tokens * (h1 - h0) * s.HS);
  for (size_t t = 0; t < tokens; ++t)
    r.insert(r.end(), x.begin() + (t * H3 + h0) * s.HS, x.begin() + (t * H3 + h1) * s.HS);
  return r;
}

struct Err {
  double l2 = 0, mx = 0, ref_l2 = 0;
};
Err error(const std::vector<float>& got, const std::vector<float>& ref) {
  Err e;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = double(got[i]) - ref[i];
    e.l2 += d * d;
    e.ref_l2 += double(ref[i]) * ref[i];
    e.mx = std::max(e.mx, std::fabs(d));
    if (!std::isfinite(got[i])) e.mx = e.l2 = INFINITY;
  }
  e.l2 = std::sqrt(e.l2);
  e.ref_l2 = std::sqrt(e.ref_l2);
  return e;
}

size_t count_nonfinite(const std::vector<float>& v) {
  size_t n = 0;
  for (float x : v) n += !std::isfinite(x);
  return n;
}
size_t count_diff(const std::vector<float>& a, const std::vector<float>& b) {
  size_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], 4) != 0;
  return n;
}

struct FlashRun {
  std::vector<float> out, lse, dqkv;
};

class FlashGpu : public GpuTest, public ::testing::WithParamInterface<FlashCase> {};

TEST_P(FlashGpu, Matches) {
  const FlashCase c = GetParam();
  const AttnShape s{c.B, c.T, c.NH, c.NKV, c.HS};
  auto attn = make_attention(kLseBackend);
  ASSERT_EQ(attn->unsupported_reason(s), "");
  const size_t H3 = size_t(s.NH) + 2 * s.NKV, tokens = size_t(s.B) * s.T;
  const size_t n_qkv = tokens * H3 * s.HS, n_out = tokens * s.NH * s.HS,
               n_lse = size_t(s.B) * s.NH * s.T;
  ASSERT_EQ(attn->saved_bytes(s), n_lse * sizeof(float));

  const unsigned seed =
      (unsigned)std::chrono::high_resolution_clock::now().time_since_epoch().count();
  std::printf("[ seed     ] %u\n", seed);
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> qkv(n_qkv), dout(n_out);
  for (auto& x : qkv) x = round_bf16(nd(rng));
  for (auto& x : dout) x = round_bf16(nd(rng));

  DevBuf d_qkv(n_qkv * sizeof(floatX)), d_dout(n_out * sizeof(floatX)),
      d_out(n_out * sizeof(floatX)), d_dqkv(n_qkv * sizeof(floatX)), d_saved(attn->saved_bytes(s)),
      d_scratch(attn->scratch_bytes(s));
  {
    auto a = to_dev_type(qkv), b = to_dev_type(dout);
    CUDA_CHECK(cudaMemcpy(d_qkv.p, a.data(), a.size() * sizeof(floatX), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_dout.p, b.data(), b.size() * sizeof(floatX), cudaMemcpyHostToDevice));
  }
  auto run = [&]() {
    d_out.poison();
    d_saved.poison();
    d_scratch.poison();
    d_dqkv.poison();
    AttnForwardArgs fa{d_out.as<floatX>(), d_saved.p, d_scratch.p, d_qkv.as<floatX>(), s};
    attn->forward(fa, 0);
    AttnBackwardArgs ba{d_dqkv.as<floatX>(),
                        d_scratch.p,
                        d_dout.as<floatX>(),
                        d_qkv.as<floatX>(),
                        d_out.as<floatX>(),
                        d_saved.p,
                        s};
    attn->backward(ba, 0);
    CUDA_CHECK(cudaDeviceSynchronize());
    FlashRun r;
    r.out = from_dev(d_out, n_out);
    r.dqkv = from_dev(d_dqkv, n_qkv);
    r.lse.resize(n_lse);
    CUDA_CHECK(cudaMemcpy(r.lse.data(), d_saved.p, n_lse * 4, cudaMemcpyDeviceToHost));
    return r;
  };
  const FlashRun r1 = run();
  const FlashRun r2 = run();

  EXPECT_EQ(count_nonfinite(r1.out), 0u) << "out has NaN/Inf (unwritten?)";
  EXPECT_EQ(count_nonfinite(r1.lse), 0u) << "LSE has NaN/Inf (unwritten?)";
  EXPECT_EQ(count_nonfinite(r1.dqkv), 0u) << "dqkv has NaN/Inf (unwritten?)";

  // Reference (fp32 results, double arithmetic) and the plain bf16 baseline.
  std::vector<float> out_ref(n_out), lse_ref(n_lse), dqkv_ref(n_qkv), out_b, dqkv_b;
  attention_flash_forward_ref<float>(out_ref.data(), lse_ref.data(), qkv.data(), s, 64, 64);
  attention_flash_backward_ref<float>(dqkv_ref.data(), dout.data(), qkv.data(), out_ref.data(),
                                      lse_ref.data(), s, 64, 64);
#if !defined(ENABLE_FP32)
  plain_bf16_attention(out_b, dqkv_b, qkv, dout, s);
#endif

  struct Part {
    const char* name;
    std::vector<float> gpu, ref, base;
  };
  std::vector<Part> parts;
  parts.push_back({"out", r1.out, out_ref, out_b});
  const int NH = s.NH, NKV = s.NKV;
  parts.push_back({"dQ", heads(r1.dqkv, s, 0, NH), heads(dqkv_ref, s, 0, NH), {}});
  parts.push_back({"dK", heads(r1.dqkv, s, NH, NH + NKV), heads(dqkv_ref, s, NH, NH + NKV), {}});
  parts.push_back({"dV",
                   heads(r1.dqkv, s, NH + NKV, NH + 2 * NKV),
                   heads(dqkv_ref, s, NH + NKV, NH + 2 * NKV),
                   {}});
#if !defined(ENABLE_FP32)
  parts[1].base = heads(dqkv_b, s, 0, NH);
  parts[2].base = heads(dqkv_b, s, NH, NH + NKV);
  parts[3].base = heads(dqkv_b, s, NH + NKV, NH + 2 * NKV);
#endif
  std::string line = case_name(c) + ":";
  for (const Part& p : parts) {
    const Err e = error(p.gpu, p.ref);
    const double n = double(p.ref.size());
#if defined(ENABLE_FP32)
    const double tol_l2 = 1e-5 * e.ref_l2 + 1e-6 * std::sqrt(n);
    const double r_l2 = e.l2 / tol_l2, r_mx = 0.0;
#else
    const Err eb = error(p.base, p.ref);
    const double tol_l2 = 2.0 * eb.l2 + 1e-5 * std::sqrt(n), tol_mx = 4.0 * eb.mx + 1e-5;
    const double r_l2 = e.l2 / tol_l2, r_mx = e.mx / tol_mx;
    EXPECT_LE(r_mx, 1.0) << p.name << ": max error " << e.mx << " vs bf16 baseline " << eb.mx;
#endif
    EXPECT_LE(r_l2, 1.0) << p.name << ": L2 error " << e.l2 << " tolerance " << tol_l2 << " (|ref| "
                         << e.ref_l2 << ")";
    char buf[160];
    std::snprintf(buf, sizeof(buf), " %s rel %.2e ratio %.2f/%.2f", p.name,
                  e.ref_l2 > 0 ? e.l2 / e.ref_l2 : e.l2, r_l2, r_mx);
    line += buf;
  }
  {
    double mx = 0;
    for (size_t i = 0; i < n_lse; ++i) mx = std::max(mx, std::fabs(double(r1.lse[i]) - lse_ref[i]));
    EXPECT_LE(mx, 2e-4) << "LSE max error";
    char buf[64];
    std::snprintf(buf, sizeof(buf), " LSE max %.1e", mx);
    line += buf;
  }

  // Repeat run: bitwise except the atomically summed gradients.
  EXPECT_EQ(count_diff(r1.out, r2.out), 0u) << "out differs between runs";
  EXPECT_EQ(count_diff(r1.lse, r2.lse), 0u) << "LSE differs between runs";
  const size_t dq_diff = count_diff(heads(r1.dqkv, s, 0, NH), heads(r2.dqkv, s, 0, NH));
  EXPECT_EQ(count_diff(heads(r1.dqkv, s, NH, NH + 2 * NKV), heads(r2.dqkv, s, NH, NH + 2 * NKV)),
            0u)
      << "dK/dV differ between runs";
  if (attn->deterministic_dq()) EXPECT_EQ(dq_diff, 0u) << "dQ differs between runs";
#if !defined(ENABLE_FP32)
  {
    const Err e = error(heads(r2.dqkv, s, 0, NH), parts[1].ref);
    const Err eb = error(parts[1].base, parts[1].ref);
    EXPECT_LE(e.l2, 2.0 * eb.l2 + 1e-5 * std::sqrt(double(parts[1].ref.size())));
  }
#endif
  char buf[96];
  std::snprintf(buf, sizeof(buf), " | repeat: dQ %zu/%zu differ", dq_diff, parts[1].ref.size());
  line += buf;
  std::printf("[ %-8s ] %s\n", kLseBackend, line.c_str());
}

const FlashCase kCases[] = {
    // T = 1, ragged T around the tiles (Br 64/128, Bc 64/128), B and NH not powers of two,
    // GQA ratios 1, 2, 4, 12 (NKV = 1 is multi-query).
    {3, 1, 6, 6, 64},    {3, 1, 6, 6, 128},    {3, 17, 6, 3, 64},     {3, 17, 6, 3, 128},
    {1, 65, 4, 2, 64},   {1, 65, 4, 2, 128},   {2, 127, 12, 1, 64},   {2, 127, 12, 1, 128},
    {3, 128, 12, 3, 64}, {3, 128, 12, 3, 128}, {5, 255, 3, 1, 64},    {5, 255, 3, 1, 128},
    {3, 1000, 6, 3, 64}, {3, 1000, 6, 3, 128}, {1, 1000, 12, 12, 64}, {1, 1000, 12, 12, 128},
    {1, 4096, 2, 2, 64}, {1, 4096, 2, 1, 128},
};
INSTANTIATE_TEST_SUITE_P(FlashShapes, FlashGpu, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<FlashCase>& i) {
                           return case_name(i.param);
                         });

class FlashGpuMisc : public GpuTest {};

TEST_F(FlashGpuMisc, Unsupported) {
  auto attn = make_flash_attention();
  EXPECT_STREQ(attn->name(), "flash");
#if defined(ENABLE_FP32)  // bf16 tensor-core kernels: refused by name, not swapped for others
  EXPECT_NE(attn->unsupported_reason({2, 64, 12, 12, 64}).find("FP32 build"), std::string::npos);
  EXPECT_EQ(make_attention("scalar")->unsupported_reason({2, 64, 12, 12, 64}), "");
#else
  EXPECT_EQ(attn->unsupported_reason({2, 64, 12, 12, 64}), "");
  EXPECT_EQ(attn->unsupported_reason({2, 64, 16, 4, 128}), "");
#endif
  EXPECT_NE(attn->unsupported_reason({2, 64, 12, 5, 64}), "");   // NKV does not divide NH
  EXPECT_NE(attn->unsupported_reason({2, 64, 12, 12, 96}), "");  // head size
  EXPECT_NE(attn->unsupported_reason({0, 64, 12, 12, 64}), "");
  const AttnShape s{2, 100, 6, 3, 64};
  EXPECT_EQ(attn->saved_bytes(s), size_t(2) * 6 * 100 * 4);
  EXPECT_EQ(attn->scratch_bytes(s), size_t(2) * 6 * 100 * (64 + 1) * 4);
}

}  // namespace
