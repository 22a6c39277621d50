// test_attention_decode — KV-cache decode attention on the GPU (kernels/attention/decode.cuh)
// against its CPU reference (decode.h; float instantiation, double arithmetic inside):
//   AttentionDecodeGpu.MatchesRef  attention_decode vs attention_decode_ref, n = 1, 17, 1000,
//                                  70000; GQA group sizes 1, 2, 3, 4, 8, 12; HS 32, 64, 128, 256;
//                                  output and scratch poisoned with NaN; two runs bit-identical
//   AttentionDecodeGpu.RingMatchesRef  attention_decode_ring (a ring of cache rows: sliding
//                                  windows, documents inside them) vs its CPU reference and,
//                                  bit for bit, vs attention_decode on the gathered rows
//   AttentionDecodeGpuNoDevice.RejectsBadInput  (no GPU needed)
// Tolerance, the self-calibrating rule of DESIGN.md (expect_calibrated, tests/test_common.h):
//   ||gpu - ref||_2 <= 2 ||base - ref||_2 + floor_l2
//   max|gpu - ref|  <= 2 max|base - ref|  + floor_max
// with base = a plain bf16 implementation (scores, probabilities and output rounded to bf16,
// sums in double) and the floor the largest change one rounding of a probability P_j makes to
// the output, u P_j |V_j| (u = 2^-8; |V_j| the row's L2 norm, or its largest element), or of an
// output itself, u |out|.
//
// Run (GPU machine): build/test_gpu --gtest_filter='AttentionDecode*'
// Timings: build/flashgpt bench-kernels --only decode
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention/decode.cuh"
#include "kernels/attention/decode.h"
#include "tests/gpu/gpu_test.h"

namespace {

using VecF = std::vector<float>;

// N(0, sd) values rounded to floatX, from one generator for the file (FLASHGPT_SEED repeats).
void random_x(size_t n, float sd, VecF& f, std::vector<floatX>& x) {
  random_floatX(n, sd, iteration_rng(0x6465636full), f, x);
}


class AttentionDecodeGpu : public GpuTest {};

// Plain bf16 decode attention (the baseline): scores, probabilities and outputs rounded to
// bf16, products summed in double. Inputs already rounded. Also returns the rule's floor.
VecF plain_bf16_decode(const VecF& q, const VecF& k, const VecF& v, int n, int NH, int NKV,
                       int HS, RoundingFloor& floor) {
  const int G = NH / NKV;
  const double scale = 1.0 / std::sqrt((double)HS);
  VecF out((size_t)NH * HS);
  double f_l2 = 0, f_max = 0;
#pragma omp parallel for reduction(max : f_l2, f_max)
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
      double v_l2 = 0, v_max = 0;
      for (int c = 0; c < HS; c++) {
        const double vc = v[((size_t)j * NKV + g) * HS + c];
        acc[c] += p * vc;
        v_l2 += vc * vc;
        v_max = std::max(v_max, std::fabs(vc));
      }
      f_l2 = std::max(f_l2, p * std::sqrt(v_l2));
      f_max = std::max(f_max, p * v_max);
    }
    for (int c = 0; c < HS; c++) {
      out[(size_t)h * HS + c] = bf16_round(float(acc[c]));
      f_max = std::max(f_max, std::fabs(acc[c]));  // the rounding of an output itself
      f_l2 = std::max(f_l2, std::fabs(acc[c]));
    }
  }
  floor = {kBf16Unit * f_l2, kBf16Unit * f_max};
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
  DeviceBuffer<floatX> d_q(nq), d_k(nkv), d_v(nkv), d_out(nq);
  d_q.upload(qx), d_k.upload(kx), d_v.upload(vx);
  // Scratch sized for a longer cache than this call uses, as the model does.
  DeviceBuffer<char> scratch(attention_decode_scratch_bytes(n + 1000, NH, HS));
  std::vector<floatX> runs[2];
  for (int r = 0; r < 2; r++) {
    d_out.poison();
    scratch.poison();
    attention_decode(d_out.ptr, d_q.ptr, d_k.ptr, d_v.ptr, n, NH, NKV, HS, scratch.ptr, 0);
    CUDA_CHECK(cudaGetLastError());
    runs[r] = d_out.download();
  }
  VecF ref(nq);
  attention_decode_ref(ref.data(), q.data(), k.data(), v.data(), n, NH, NKV, HS);
  RoundingFloor floor;
  const VecF base = plain_bf16_decode(q, k, v, n, NH, NKV, HS, floor);
  expect_calibrated("attention_decode out", to_float(runs[0]), base, ref, floor);
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

// The ring (attention_decode_ring): n keys from row `first` of a ring of `slots` rows, wrapping.
// Against the CPU ring reference with the same rule, and bit for bit against attention_decode
// on the same n rows gathered in order (the kernel visits key j wherever it lies, so its sums
// run in the same order); the rows outside the range hold NaN, so reading one fails.
void check_decode_ring(int n, int first, int slots, int NH, int NKV, int HS) {
  const std::string name = flashgpt::strformat("n=%d first=%d slots=%d NH=%d NKV=%d HS=%d", n,
                                               first, slots, NH, NKV, HS);
  SCOPED_TRACE(name);
  std::printf("attention_decode_ring %s\n", name.c_str());
  const size_t nq = (size_t)NH * HS, row = (size_t)NKV * HS;
  VecF q, k, v;
  std::vector<floatX> qx, kx, vx;
  random_x(nq, 1.5f, q, qx);
  random_x((size_t)slots * row, 1.0f, k, kx);
  random_x((size_t)slots * row, 1.0f, v, vx);
  // The n visible rows in key order, and the ring with NaN in every other row.
  VecF kg, vg;
  std::vector<floatX> kgx, vgx;
  std::vector<bool> used(slots, false);
  for (int j = 0; j < n; j++) {
    const size_t r = (size_t)((first + j) % slots);
    used[r] = true;
    kg.insert(kg.end(), k.begin() + r * row, k.begin() + (r + 1) * row);
    vg.insert(vg.end(), v.begin() + r * row, v.begin() + (r + 1) * row);
    kgx.insert(kgx.end(), kx.begin() + r * row, kx.begin() + (r + 1) * row);
    vgx.insert(vgx.end(), vx.begin() + r * row, vx.begin() + (r + 1) * row);
  }
  const floatX nan = floatX(NAN);
  for (int r = 0; r < slots; r++)
    if (!used[r])
      for (size_t e = 0; e < row; e++) kx[r * row + e] = vx[r * row + e] = nan;
  DeviceBuffer<floatX> d_q(nq), d_k((size_t)slots * row), d_v((size_t)slots * row), d_out(nq);
  DeviceBuffer<floatX> d_kg((size_t)n * row), d_vg((size_t)n * row), d_outg(nq);
  d_q.upload(qx), d_k.upload(kx), d_v.upload(vx), d_kg.upload(kgx), d_vg.upload(vgx);
  DeviceBuffer<char> scratch(attention_decode_scratch_bytes(slots, NH, HS));
  d_out.poison();
  attention_decode_ring(d_out.ptr, d_q.ptr, d_k.ptr, d_v.ptr, n, first, slots, NH, NKV, HS,
                        scratch.ptr, 0);
  CUDA_CHECK(cudaGetLastError());
  const std::vector<floatX> got = d_out.download();
  attention_decode(d_outg.ptr, d_q.ptr, d_kg.ptr, d_vg.ptr, n, NH, NKV, HS, scratch.ptr, 0);
  CUDA_CHECK(cudaGetLastError());
  const std::vector<floatX> gathered = d_outg.download();
  EXPECT_EQ(0, std::memcmp(got.data(), gathered.data(), nq * sizeof(floatX)))
      << "the ring's output differs from the gathered rows'";
  VecF ref(nq), ref_ring(nq);
  attention_decode_ref(ref.data(), q.data(), kg.data(), vg.data(), n, NH, NKV, HS);
  attention_decode_ring_ref(ref_ring.data(), q.data(), k.data(), v.data(), n, first, slots, NH,
                            NKV, HS);
  EXPECT_EQ(ref, ref_ring) << "the CPU ring reference differs from the gathered rows'";
  RoundingFloor floor;
  const VecF base = plain_bf16_decode(q, kg, vg, n, NH, NKV, HS, floor);
  expect_calibrated("attention_decode_ring out", to_float(got), base, ref, floor);
}

TEST_F(AttentionDecodeGpu, RingMatchesRef) {
  // A sliding window's ring: full (n = slots) from every kind of start, partly full, one key;
  // a document inside the window (n < slots) that wraps; GQA and MQA; every head size.
  check_decode_ring(1024, 0, 1024, 12, 12, 64);
  check_decode_ring(1024, 700, 1024, 12, 12, 64);
  check_decode_ring(1024, 1023, 1024, 6, 2, 128);
  check_decode_ring(300, 900, 1024, 12, 3, 128);   // wraps after 124 keys
  check_decode_ring(1, 5, 8, 8, 1, 128);
  check_decode_ring(17, 10, 17, 4, 4, 32);
  check_decode_ring(4000, 3000, 4096, 4, 2, 256);
  check_decode_ring(70000, 50000, 70001, 12, 12, 64);
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

}  // namespace
