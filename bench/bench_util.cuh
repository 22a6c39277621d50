// bench_util.cuh — what the GPU benchmarks (bench/*.cu) share: random device data and device
// buffers that are freed on every path. Timing is kernels/cuda_timer.cuh's (median_ms).
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/cuda_common.cuh"

// p[i] = uniform in [lo, hi), from a hash of (i, seed): benchmarks run on random data because
// zeros let the tensor cores run cooler (and faster) than real data does.
template <class T>
__global__ void fill_uniform_kernel(T* p, size_t n, uint32_t seed, float lo, float hi) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  uint32_t h = uint32_t(i) * 2654435761u ^ seed ^ uint32_t(i >> 32) * 2246822519u;
  h ^= h >> 15, h *= 2246822519u, h ^= h >> 13, h *= 3266489917u, h ^= h >> 16;
  p[i] = T(lo + (hi - lo) * (float(h) * (1.f / 4294967296.f)));
}
template <class T>
void fill_uniform(T* p, size_t n, uint32_t seed, float lo, float hi, cudaStream_t stream = 0) {
  if (n == 0) return;
  fill_uniform_kernel<T><<<(unsigned)ceil_div(n, (size_t)256), 256, 0, stream>>>(p, n, seed, lo, hi);
  CUDA_CHECK_LAUNCH();
}

// Device allocations freed when it goes out of scope (errors throw).
struct DeviceAllocs {
  std::vector<void*> ptrs;
  DeviceAllocs() = default;
  DeviceAllocs(const DeviceAllocs&) = delete;
  DeviceAllocs& operator=(const DeviceAllocs&) = delete;
  ~DeviceAllocs() {
    for (void* p : ptrs) cudaFree(p);
  }
  template <class T = char>
  T* alloc(size_t n) {
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(n * sizeof(T), 256)));
    ptrs.push_back(p);
    return static_cast<T*>(p);
  }
  // nullptr when the device is out of memory (the error is cleared); other errors throw.
  template <class T = char>
  T* try_alloc(size_t n) {
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, std::max<size_t>(n * sizeof(T), 256));
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      return nullptr;
    }
    CUDA_CHECK(e);
    ptrs.push_back(p);
    return static_cast<T*>(p);
  }
  // n values uniform in [lo, hi).
  template <class T>
  T* random(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
    T* p = alloc<T>(n);
    fill_uniform(p, n, seed, lo, hi);
    return p;
  }
};
