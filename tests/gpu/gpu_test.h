// gpu_test.h — fixture for GPU tests: every test skips when no CUDA device is present (CI).
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

inline bool gpu_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!gpu_available()) GTEST_SKIP() << "no CUDA device";
  }
};
