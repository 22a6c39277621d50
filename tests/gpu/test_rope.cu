// test_rope — the GPU rotary position embedding (kernels/rope.cuh) and KV-cache decode attention
// (kernels/attention/decode.cuh) against their CPU references (float instantiation, double
// arithmetic inside).
//
//   RopeGpu.MatchesRef             rope_forward / rope_backward vs rope_{forward,backward}_ref:
//                                  T = 1, 17, 1000; MHA, GQA, MQA; HS 64 and 128 (128-bit path),
//                                  HS 10 and a misaligned buffer (scalar path); pos0 = 0, > 0
//                                  and ~131000; value heads must stay bit-identical
//   RopeGpu.RejectsOddHeadSize     (no GPU needed)
//   AttentionDecodeGpu.MatchesRef  attention_decode vs attention_decode_ref, n = 1, 17, 1000,
//                                  70000; GQA group sizes 1, 2, 3, 4, 8, 12; HS 32, 64, 128, 256;
//                                  output and scratch poisoned with NaN; two runs bit-identical
//   AttentionDecodeGpu.RejectsBadInput  (no GPU needed)
//   RopeGpu.DISABLED_Bench, AttentionDecodeGpu.DISABLED_Bench   timings at 131072 positions
//
// Tolerance, the self-calibrating rule of DESIGN.md, per check:
//   ||gpu - ref||_2 <= 2 ||base - ref||_2 + 1e-5 sqrt(n),   max|gpu - ref| <= F max|base - ref| + 1e-5
//   rope:   base = the reference's output rounded to floatX (what any floatX implementation
//           must at least lose; inputs are already floatX), F = 2 (elementwise: one rounding);
//   decode: base = a plain bf16 implementation (scores, probabilities and output rounded to
//           bf16, sums in double), F = 4 (one element's error is noisier than the L2).
// Each line prints the errors and the ratio to the tolerance.
//
// Run (GPU machine): build/test_gpu --gtest_filter='RopeGpu*:AttentionDecodeGpu*'
// Timings: build/test_gpu --gtest_also_run_disabled_tests --gtest_filter='*DISABLED_Bench'
//          (RopeGpu / AttentionDecodeGpu)
#ifndef GTEST_DONT_DEFINE_FAIL
#define GTEST_DONT_DEFINE_FAIL 1  // kernels/common.h defines FAIL(...)
#endif
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention/decode.cuh"
#include "kernels/attention/decode.h"
#include "kernels/rope.cuh"
#include "kernels/rope.h"
#include "tests/gpu/gpu_test.h"

namespace {

using VecF = std::vector<float>;

std::mt19937_64& rng() {
  static const uint64_t seed = std::random_device{}();
  static std::mt19937_64 g = [] {
    std::printf("[test_rope] seed %llu\n", (unsigned long long)seed);
    return std::mt19937_64(seed);
  }();
  return g;
}
// N(0, sd) values already rounded to floatX (what the GPU sees), as float and as floatX.
void random_x(size_t n, float sd, VecF& f, std::vector<floatX>& x) {
  std::normal_distribution<float> d(0.0f, sd);
  f.resize(n);
  x.resize(n);
  for (size_t i = 0; i < n; i++) {
    x[i] = floatX(d(rng()));
    f[i] = float(x[i]);
  }
}
float bf16_round(float x) {  // round to nearest even, as __float2bfloat16_rn
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return x;
  u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  float y;
  std::memcpy(&y, &u, 4);
  return y;
}

// Device allocation with 256 spare bytes in front; `offset` elements misalign the pointer.
template <class T>
struct Buf {
  char* base = nullptr;
  T* p = nullptr;
  size_t n = 0;
  explicit Buf(size_t n_, int offset = 0) : n(n_) {
    CUDA_CHECK(cudaMalloc(&base, std::max<size_t>(n * sizeof(T), 16) + 256));
    p = reinterpret_cast<T*>(base) + offset;
  }
  ~Buf() { cudaFree(base); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  void up(const std::vector<T>& h) {
    CUDA_CHECK(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> down() const {
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<T> h(n);
    CUDA_CHECK(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
  void poison() { CUDA_CHECK(cudaMemset(p, 0xff, n * sizeof(T))); }  // NaN in fp32 and bf16
};
VecF to_f(const std::vector<floatX>& x) {
  VecF f(x.size());
  for (size_t i = 0; i < x.size(); i++) f[i] = float(x[i]);
  return f;
}

struct Err {
  double l2 = 0, ref_l2 = 0, max = 0;
  size_t n = 0;
  bool finite = true;
};
template <typename Pick>
Err error(const VecF& got, const VecF& ref, Pick pick) {
  Err e;
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

// The rule: kernel error vs the baseline's error against the same reference.
template <typename Pick>
void expect_calibrated(const std::string& what, const VecF& got, const VecF& base, const VecF& ref,
                       double max_factor, Pick pick) {
  const Err e = error(got, ref, pick), eb = error(base, ref, pick);
  const double l2_tol = 2.0 * eb.l2 + 1e-5 * std::sqrt(double(e.n));
  const double max_tol = max_factor * eb.max + 1e-5;
  const double norm = e.ref_l2 > 0 ? e.ref_l2 : 1.0;
  std::printf("  %-30s n=%-9zu rel L2 %.3e (base %.3e) %5.1f%% of tol | max %.3e (base %.3e) "
              "%5.1f%% of tol\n",
              what.c_str(), e.n, e.l2 / norm, eb.l2 / norm, 100 * e.l2 / l2_tol, e.max, eb.max,
              100 * e.max / max_tol);
  EXPECT_TRUE(e.finite) << what << ": NaN/Inf in the output (unwritten element?)";
  EXPECT_LE(e.l2, l2_tol) << what << ": L2 error above 2x the baseline's";
  EXPECT_LE(e.max, max_tol) << what << ": max error above " << max_factor << "x the baseline's";
}


// =============================================================================================
// RoPE
// =============================================================================================

class RopeGpu : public GpuTest {};

struct RopeCase {
  int B, T, NH, NKV, HS, pos0;
  float theta;
  int offset;  // elements: 1 misaligns qkv (scalar path)
};

void check_rope(const RopeCase& c) {
  const std::string name =
      flashgpt::strformat("B=%d T=%d NH=%d NKV=%d HS=%d pos0=%d theta=%g off=%d", c.B, c.T, c.NH,
                          c.NKV, c.HS, c.pos0, c.theta, c.offset);
  SCOPED_TRACE(name);
  std::printf("rope %s\n", name.c_str());
  const int H3 = c.NH + 2 * c.NKV;
  const size_t n = (size_t)c.B * c.T * H3 * c.HS;
  const int rows = c.pos0 + c.T;
  VecF table((size_t)rows * c.HS);  // (rows, HS/2, 2)
  rope_table_ref(table.data(), rows, c.HS, c.theta);
  Buf<float> d_table(table.size());
  d_table.up(table);
  auto is_v = [&](size_t i) { return (int)((i / c.HS) % H3) >= c.NH + c.NKV; };
  auto qk = [&](size_t i) { return !is_v(i); };

  for (int bwd = 0; bwd < 2; bwd++) {
    VecF x;
    std::vector<floatX> xx;
    random_x(n, 1.0f, x, xx);
    Buf<floatX> d_qkv(n, c.offset);
    d_qkv.up(xx);
    if (bwd)
      rope_backward(d_qkv.p, d_table.p, c.B, c.T, c.NH, c.NKV, c.HS, c.pos0, 0);
    else
      rope_forward(d_qkv.p, d_table.p, c.B, c.T, c.NH, c.NKV, c.HS, c.pos0, 0);
    CUDA_CHECK(cudaGetLastError());
    const std::vector<floatX> got_x = d_qkv.down();
    VecF ref = x;
    if (bwd)
      rope_backward_ref(ref.data(), c.B, c.T, c.NH, c.NKV, c.HS, c.pos0, c.theta);
    else
      rope_forward_ref(ref.data(), c.B, c.T, c.NH, c.NKV, c.HS, c.pos0, c.theta);
    VecF base(n);
    for (size_t i = 0; i < n; i++) base[i] = float(floatX(ref[i]));
    expect_calibrated(bwd ? "rope_backward dq, dk" : "rope_forward q, k", to_f(got_x), base, ref,
                      2.0, qk);
    size_t v_changed = 0;
    for (size_t i = 0; i < n; i++)
      if (is_v(i)) v_changed += std::memcmp(&got_x[i], &xx[i], sizeof(floatX)) != 0;
    EXPECT_EQ(v_changed, 0u) << (bwd ? "rope_backward" : "rope_forward") << " wrote value heads";
  }
}

TEST_F(RopeGpu, MatchesRef) {
  const RopeCase cases[] = {
      {2, 1, 4, 4, 64, 0, 10000.0f, 0},           // T = 1 at position 0: the identity
      {3, 17, 6, 2, 64, 5, 10000.0f, 0},          // GQA, pos0 > 0
      {1, 1000, 12, 4, 128, 0, 10000.0f, 0},      // long T, HS 128
      {2, 17, 8, 1, 128, 131000, 500000.0f, 0},   // MQA at long positions
      {1, 1000, 6, 3, 64, 130000, 10000.0f, 0},   // long positions, T = 1000
      {1, 1, 12, 12, 64, 131000, 10000.0f, 0},    // one decode step far out
      {2, 17, 3, 1, 10, 3, 10000.0f, 0},          // HS/2 = 5: scalar path
      {2, 17, 4, 2, 64, 9, 10000.0f, 1},          // misaligned qkv: scalar path
  };
  for (const RopeCase& c : cases) check_rope(c);
}

TEST(RopeGpuNoDevice, RejectsOddHeadSize) {  // the CHECK runs before any CUDA call
  floatX* fake = reinterpret_cast<floatX*>(uintptr_t(256));
  for (int bwd = 0; bwd < 2; bwd++) {
    try {
      if (bwd) rope_backward(fake, nullptr, 1, 1, 1, 1, 7, 0, 0);
      else rope_forward(fake, nullptr, 1, 1, 1, 1, 7, 0, 0);
      ADD_FAILURE() << "HS = 7 accepted";
    } catch (const flashgpt::Error& e) {
      EXPECT_NE(std::string(e.what()).find("even"), std::string::npos) << e.what();
    }
  }
}

TEST_F(RopeGpu, DISABLED_Bench) {
  struct S { int B, T, NH, NKV, HS; };
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("rope timings on %s (%s)\n", prop.name, PRECISION_NAME);
  for (const S s : {S{1, 131072, 12, 12, 64}, S{1, 131072, 12, 4, 128}, S{8, 1024, 12, 12, 64}}) {
    const size_t n = (size_t)s.B * s.T * (s.NH + 2 * s.NKV) * s.HS;
    VecF table((size_t)s.T * s.HS);
    rope_table_ref(table.data(), s.T, s.HS, 10000.0f);
    Buf<float> d_table(table.size());
    d_table.up(table);
    Buf<floatX> d_qkv(n);
    CUDA_CHECK(cudaMemset(d_qkv.p, 0, n * sizeof(floatX)));
    const double us_f = median_us([&] {
      rope_forward(d_qkv.p, d_table.p, s.B, s.T, s.NH, s.NKV, s.HS, 0, 0);
    });
    const double us_b = median_us([&] {
      rope_backward(d_qkv.p, d_table.p, s.B, s.T, s.NH, s.NKV, s.HS, 0, 0);
    });
    // Minimum bytes: q and k heads read and written once, the table read once.
    const double bytes = 2.0 * s.B * s.T * (s.NH + s.NKV) * s.HS * sizeof(floatX) +
                         (double)s.T * s.HS * sizeof(float);
    std::printf("  B=%d T=%d NH=%d NKV=%d HS=%d: forward %8.1f us %6.0f GB/s, backward %8.1f us "
                "%6.0f GB/s (%.0f MB moved at least)\n",
                s.B, s.T, s.NH, s.NKV, s.HS, us_f, bytes / (us_f * 1e3), us_b,
                bytes / (us_b * 1e3), bytes / 1e6);
  }
}

// =============================================================================================
// Decode attention
// =============================================================================================

class AttentionDecodeGpu : public GpuTest {};

// Plain bf16 decode attention (the baseline): scores, probabilities and outputs rounded to
// bf16, products summed in double. Inputs already rounded.
VecF plain_bf16_decode(const VecF& q, const VecF& k, const VecF& v, int n, int NH, int NKV,
                       int HS) {
  const int G = NH / NKV;
  const double scale = 1.0 / std::sqrt((double)HS);
  VecF out((size_t)NH * HS);
#pragma omp parallel for
  for (int h = 0; h < NH; h++) {
    const int g = h / G;
    std::vector<float> s(n);
    float m = -INFINITY;
    for (int j = 0; j < n; j++) {
      double d = 0;
      for (int c = 0; c < HS; c++) d += (double)q[(size_t)h * HS + c] * k[((size_t)j * NKV + g) * HS + c];
      s[j] = bf16_round(float(scale * d));
      m = std::max(m, s[j]);
    }
    double sum = 0;
    for (int j = 0; j < n; j++) sum += std::exp(double(s[j]) - m);
    std::vector<double> acc(HS, 0.0);
    for (int j = 0; j < n; j++) {
      const double p = bf16_round(float(std::exp(double(s[j]) - m) / sum));
      for (int c = 0; c < HS; c++) acc[c] += p * v[((size_t)j * NKV + g) * HS + c];
    }
    for (int c = 0; c < HS; c++) out[(size_t)h * HS + c] = bf16_round(float(acc[c]));
  }
  return out;
}

void check_decode(int n, int NH, int NKV, int HS) {
  const std::string name = flashgpt::strformat("n=%d NH=%d NKV=%d HS=%d", n, NH, NKV, HS);
  SCOPED_TRACE(name);
  std::printf("attention_decode %s\n", name.c_str());
  const size_t nq = (size_t)NH * HS, nkv = (size_t)n * NKV * HS;
  VecF q, k, v;
  std::vector<floatX> qx, kx, vx;
  random_x(nq, 1.5f, q, qx);  // sd 1.5: a moderately peaked softmax
  random_x(nkv, 1.0f, k, kx);
  random_x(nkv, 1.0f, v, vx);
  Buf<floatX> d_q(nq), d_k(nkv), d_v(nkv), d_out(nq);
  d_q.up(qx), d_k.up(kx), d_v.up(vx);
  // Scratch sized for a longer cache than this call uses, as the model does.
  Buf<char> scratch(attention_decode_scratch_bytes(n + 1000, NH, HS));
  std::vector<floatX> runs[2];
  for (int r = 0; r < 2; r++) {
    d_out.poison();
    scratch.poison();
    attention_decode(d_out.p, d_q.p, d_k.p, d_v.p, n, NH, NKV, HS, scratch.p, 0);
    CUDA_CHECK(cudaGetLastError());
    runs[r] = d_out.down();
  }
  VecF ref(nq);
  attention_decode_ref(ref.data(), q.data(), k.data(), v.data(), n, NH, NKV, HS);
  const VecF base = plain_bf16_decode(q, k, v, n, NH, NKV, HS);
  expect_calibrated("attention_decode out", to_f(runs[0]), base, ref, 4.0, [](size_t) { return true; });
  EXPECT_EQ(0, std::memcmp(runs[0].data(), runs[1].data(), nq * sizeof(floatX)))
      << "two runs on the same inputs differ";
}

TEST_F(AttentionDecodeGpu, MatchesRef) {
  // NH, NKV, HS: MHA; GQA groups of 3 (one partial head group of a block) and 4; MQA with 8
  // query heads per kv head (two head groups per kv head).
  const int heads[4][3] = {{12, 12, 64}, {6, 2, 64}, {12, 3, 128}, {8, 1, 128}};
  for (int n : {1, 17, 1000, 70000})
    for (const auto& h : heads) check_decode(n, h[0], h[1], h[2]);
  check_decode(1000, 8, 4, 64);    // GQA group of 2 (the GQ = 2 kernel)
  check_decode(20000, 8, 4, 128);
  check_decode(3000, 12, 1, 64);   // MQA, 12 query heads: three head groups per kv head
  check_decode(100, 4, 4, 32);
  check_decode(333, 4, 2, 256);
  check_decode(5000, 2, 1, 256);
}

TEST(AttentionDecodeGpuNoDevice, RejectsBadInput) {  // the CHECKs run before any CUDA call
  floatX* p = reinterpret_cast<floatX*>(uintptr_t(4096));
  char* s = reinterpret_cast<char*>(uintptr_t(8192));
  auto expect_throw = [&](const char* needle, auto fn) {
    try {
      fn();
      ADD_FAILURE() << "accepted; expected an error mentioning '" << needle << "'";
    } catch (const flashgpt::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_throw("HS=96", [&] { attention_decode(p, p, p, p, 10, 4, 4, 96, s, 0); });
  expect_throw("multiple", [&] { attention_decode(p, p, p, p, 10, 6, 4, 64, s, 0); });
  expect_throw("bad shape", [&] { attention_decode(p, p, p, p, 0, 4, 4, 64, s, 0); });
  expect_throw("aligned", [&] { attention_decode(p, p, p + 1, p, 10, 4, 4, 64, s, 0); });
}

TEST_F(AttentionDecodeGpu, DISABLED_Bench) {
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("attention_decode timings on %s (%s); K/V caches of several copies rotated so "
              "reads come from HBM, not L2\n", prop.name, PRECISION_NAME);
  const int n = 131072;
  const int heads[4][3] = {{12, 12, 64}, {12, 4, 128}, {32, 8, 128}, {12, 1, 64}};
  for (const auto& h : heads) {
    const int NH = h[0], NKV = h[1], HS = h[2];
    const size_t nkv = (size_t)n * NKV * HS;
    const size_t bytes = 2 * nkv * sizeof(floatX);
    const int copies = (int)std::max<size_t>(1, std::min<size_t>(8, (200u << 20) / bytes + 1));
    std::vector<std::unique_ptr<Buf<floatX>>> ks, vs;
    for (int i = 0; i < copies; i++) {
      ks.emplace_back(new Buf<floatX>(nkv));
      vs.emplace_back(new Buf<floatX>(nkv));
      CUDA_CHECK(cudaMemset(ks.back()->p, 0, nkv * sizeof(floatX)));
      CUDA_CHECK(cudaMemset(vs.back()->p, 0, nkv * sizeof(floatX)));
    }
    Buf<floatX> d_q((size_t)NH * HS), d_out((size_t)NH * HS);
    CUDA_CHECK(cudaMemset(d_q.p, 0, (size_t)NH * HS * sizeof(floatX)));
    Buf<char> scratch(attention_decode_scratch_bytes(n, NH, HS));
    int it = 0;
    const double us = median_us([&] {
      const int i = it++ % copies;
      attention_decode(d_out.p, d_q.p, ks[i]->p, vs[i]->p, n, NH, NKV, HS, scratch.p, 0);
    });
    std::printf("  n=%d NH=%d NKV=%d HS=%d: %8.1f us  %6.0f GB/s  (K+V %.0f MB, %d copies)\n", n,
                NH, NKV, HS, us, bytes / (us * 1e3), bytes / 1e6, copies);
  }
}

}  // namespace
