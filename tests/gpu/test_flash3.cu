// test_flash3 — the flash3 backend's repeat determinism. (flash3's accuracy against the CPU
// oracle, ragged T, GQA and poisoned outputs: the registry-driven tests/gpu/test_attention.cu;
// the sm_90 helpers it is built from: tests/gpu/test_sm90.cu.)
//
//   Flash3.RepeatDeterminism    forward and backward bitwise equal over 3 runs (HS 64 and 128,
//                               GQA, ragged T, more blocks than SMs; HS 64 below and above the
//                               T where its backward's dQ starts to lag a step)
//   Flash3.QueryHeadBlocksMatchKvHeadBlocks
//                               the GQA backward with a block per query head (flash3.cuh
//                               BwdHeads; the rule picks it only at long T) against the blocks
//                               per kv head that test_attention checks against the CPU oracle,
//                               on small shapes of each of its kernels: every dQ, dK, dV element
//                               within one bf16 rounding of the same fp32 sums in another order,
//                               and dK, dV bitwise equal over two runs
//
// Run (GPU machine): ./build/test_gpu --gtest_filter='Flash3*'
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention/attention.cuh"
#include "kernels/attention/flash3.cuh"
#include "tests/gpu/sm90_test.h"

namespace {

class Flash3 : public Sm90Test {};

TEST_F(Flash3, RepeatDeterminism) {
#if defined(ENABLE_FP32)
  GTEST_SKIP() << "flash3 is bf16-only";
#endif
  auto be = make_attention("flash3");
  ASSERT_TRUE(be->dq_bitwise(/*deterministic=*/true));
  for (const AttnShape s : {AttnShape{2, 2500, 8, 2, 64}, AttnShape{1, 4500, 4, 2, 64},
                            AttnShape{3, 1777, 6, 3, 128}}) {
    ASSERT_EQ(be->unsupported_reason(s), "");
    const size_t H3 = size_t(s.NH) + 2 * s.NKV, n_qkv = size_t(s.B) * s.T * H3 * s.HS,
                 n_out = size_t(s.B) * s.T * s.NH * s.HS;
    std::vector<floatX> qkv(n_qkv), dout(n_out);
    std::mt19937 rng(std::random_device{}());
    std::normal_distribution<float> nd(0.f, 1.f);
    for (auto& x : qkv) x = floatX(nd(rng));
    for (auto& x : dout) x = floatX(nd(rng));
    floatX *d_qkv, *d_dqkv, *d_out, *d_dout;
    void *saved, *scratch;
    CUDA_CHECK(cudaMalloc(&d_qkv, n_qkv * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&d_dqkv, n_qkv * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&d_out, n_out * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&d_dout, n_out * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&saved, be->saved_bytes(s)));
    CUDA_CHECK(cudaMalloc(&scratch, be->scratch_bytes(s)));
    CUDA_CHECK(cudaMemcpy(d_qkv, qkv.data(), n_qkv * sizeof(floatX), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_dout, dout.data(), n_out * sizeof(floatX), cudaMemcpyHostToDevice));
    std::vector<floatX> out0, dqkv0;
    for (int run = 0; run < 3; ++run) {
      CUDA_CHECK(cudaMemset(d_out, 0xff, n_out * sizeof(floatX)));
      CUDA_CHECK(cudaMemset(d_dqkv, 0xff, n_qkv * sizeof(floatX)));
      CUDA_CHECK(cudaMemset(scratch, 0xff, be->scratch_bytes(s)));
      be->forward({d_out, saved, scratch, d_qkv, s}, 0);
      be->backward({d_dqkv, scratch, d_dout, d_qkv, d_out, saved, s, /*deterministic=*/true}, 0);
      CUDA_CHECK(cudaDeviceSynchronize());
      std::vector<floatX> out(n_out), dqkv(n_qkv);
      CUDA_CHECK(cudaMemcpy(out.data(), d_out, n_out * sizeof(floatX), cudaMemcpyDeviceToHost));
      CUDA_CHECK(cudaMemcpy(dqkv.data(), d_dqkv, n_qkv * sizeof(floatX), cudaMemcpyDeviceToHost));
      size_t nonfinite = 0;
      for (floatX x : dqkv) nonfinite += !std::isfinite(float(x));
      EXPECT_EQ(nonfinite, 0u) << "dqkv has NaN/Inf";
      if (run == 0) {
        out0 = out;
        dqkv0 = dqkv;
        continue;
      }
      size_t d_out_n = 0, d_dq_n = 0;
      for (size_t i = 0; i < n_out; ++i) d_out_n += std::memcmp(&out[i], &out0[i], sizeof(floatX)) != 0;
      for (size_t i = 0; i < n_qkv; ++i)
        d_dq_n += std::memcmp(&dqkv[i], &dqkv0[i], sizeof(floatX)) != 0;
      EXPECT_EQ(d_out_n, 0u) << "HS " << s.HS << " run " << run << ": out differs";
      EXPECT_EQ(d_dq_n, 0u) << "HS " << s.HS << " run " << run << ": dqkv differs";
    }
    cudaFree(d_qkv);
    cudaFree(d_dqkv);
    cudaFree(d_out);
    cudaFree(d_dout);
    cudaFree(saved);
    cudaFree(scratch);
  }
}

TEST_F(Flash3, QueryHeadBlocksMatchKvHeadBlocks) {
#if defined(ENABLE_FP32)
  GTEST_SKIP() << "flash3 is bf16-only";
#else
  auto be = make_attention("flash3");
  struct Case {
    AttnShape s;
    int window;  // 0: causal; else a sliding window (the masked kernels)
  };
  const Case cases[] = {
      {{3, 1000, 8, 2, 64}, 0},     // persistent blocks, dQ first; G 4
      {{1, 4500, 6, 2, 64}, 0},     // persistent blocks, dQ a step late; G 3
      {{1, 8300, 4, 1, 64}, 0},     // a block a tile, each head's diagonal step first; G 4
      {{2, 1777, 6, 3, 128}, 0},    // HS 128; G 2
      {{1, 1000, 8, 2, 128}, 192},  // masked, HS 128
      {{2, 4097, 4, 2, 64}, 100},   // masked, HS 64, dQ a step late
  };
  for (const Case& c : cases) {
    const AttnShape& s = c.s;
    const AttnMask mask{nullptr, c.window};
    ASSERT_EQ(be->unsupported_reason(s, mask.spec()), "");
    std::vector<float> qkv, dout;
    random_attention_inputs(s, qkv, dout);  // FLASHGPT_SEED repeats them
    const size_t n_qkv = qkv.size(), H3 = size_t(s.NH) + 2 * s.NKV;
    DeviceBuffer<floatX> d_qkv(n_qkv), d_dqkv(n_qkv), d_out(dout.size()), d_dout(dout.size());
    DeviceBuffer<float> lse(be->saved_bytes(s) / sizeof(float));
    DeviceBuffer<char> scratch(be->scratch_bytes(s));
    d_qkv.upload(to_floatX(qkv));
    d_dout.upload(to_floatX(dout));
    flash3::forward_bf16(d_out.ptr, lse.ptr, scratch.ptr, d_qkv.ptr, s, mask, 0);
    auto backward = [&](flash3::BwdHeads heads) {
      d_dqkv.poison();
      scratch.poison();  // the turns too: the backward zeroes them
      flash3::backward_bf16(d_dqkv.ptr, scratch.ptr, d_dout.ptr, d_qkv.ptr, d_out.ptr, lse.ptr, s,
                            /*deterministic=*/false, mask, 0, heads);
      return to_float(d_dqkv.download());
    };
    const std::vector<float> kv = backward(flash3::BwdHeads::kKvHeads),
                             q1 = backward(flash3::BwdHeads::kQueryHeads),
                             q2 = backward(flash3::BwdHeads::kQueryHeads);
    // Per part (dQ, dK, dV): one bf16 rounding apart (2^-7 of the larger), plus the fp32
    // reassociation of sums of up to 2^8 terms (2^-16 of the part's largest element).
    auto part = [&](size_t i) {
      const size_t head = i / s.HS % H3;
      return head < size_t(s.NH) ? 0 : head < size_t(s.NH + s.NKV) ? 1 : 2;
    };
    double largest[3] = {0, 0, 0};
    for (size_t i = 0; i < n_qkv; ++i)
      largest[part(i)] = std::max(largest[part(i)], (double)std::fabs(kv[i]));
    size_t bad[3] = {0, 0, 0}, nonfinite = 0, dkv_repeat = 0;
    for (size_t i = 0; i < n_qkv; ++i) {
      const double a = q1[i], r = kv[i];
      nonfinite += !std::isfinite(a);
      const double tol = std::ldexp(std::max(std::fabs(a), std::fabs(r)), -7) +
                         std::ldexp(largest[part(i)], -16);
      bad[part(i)] += !(std::fabs(a - r) <= tol);
      if (part(i) > 0) dkv_repeat += std::memcmp(&q1[i], &q2[i], sizeof(float)) != 0;
    }
    const std::string what = "B" + std::to_string(s.B) + " T" + std::to_string(s.T) + " NH" +
                             std::to_string(s.NH) + " NKV" + std::to_string(s.NKV) + " HS" +
                             std::to_string(s.HS) + " W" + std::to_string(c.window);
    EXPECT_GT(largest[1], 0.0) << what;
    EXPECT_EQ(nonfinite, 0u) << what << ": query-head blocks: NaN/Inf";
    EXPECT_EQ(bad[0], 0u) << what << ": dQ elements off the kv-head blocks' by more than a rounding";
    EXPECT_EQ(bad[1], 0u) << what << ": dK elements off";
    EXPECT_EQ(bad[2], 0u) << what << ": dV elements off";
    EXPECT_EQ(dkv_repeat, 0u) << what << ": dK/dV of the query-head blocks differ between runs";
  }
#endif
}

}  // namespace
