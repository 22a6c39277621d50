// test_flash3 — the flash3 backend's repeat determinism. (flash3's accuracy against the CPU
// oracle, ragged T, GQA and poisoned outputs: the registry-driven tests/gpu/test_attention.cu;
// the sm_90 helpers it is built from: tests/gpu/test_sm90.cu.)
//
//   Flash3.RepeatDeterminism    forward and backward bitwise equal over 3 runs (HS 64 and 128,
//                               GQA, ragged T, more blocks than SMs; HS 64 below and above the
//                               T where its backward's dQ starts to lag a step)
//
// Run (GPU machine): ./build/test_gpu --gtest_filter='Flash3*'
#include <cstring>
#include <random>
#include <vector>

#include "kernels/attention/attention.cuh"
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

}  // namespace
