// test_attention — every GPU attention backend in the registry (attention_names()) against the
// CPU oracle, so a backend is tested the day it is registered.
//
//   AttentionGpu/Shapes.Matches/<backend>_B_T_NH_NKV_HS  forward out and dQ, dK, dV
//   AttentionGpu/Shapes.Matches/naive_softmax<k>_...     the same with each of naive's softmax
//                                                         kernels forced (long-row ones too)
//   AttentionGpu.Registry                                 names, unknown name, supported shapes
//
// Each case, on fresh random inputs (FLASHGPT_SEED=<n> repeats them, tests/test_common.h):
//   * reference: attention_naive_{forward,backward}_ref<float> (double arithmetic inside) on the
//     bf16-rounded qkv and dout;
//   * baseline: a plain bf16 implementation on the CPU (plain_bf16_attention.h), rounding where a
//     bf16 framework would: inputs, S = scale Q K^T, P, O, dP, dS, dQ, dK, dV (fp32/double
//     accumulation inside each product; dK/dV of a GQA group summed before their rounding);
//   * the rule (DESIGN.md; expect_calibrated, tests/test_common.h): for out, dQ, dK and dV
//     separately (printed as % of tolerance),
//       ||gpu - ref||_2  <= 2 * ||bf16 - ref||_2  + floor_l2
//       max|gpu - ref|   <= 2 * max|bf16 - ref|   + floor_max
//     the floor being the largest change one bf16 rounding makes to that tensor
//     (plain_bf16_attention.h);
//   * no NaN/Inf; out, dqkv, saved and scratch are filled with NaN before each call, so any
//     output element left unwritten, or any read of an unwritten saved/scratch element that
//     reaches an output, fails;
//   * two full forward+backward runs are bitwise identical;
//   * the _jumps cases (every backend): scores whose row max climbs leftwards by ~7 log2 units a
//     tile, then by 100 nats at the first keys (jump_scores), for kernels that keep a running max;
//   * backends other than naive are also compared with naive on the GPU: L2 distance <= twice
//     the rule's L2 tolerance (the triangle inequality's bound for two results within it).
//
// Run (GPU machine): make test-gpu, or ./build/test_gpu --gtest_filter='AttentionGpu*'
// Small subset for compute-sanitizer (memcheck, racecheck):
//   --gtest_filter='*naive_B3_T17_NH6_NKV3_HS64:*naive_softmax*_T127_*:*naive_softmax2_B2_T1000_*'
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention/attention.cuh"
#include "kernels/attention/attention_ref.h"
#include "kernels/attention/naive.cuh"
#include "tests/gpu/gpu_test.h"
#include "tests/gpu/plain_bf16_attention.h"

namespace {

struct Case {
  std::string backend;
  AttnShape s;
  int softmax_config = -1;  // naive only: >= 0 forces one softmax kernel (naive.cuh)
  bool jumps = false;       // scores that rise tile by tile towards the first keys (jump_scores)
};

std::unique_ptr<AttentionBackend> make_backend(const Case& c) {
  return c.softmax_config >= 0 ? make_naive_attention_with_softmax(c.softmax_config)
                            : make_attention(c.backend);
}

std::string case_name(const Case& c) {
  const std::string sm = c.softmax_config >= 0 ? "_softmax" + std::to_string(c.softmax_config) : "";
  return c.backend + sm + (c.jumps ? "_jumps" : "") + "_B" + std::to_string(c.s.B) + "_T" + std::to_string(c.s.T) + "_NH" +
         std::to_string(c.s.NH) + "_NKV" + std::to_string(c.s.NKV) + "_HS" +
         std::to_string(c.s.HS);
}

void PrintTo(const Case& c, std::ostream* os) { *os << case_name(c); }  // gtest's parameter print

std::vector<Case> all_cases() {
  std::vector<AttnShape> shapes;
  // GQA ratios 1, 2, 4, 12 with B and NH not powers of two, HS 64 and 128, ragged T.
  const int groups[4][3] = {{3, 6, 6}, {3, 6, 3}, {1, 12, 3}, {2, 12, 1}};  // B, NH, NKV
  for (int HS : {64, 128})
    for (int T : {1, 17, 127, 128})
      for (const auto& g : groups) shapes.push_back({g[0], T, g[1], g[2], HS});
  shapes.push_back({3, 1000, 6, 6, 64});
  shapes.push_back({1, 1000, 6, 3, 128});
  shapes.push_back({1, 1000, 12, 3, 64});
  shapes.push_back({1, 1000, 12, 1, 128});
  shapes.push_back({1, 4096, 2, 2, 64});  // the CPU reference is the slow part here
  shapes.push_back({1, 4096, 2, 1, 128});
  shapes.push_back({1, 4097, 3, 1, 64});  // ragged past every tile size, GQA
  shapes.push_back({1, 4097, 2, 2, 128});
  // More work tiles than an H100's 132 SMs (flash3: 192 at HS 64, 288 at HS 128), so each
  // persistent block runs several, one after another; short ragged rows keep the CPU side fast.
  shapes.push_back({4, 257, 24, 6, 64});
  shapes.push_back({4, 257, 24, 6, 128});
  // More K/V tiles than SMs for flash3's HS 64 backward, whose blocks are persistent up to
  // T 8192: below T 4096 (240 tiles: most blocks claim a second from the counter; ragged T, GQA)
  shapes.push_back({16, 600, 6, 3, 64});
  // ... and from T 4096, where its dQ lags a step (165 tiles; flash3_tiles.h kBwdPersistent).
  shapes.push_back({5, 4100, 1, 1, 64});
  // Past T 8192 a block a K/V tile, whose dQ-lag loop runs each query head's diagonal step
  // before the others (flash3_bwd.cu PEEL_DIAG: GQA, so two heads' diagonal steps; ragged T).
  shapes.push_back({1, 8300, 2, 1, 64});
  std::vector<Case> cases;
  for (const std::string& name : attention_names())
    for (const AttnShape& s : shapes) cases.push_back({name, s});
  // Each of naive's softmax kernels, also those chosen only for long rows (T > 1024), on small T.
  for (int cfg = 0; cfg < 6; cfg++)
    for (const AttnShape& s : {AttnShape{2, 127, 6, 3, 64}, AttnShape{1, 200, 12, 1, 128}})
      cases.push_back({"naive", s, cfg});
  cases.push_back({"naive", {2, 1000, 6, 2, 64}, 2});
  cases.push_back({"naive", {1, 1000, 3, 3, 128}, 5});
  // Every backend on scores whose row max climbs as the keys go left (jump_scores).
  for (const std::string& name : attention_names())
    for (const AttnShape& s : {AttnShape{2, 600, 6, 3, 64}, AttnShape{1, 1000, 4, 2, 128}})
      cases.push_back({name, s, -1, true});
  return cases;
}

// Scores that climb from the diagonal leftwards, as kernels that walk a row's keys right to left
// (flash3's forward) meet them: query dimension 0 is 8 and key dimension 0 is a(key), so a
// score is 8 a(key) / sqrt(HS) + N(0, 1). a(key) puts each earlier 128-key tile ~7 log2 units
// (4.85 nats) above the one after it, and the first 32 keys a further 100 nats above the tile
// next to them: a row's max first rises by amounts around the kernels' thresholds, then by far
// more than 2^128 can hold. Only the first 32 keys carry weight (the rest are e^-100 below), and
// their scores are small, so the plain bf16 baseline stays as accurate as on normal data (out's
// relative L2 error 3.4e-3 at B 1, T 1000, HS 64 and 128, either way): an O off by 1% in the
// rows past the first 32 fails the rule.
void jump_scores(std::vector<float>& qkv, const AttnShape& s) {
  const int H3 = s.NH + 2 * s.NKV;
  const float unit = std::sqrt((float)s.HS) / 8.f;  // a per nat of score
  for (int b = 0; b < s.B; b++)
    for (int t = 0; t < s.T; t++) {
      float* row = qkv.data() + ((size_t)b * s.T + t) * H3 * s.HS;
      const float a = t < 32 ? 0.f : -unit * (100.f + 4.85f * (t / 128));
      for (int h = 0; h < s.NH; h++) row[(size_t)h * s.HS] = 8.f;
      for (int h = 0; h < s.NKV; h++) row[(size_t)(s.NH + h) * s.HS] = a;
    }
}

// Device buffers of one backend's run and its results on the host.
struct GpuResult {
  std::vector<float> out, dqkv;
  std::vector<floatX> out_raw, dqkv_raw;
};

GpuResult run_backend(const AttentionBackend& be, const std::vector<floatX>& qkv,
                const std::vector<floatX>& dout, const AttnShape& s, bool deterministic = false) {
  const size_t n_qkv = qkv.size(), n_out = dout.size();
  DeviceBuffer<floatX> d_qkv(n_qkv), d_dqkv(n_qkv), d_out(n_out), d_dout(n_out);
  DeviceBuffer<char> saved(be.saved_bytes(s)), scratch(be.scratch_bytes(s));
  d_qkv.upload(qkv);
  d_dout.upload(dout);
  d_out.poison(), d_dqkv.poison(), saved.poison(), scratch.poison();
  cudaStream_t st;
  CUDA_CHECK(cudaStreamCreate(&st));
  be.forward({d_out.ptr, saved.ptr, scratch.ptr, d_qkv.ptr, s}, st);
  CUDA_CHECK(cudaStreamSynchronize(st));
  scratch.poison();  // forward and backward share scratch; nothing may carry over
  be.backward({d_dqkv.ptr, scratch.ptr, d_dout.ptr, d_qkv.ptr, d_out.ptr, saved.ptr, s,
               deterministic},
              st);
  CUDA_CHECK(cudaStreamSynchronize(st));
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaStreamDestroy(st));
  GpuResult r;
  r.out_raw = d_out.download();
  r.dqkv_raw = d_dqkv.download();
  r.out = to_float(r.out_raw);
  r.dqkv = to_float(r.dqkv_raw);
  return r;
}

class Shapes : public GpuTest, public ::testing::WithParamInterface<Case> {};

TEST_P(Shapes, Matches) {
  const Case& c = GetParam();
  const AttnShape s = c.s;
  std::unique_ptr<AttentionBackend> be = make_backend(c);
  const std::string why = be->unsupported_reason(s);
  if (be->spec().bf16_only && sizeof(floatX) != 2)
    GTEST_SKIP() << c.backend << " is not in the FP32 build: " << why;
  ASSERT_EQ(why, "") << c.backend << " must support every test shape (HS 64/128, any T, GQA)";

  const size_t H3 = size_t(s.NH) + 2 * s.NKV;
  const size_t n_qkv = size_t(s.B) * s.T * H3 * s.HS, n_out = size_t(s.B) * s.T * s.NH * s.HS;
  SEED_TRACE();
  std::mt19937_64 rng = test_rng();  // FLASHGPT_SEED repeats a case
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> qkv(n_qkv), dout(n_out);
  for (float& x : qkv) x = nd(rng);
  for (float& x : dout) x = nd(rng);
  if (c.jumps) jump_scores(qkv, s);
  const std::vector<floatX> qkv_x = to_floatX(qkv), dout_x = to_floatX(dout);
  qkv = to_float(qkv_x);  // the values the GPU sees
  dout = to_float(dout_x);

  // Oracle (fp32 interface, double inside) and the plain bf16 baseline.
  std::vector<float> ref_out(n_out), ref_P(size_t(s.B) * s.NH * s.T * s.T), ref_dqkv(n_qkv);
  attention_naive_forward_ref<float>(ref_out.data(), ref_P.data(), qkv.data(), s);
  attention_naive_backward_ref<float>(ref_dqkv.data(), dout.data(), qkv.data(), ref_P.data(), s);
  ref_P.clear();
  ref_P.shrink_to_fit();
  std::vector<float> bf_out, bf_dqkv;
  const AttentionFloors floors = plain_bf16_attention(bf_out, bf_dqkv, qkv, dout, s);

  GpuResult r1 = run_backend(*be, qkv_x, dout_x, s);
  GpuResult r2 = run_backend(*be, qkv_x, dout_x, s);
  // A backend with a deterministic mode (--deterministic) runs it twice as well: checked
  // against the reference like r1, and bitwise equal to itself.
  const bool det_mode = be->spec().deterministic_mode;
  GpuResult d1, d2;
  if (det_mode) {
    d1 = run_backend(*be, qkv_x, dout_x, s, true);
    d2 = run_backend(*be, qkv_x, dout_x, s, true);
  }
  GpuResult rn;
  const bool vs_naive = c.backend != "naive";
  if (vs_naive) rn = run_backend(*make_attention("naive"), qkv_x, dout_x, s);

  // Which part of dqkv an index belongs to: 0 = dQ, 1 = dK, 2 = dV.
  auto part = [&](size_t i) {
    const size_t head = (i / s.HS) % H3;
    return head < size_t(s.NH) ? 0 : head < size_t(s.NH + s.NKV) ? 1 : 2;
  };
  std::printf("[%s]\n", case_name(c).c_str());
  const char* names[4] = {"out", "dq", "dk", "dv"};
  const RoundingFloor floor[4] = {floors.out, floors.dq, floors.dk, floors.dv};
  for (int w = 0; w < 4; w++) {
    const std::vector<float>& got = w == 0 ? r1.out : r1.dqkv;
    const std::vector<float>& ref = w == 0 ? ref_out : ref_dqkv;
    const std::vector<float>& bf = w == 0 ? bf_out : bf_dqkv;
    auto pick = [&](size_t i) { return w == 0 || part(i) == w - 1; };
    expect_calibrated(names[w], got, bf, ref, floor[w], pick);
    if (det_mode) {
      std::printf("    --deterministic:\n");
      expect_calibrated(names[w], w == 0 ? d1.out : d1.dqkv, bf, ref, floor[w], pick);
    }
    if (vs_naive) {
      const std::vector<float>& nv = w == 0 ? rn.out : rn.dqkv;
      const ErrorStats e = error_stats(got, nv, pick);
      const double norm = e.ref_l2 > 0 ? e.ref_l2 : 1.0;
      const double tol = 2.0 * calibrated_check(got, bf, ref, floor[w], pick).l2_tol;
      std::printf("      vs naive on GPU: %s L2 %.3e (tol %.3e)\n", e.ref_l2 > 0 ? "rel" : "abs",
                  e.l2 / norm, tol / norm);
      note_tolerance_share(e.l2, tol);
      EXPECT_LE(e.l2, tol) << names[w] << " vs naive";
    }
  }
  EXPECT_EQ(0, std::memcmp(r1.out_raw.data(), r2.out_raw.data(), n_out * sizeof(floatX)))
      << "forward is not deterministic";
  // dK, dV always bitwise; dQ bitwise unless the backend declares otherwise, then to rounding.
  size_t dq_diff = 0, dkv_diff = 0;
  double dq_worst = 0;
  for (size_t i = 0; i < n_qkv; i++) {
    if (std::memcmp(&r1.dqkv_raw[i], &r2.dqkv_raw[i], sizeof(floatX)) == 0) continue;
    if (part(i) == 0) {
      dq_diff++;
      dq_worst = std::max(dq_worst, (double)std::fabs(r1.dqkv[i] - r2.dqkv[i]) /
                                        std::max(1e-6, (double)std::fabs(r1.dqkv[i])));
    } else {
      dkv_diff++;
    }
  }
  EXPECT_EQ(dkv_diff, 0u) << "dK/dV are not deterministic";
  if (det_mode) {
    EXPECT_EQ(0, std::memcmp(d1.dqkv_raw.data(), d2.dqkv_raw.data(), n_qkv * sizeof(floatX)))
        << "the deterministic mode's backward is not bitwise reproducible";
    EXPECT_EQ(0, std::memcmp(d1.out_raw.data(), r1.out_raw.data(), n_out * sizeof(floatX)))
        << "the deterministic mode changed the forward";
  }
  if (be->dq_bitwise(false)) {
    EXPECT_EQ(dq_diff, 0u) << "dQ is not deterministic";
  } else {
    std::printf("  repeat run: %zu dQ elements differ, worst relative %.2e (tol 2^-7)\n", dq_diff,
                dq_worst);
    EXPECT_LE(dq_worst, 1.0 / 128) << "dQ differs between runs by more than one bf16 ulp";
  }
}

INSTANTIATE_TEST_SUITE_P(AttentionGpu, Shapes, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return case_name(i.param); });

TEST(AttentionGpu, Registry) {  // needs no GPU: backends create their handles on first use
  const std::vector<std::string> names = attention_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "naive"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "flash"), names.end());
  for (const std::string& n : names) {
    std::unique_ptr<AttentionBackend> be = make_attention(n);
    EXPECT_EQ(n, be->name());
    EXPECT_EQ(&be->spec(), &attention_spec(n)) << n << ": the GPU backend carries its spec";
    const AttnShape s{2, 1024, 12, 4, 64};
    if (be->spec().bf16_only && sizeof(floatX) != 2)  // says so in the FP32 build
      EXPECT_NE(be->unsupported_reason(s).find("FP32 build"), std::string::npos) << n;
    else
      EXPECT_EQ(be->unsupported_reason(s), "") << n;
    EXPECT_GE(be->saved_bytes(s), size_t(1)) << n;
    EXPECT_NE(be->unsupported_reason({2, 64, 12, 5, 64}), "") << n << ": NH % NKV != 0";
  }
  try {
    make_attention("bogus");
    ADD_FAILURE() << "make_attention(\"bogus\") did not throw";
  } catch (const flashgpt::Error& e) {
    const std::string msg = e.what();
    for (const std::string& n : names)
      EXPECT_NE(msg.find(n), std::string::npos) << "error does not list '" << n << "': " << msg;
  }
  const AttnShape s{4, 1024, 12, 12, 64};
  EXPECT_EQ(make_attention("naive")->saved_bytes(s), size_t(4) * 12 * 1024 * 1024 * sizeof(floatX));
}

}  // namespace
