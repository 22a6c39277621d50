// test_rope — the GPU rotary position embedding (kernels/rope.cuh) against its CPU reference
// (float instantiation, double arithmetic inside).
//
//   RopeGpu.MatchesRef             rope_forward / rope_backward vs rope_{forward,backward}_ref:
//                                  T = 1, 17, 1000; MHA, GQA, MQA; HS 64 and 128 (128-bit path),
//                                  HS 10 and a misaligned buffer (scalar path); pos0 = 0, > 0
//                                  and ~131000; value heads must stay bit-identical
//   RopeGpu.RejectsOddHeadSize     (no GPU needed)
//
// Tolerance, the self-calibrating rule of DESIGN.md (expect_calibrated, tests/test_common.h):
//   ||gpu - ref||_2 <= 2 ||base - ref||_2 + u max|ref|
//   max|gpu - ref|  <= 2 max|base - ref|  + u max|ref|
// with base = the reference's output rounded to floatX (what any floatX implementation must at
// least lose; inputs are already floatX); elementwise, so the only rounding is the output's,
// and the floor is that of the largest output (u = floatX's unit roundoff: 2^-8, fp32 2^-24).
//
// Run (GPU machine): build/test_gpu --gtest_filter='RopeGpu*'
// Timings: build/flashgpt bench-kernels --only rope
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/rope.cuh"
#include "kernels/rope.h"
#include "tests/gpu/gpu_test.h"

namespace {

using VecF = std::vector<float>;

// N(0, sd) values rounded to floatX, from one generator for the file (FLASHGPT_SEED repeats).
void random_x(size_t n, float sd, VecF& f, std::vector<floatX>& x) {
  random_floatX(n, sd, iteration_rng(0x726f7065ull), f, x);
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
  DeviceBuffer<float> d_table(table.size());
  d_table.upload(table);
  auto is_v = [&](size_t i) { return (int)((i / c.HS) % H3) >= c.NH + c.NKV; };
  auto qk = [&](size_t i) { return !is_v(i); };

  for (int bwd = 0; bwd < 2; bwd++) {
    VecF x;
    std::vector<floatX> xx;
    random_x(n, 1.0f, x, xx);
    DeviceBuffer<floatX> d_qkv(n, c.offset);
    d_qkv.upload(xx);
    if (bwd)
      rope_backward(d_qkv.ptr, d_table.ptr, c.B, c.T, c.NH, c.NKV, c.HS, c.pos0, 0);
    else
      rope_forward(d_qkv.ptr, d_table.ptr, c.B, c.T, c.NH, c.NKV, c.HS, c.pos0, 0);
    CUDA_CHECK(cudaGetLastError());
    const std::vector<floatX> got_x = d_qkv.download();
    VecF ref = x;
    if (bwd)
      rope_backward_ref(ref.data(), c.B, c.T, c.NH, c.NKV, c.HS, c.pos0, c.theta);
    else
      rope_forward_ref(ref.data(), c.B, c.T, c.NH, c.NKV, c.HS, c.pos0, c.theta);
    // The baseline: a plain implementation in the working precision, i.e. the rotation with the
    // fp32 table's cos and sin in float arithmetic, rounded to floatX. In the BF16 build the
    // final rounding dominates; in the FP32 build the table's and the products' fp32 roundings
    // are the whole error, and the reference rounded to float alone would have none.
    VecF base(n);
    double ref_max = 0;
    const int half = c.HS / 2;
    for (size_t i = 0; i < n; i++) {
      if (qk(i)) {
        const size_t head0 = i - i % c.HS;
        const int j = int(i % c.HS), pair = j % half;
        const int pos = c.pos0 + int((i / ((size_t)H3 * c.HS)) % c.T);
        const float cs = table[((size_t)pos * half + pair) * 2],
                    sn = (bwd ? -1.0f : 1.0f) * table[((size_t)pos * half + pair) * 2 + 1];
        const float x0 = x[head0 + pair], x1 = x[head0 + pair + half];
        base[i] = float(floatX(j < half ? x0 * cs - x1 * sn : x0 * sn + x1 * cs));
        ref_max = std::max(ref_max, (double)std::fabs(ref[i]));
      } else {
        base[i] = float(floatX(ref[i]));
      }
    }
    const double unit = sizeof(floatX) == 2 ? kBf16Unit : 0x1p-24;  // floatX's rounding
    expect_calibrated(bwd ? "rope_backward dq, dk" : "rope_forward q, k", to_float(got_x), base, ref,
                      RoundingFloor{unit * ref_max, unit * ref_max}, qk);
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

}  // namespace
