// gpu_test.h — what the GPU tests share beyond tests/test_common.h: the fixture that skips every
// test without a CUDA device (CI), a device buffer, and the backend that stands for "flash" in
// tests of the model.
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "kernels/attention/backends.h"  // AttnShape
#include "kernels/cuda_common.cuh"
#include "tests/test_common.h"

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

// n elements of T on the device, freed on every path. `offset` elements past a 256-byte aligned
// start (`base`), so tests can hand kernels misaligned pointers. poison() fills every byte with
// 0xff, NaN in bf16 and fp32, so an element a kernel leaves unwritten fails the check.
template <class T>
struct DeviceBuffer {
  char* base = nullptr;
  T* ptr = nullptr;
  size_t n = 0;
  explicit DeviceBuffer(size_t n_, int offset = 0) : n(n_) {
    CUDA_CHECK(cudaMalloc(&base, std::max<size_t>(n * sizeof(T), 16) + 256));
    ptr = reinterpret_cast<T*>(base) + offset;
  }
  ~DeviceBuffer() { cudaFree(base); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  size_t bytes() const { return n * sizeof(T); }
  void poison() { CUDA_CHECK(cudaMemset(ptr, 0xff, bytes())); }
  void upload(const std::vector<T>& h) {
    CUDA_CHECK(cudaMemcpy(ptr, h.data(), std::min(h.size(), n) * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {  // waits for the device
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<T> h(n);
    CUDA_CHECK(cudaMemcpy(h.data(), ptr, bytes(), cudaMemcpyDeviceToHost));
    return h;
  }
};

// n values N(0, sd) rounded to floatX (what the GPU sees), as float (f) and as floatX (x).
inline void random_floatX(size_t n, float sd, std::mt19937_64& rng, std::vector<float>& f,
                          std::vector<floatX>& x);

// Fresh inputs of one attention call on shape s, N(0, 1) rounded to bf16 (what the kernels read,
// so the CPU reference sees the same values): qkv (B, T, NH + 2*NKV, HS), dout (B, T, NH, HS).
// From test_rng(): FLASHGPT_SEED repeats them.
inline void random_attention_inputs(const AttnShape& s, std::vector<float>& qkv,
                                    std::vector<float>& dout) {
  std::mt19937_64 rng = test_rng();
  std::normal_distribution<float> nd(0.f, 1.f);
  const size_t tokens = size_t(s.B) * s.T;
  qkv.resize(tokens * (s.NH + 2 * s.NKV) * s.HS);
  dout.resize(tokens * s.NH * s.HS);
  for (auto& x : qkv) x = bf16_round(nd(rng));
  for (auto& x : dout) x = bf16_round(nd(rng));
}

// floatX values as float, and back (rounding to floatX; the identity in the FP32 build).
inline std::vector<float> to_float(const std::vector<floatX>& x) {
  std::vector<float> f(x.size());
  for (size_t i = 0; i < x.size(); i++) f[i] = float(x[i]);
  return f;
}
inline std::vector<floatX> to_floatX(const std::vector<float>& f) {
  std::vector<floatX> x(f.size());
  for (size_t i = 0; i < f.size(); i++) x[i] = floatX(f[i]);
  return x;
}

inline void random_floatX(size_t n, float sd, std::mt19937_64& rng, std::vector<float>& f,
                          std::vector<floatX>& x) {
  std::normal_distribution<float> d(0.0f, sd);
  f.resize(n);
  for (float& v : f) v = d(rng);
  x = to_floatX(f);
  f = to_float(x);
}
