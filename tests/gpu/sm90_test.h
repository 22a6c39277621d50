// sm90_test.h — the fixture of the GPU tests that need an sm_90 device (wgmma, TMA,
// setmaxnreg): it skips without one, as GpuTest skips without any device.
#pragma once
#include "tests/gpu/gpu_test.h"

inline int sm_major() {
  int dev = 0, major = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  return major;
}

class Sm90Test : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (!IsSkipped() && sm_major() != 9) GTEST_SKIP() << "needs an sm_90 GPU";
  }
};
