// gpu_test.h — fixture for GPU tests: every test skips when no CUDA device is present (CI).
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "kernels/cuda_common.cuh"

inline bool gpu_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// This build's LSE-saving backend for tests of "the model with flash": flash (bf16 tensor
// cores), or "scalar" in the FP32 build, which has no flash. So those tests run in both builds
// and say which backend they ran.
inline const char* lse_attention() { return sizeof(floatX) == 2 ? "flash" : "scalar"; }

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!gpu_available()) GTEST_SKIP() << "no CUDA device";
  }
};

// Median time of f() in microseconds over 20 runs after 3 warm-ups (CUDA events on stream 0).
template <class F>
double median_us(F f) {
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 3; i++) f();
  std::vector<double> t;
  for (int i = 0; i < 20; i++) {
    CUDA_CHECK(cudaEventRecord(a));
    f();
    CUDA_CHECK(cudaEventRecord(b));
    CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms * 1000.0);
  }
  CUDA_CHECK(cudaEventDestroy(a));
  CUDA_CHECK(cudaEventDestroy(b));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}
