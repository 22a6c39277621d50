// test_flash — the "flash" backend (our FlashAttention-2 kernels) against the CPU oracle. The
// FP32 build has no flash (its kernels are bf16 tensor-core code and it says so); there these
// checks run on its LSE backend, "scalar", with the FP32 build's tight tolerance.
//
//   FlashShapes/FlashGpu.Matches/B_T_NH_NKV_HS   forward out + LSE, backward dQ, dK, dV
//   FlashGpuMisc.Unsupported                      shapes refused with a reason, sizes
//
// Each case, on fresh random inputs (FLASHGPT_SEED=<n> repeats them, tests/test_common.h):
//   * reference: attention_flash_{forward,backward}_ref<float> (double arithmetic inside) on
//     the bf16-rounded qkv and dout;
//   * baseline: a plain bf16 implementation on the CPU (plain_bf16_attention.h): rounds to bf16
//     where a bf16 framework would (S = scale Q K^T, P, O, dP, dS, dQ, dK, dV);
//   * rule (DESIGN.md; expect_calibrated, tests/test_common.h), for out, dQ, dK, dV separately:
//       ||gpu - ref||_2 <= 2 ||bf16 - ref||_2 + floor_l2   and
//       max|gpu - ref|  <= 2 max|bf16 - ref|  + floor_max
//     the floor being the largest change one bf16 rounding makes to that tensor
//     (plain_bf16_attention.h); printed as % of tolerance. LSE: max|gpu - ref| <= 2e-4 (fp32
//     all the way: S = scale Q K^T summed in fp32, |LSE| < 20, so its rounding is ~1e-5).
//     FP32 build ("scalar"): ||gpu - ref|| <= 1e-5 ||ref|| + 1e-6 sqrt(n).
//   * no NaN/Inf; out, LSE, dqkv and scratch are filled with NaN before every call;
//   * a second forward+backward on the same inputs: out, LSE, dK, dV bitwise identical; dQ
//     bitwise when the backend's spec says so (scalar), else (flash: fp32 reduce-adds in L2,
//     arrival order varies) within the same rule, the count of differing elements printed.
//
// Run (GPU machine): ./build/test_gpu --gtest_filter='Flash*'
// Small case for compute-sanitizer: --gtest_filter='FlashShapes/FlashGpu.Matches/B3_T17_*'
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention/attention_ref.h"
#include "kernels/attention/flash.cuh"
#include "tests/gpu/gpu_test.h"
#include "tests/gpu/plain_bf16_attention.h"

namespace {

const char* const kLseBackend = lse_attention();  // flash; scalar in the FP32 build

struct FlashCase {
  int B, T, NH, NKV, HS;
};
std::string case_name(const FlashCase& c) {
  return "B" + std::to_string(c.B) + "_T" + std::to_string(c.T) + "_NH" + std::to_string(c.NH) +
         "_NKV" + std::to_string(c.NKV) + "_HS" + std::to_string(c.HS);
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

  SEED_TRACE();
  std::vector<float> qkv, dout;
  random_attention_inputs(s, qkv, dout);

  DeviceBuffer<floatX> d_qkv(n_qkv), d_dout(n_out), d_out(n_out), d_dqkv(n_qkv);
  DeviceBuffer<char> d_saved(attn->saved_bytes(s)), d_scratch(attn->scratch_bytes(s));
  d_qkv.upload(to_floatX(qkv));
  d_dout.upload(to_floatX(dout));
  auto run = [&]() {
    d_out.poison();
    d_saved.poison();
    d_scratch.poison();
    d_dqkv.poison();
    attn->forward({d_out.ptr, d_saved.ptr, d_scratch.ptr, d_qkv.ptr, s}, 0);
    attn->backward({d_dqkv.ptr, d_scratch.ptr, d_dout.ptr, d_qkv.ptr, d_out.ptr, d_saved.ptr, s},
                   0);
    CUDA_CHECK(cudaDeviceSynchronize());
    FlashRun r;
    r.out = to_float(d_out.download());
    r.dqkv = to_float(d_dqkv.download());
    r.lse.resize(n_lse);
    CUDA_CHECK(cudaMemcpy(r.lse.data(), d_saved.ptr, n_lse * 4, cudaMemcpyDeviceToHost));
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
  AttentionFloors floors;
#if !defined(ENABLE_FP32)
  floors = plain_bf16_attention(out_b, dqkv_b, qkv, dout, s);
#endif

  struct Part {
    const char* name;
    std::vector<float> gpu, ref, base;
    RoundingFloor floor;
  };
  std::vector<Part> parts;
  parts.push_back({"out", r1.out, out_ref, out_b, floors.out});
  const int NH = s.NH, NKV = s.NKV;
  parts.push_back(
      {"dQ", qkv_heads(r1.dqkv, s, 0, NH), qkv_heads(dqkv_ref, s, 0, NH), {}, floors.dq});
  parts.push_back({"dK", qkv_heads(r1.dqkv, s, NH, NH + NKV), qkv_heads(dqkv_ref, s, NH, NH + NKV),
                   {}, floors.dk});
  parts.push_back({"dV",
                   qkv_heads(r1.dqkv, s, NH + NKV, NH + 2 * NKV),
                   qkv_heads(dqkv_ref, s, NH + NKV, NH + 2 * NKV),
                   {},
                   floors.dv});
#if !defined(ENABLE_FP32)
  parts[1].base = qkv_heads(dqkv_b, s, 0, NH);
  parts[2].base = qkv_heads(dqkv_b, s, NH, NH + NKV);
  parts[3].base = qkv_heads(dqkv_b, s, NH + NKV, NH + 2 * NKV);
#endif
  std::printf("[ %-8s ] %s\n", kLseBackend, case_name(c).c_str());
  for (const Part& p : parts) {
#if defined(ENABLE_FP32)  // fp32 all the way: close to the double reference
    const ErrorStats e = error_stats(p.gpu, p.ref);
    const double tol_l2 = 1e-5 * e.ref_l2 + 1e-6 * std::sqrt(double(e.n));
    std::printf("  %-4s rel L2 %.3e, %5.1f%% of tol\n", p.name,
                e.ref_l2 > 0 ? e.l2 / e.ref_l2 : e.l2, 100 * e.l2 / tol_l2);
    note_tolerance_share(e.finite ? e.l2 : NAN, tol_l2);
    EXPECT_TRUE(e.finite) << p.name;
    EXPECT_LE(e.l2, tol_l2) << p.name << ": L2 error " << e.l2 << " (|ref| " << e.ref_l2 << ")";
#else
    expect_calibrated(p.name, p.gpu, p.base, p.ref, p.floor);
#endif
  }
  std::string line;
  {
    const double mx = max_abs_error(r1.lse, lse_ref);
    note_tolerance_share(mx, 2e-4);
    EXPECT_LE(mx, 2e-4) << "LSE max error";
    char buf[64];
    std::snprintf(buf, sizeof(buf), " LSE max %.1e", mx);
    line += buf;
  }

  // Repeat run: bitwise except the atomically summed gradients.
  EXPECT_EQ(count_diff(r1.out, r2.out), 0u) << "out differs between runs";
  EXPECT_EQ(count_diff(r1.lse, r2.lse), 0u) << "LSE differs between runs";
  const size_t dq_diff = count_diff(qkv_heads(r1.dqkv, s, 0, NH), qkv_heads(r2.dqkv, s, 0, NH));
  EXPECT_EQ(count_diff(qkv_heads(r1.dqkv, s, NH, NH + 2 * NKV), qkv_heads(r2.dqkv, s, NH, NH + 2 * NKV)),
            0u)
      << "dK/dV differ between runs";
  if (attn->dq_bitwise(false)) EXPECT_EQ(dq_diff, 0u) << "dQ differs between runs";
#if !defined(ENABLE_FP32)
  expect_calibrated("dQ (repeat run)", qkv_heads(r2.dqkv, s, 0, NH), parts[1].base, parts[1].ref,
                    parts[1].floor);
#endif
  char buf[96];
  std::snprintf(buf, sizeof(buf), " | repeat: dQ %zu/%zu differ", dq_diff, parts[1].ref.size());
  line += buf;
  std::printf(" %s\n", line.c_str());
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

// Needs no GPU (the backend object holds only its spec), so it runs everywhere, CI included.
TEST(FlashGpuMisc, Unsupported) {
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
  // dQacc and D, then one int per (b, h, 128-row backward Q tile): --deterministic's semaphores.
  EXPECT_EQ(attn->scratch_bytes(s), size_t(2) * 6 * 100 * (64 + 1) * 4 + size_t(2) * 6 * 1 * 4);
}

}  // namespace
