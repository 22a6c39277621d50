// ceilings.cu — see ceilings.h: device-to-device copy bandwidth and the cuBLAS bf16 GEMM rate
// of the current GPU, each the median of several runs timed with CUDA events.
#include "train/ceilings.h"

#include <algorithm>
#include <vector>

#include "kernels/cuda_common.cuh"

namespace {

// Random bf16 in [-1, 1): zeros would let the tensor cores run cooler (and faster) than on
// real data.
__global__ void fill_bf16_kernel(__nv_bfloat16* x, size_t n, uint32_t seed) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  uint32_t h = uint32_t(i) * 2654435761u ^ seed ^ uint32_t(i >> 32) * 2246822519u;
  h ^= h >> 15, h *= 2246822519u, h ^= h >> 13, h *= 3266489917u, h ^= h >> 16;
  x[i] = __float2bfloat16(float(h) * (2.f / 4294967296.f) - 1.f);
}

// Frees what it holds on every path (errors throw).
struct DeviceBuffers {
  std::vector<void*> ptrs;
  ~DeviceBuffers() {
    for (void* p : ptrs) cudaFree(p);
  }
  void* alloc(size_t bytes) {
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, bytes));
    ptrs.push_back(p);
    return p;
  }
};

struct Events {
  cudaEvent_t a = nullptr, b = nullptr;
  Events() {
    CUDA_CHECK(cudaEventCreate(&a));
    CUDA_CHECK(cudaEventCreate(&b));
  }
  ~Events() {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
};

struct Cublas {
  cublasHandle_t h = nullptr;
  Cublas() { CUBLAS_CHECK(cublasCreate(&h)); }
  ~Cublas() { cublasDestroy(h); }
};

// Median milliseconds of fn() on `stream` after `warmup` runs.
template <typename Fn>
double median_ms(Fn fn, cudaStream_t stream, int warmup, int iters) {
  Events ev;
  for (int i = 0; i < warmup; i++) fn();
  std::vector<float> ms;
  for (int i = 0; i < iters; i++) {
    CUDA_CHECK(cudaEventRecord(ev.a, stream));
    fn();
    CUDA_CHECK(cudaEventRecord(ev.b, stream));
    CUDA_CHECK(cudaEventSynchronize(ev.b));
    float t = 0;
    CUDA_CHECK(cudaEventElapsedTime(&t, ev.a, ev.b));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

bool measure_device_ceilings(DeviceCeilings& out) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    cudaGetLastError();
    return false;
  }
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  out.name = prop.name;
  out.sms = prop.multiProcessorCount;
  CUDA_CHECK(cudaMemGetInfo(&out.free_bytes, &out.total_bytes));

  cudaStream_t st = nullptr;
  CUDA_CHECK(cudaStreamCreate(&st));
  struct StreamGuard {
    cudaStream_t s;
    ~StreamGuard() { cudaStreamDestroy(s); }
  } guard{st};

  {  // copy bandwidth: src -> dst, read + write counted
    const size_t bytes = std::max<size_t>(64ull << 20, std::min<size_t>(1ull << 30, out.free_bytes / 8)) & ~size_t(255);
    DeviceBuffers buf;
    void* src = buf.alloc(bytes);
    void* dst = buf.alloc(bytes);
    CUDA_CHECK(cudaMemsetAsync(src, 1, bytes, st));
    const double ms = median_ms(
        [&] { CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, st)); }, st, 2, 9);
    out.copy_bytes = bytes;
    out.copy_bytes_per_s = ms > 0 ? 2.0 * double(bytes) / (ms * 1e-3) : 0;
  }
  {  // bf16 GEMM rate: C = A B, M = N = K
    const int N = out.free_bytes > (2ull << 30) ? 8192 : 4096;
    const size_t elems = size_t(N) * N;
    DeviceBuffers buf;
    auto* A = static_cast<__nv_bfloat16*>(buf.alloc(elems * 2));
    auto* B = static_cast<__nv_bfloat16*>(buf.alloc(elems * 2));
    auto* C = static_cast<__nv_bfloat16*>(buf.alloc(elems * 2));
    const unsigned blocks = unsigned((elems + 255) / 256);
    fill_bf16_kernel<<<blocks, 256, 0, st>>>(A, elems, 1u);
    CUDA_CHECK_LAUNCH();
    fill_bf16_kernel<<<blocks, 256, 0, st>>>(B, elems, 2u);
    CUDA_CHECK_LAUNCH();
    Cublas cb;
    CUBLAS_CHECK(cublasSetStream(cb.h, st));
    const float alpha = 1.f, beta = 0.f;
    const double ms = median_ms(
        [&] {
          CUBLAS_CHECK(cublasGemmEx(cb.h, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &alpha, A, CUDA_R_16BF, N,
                                    B, CUDA_R_16BF, N, &beta, C, CUDA_R_16BF, N, CUBLAS_COMPUTE_32F,
                                    CUBLAS_GEMM_DEFAULT));
        },
        st, 2, 7);
    out.gemm_n = N;
    out.bf16_flops = ms > 0 ? 2.0 * double(N) * N * N / (ms * 1e-3) : 0;
  }
  CUDA_CHECK(cudaStreamSynchronize(st));
  return true;
}

std::string cuda_clear_error() {
  cudaError_t e = cudaGetLastError();
  cudaError_t s = cudaDeviceSynchronize();
  if (s != cudaSuccess) return std::string(cudaGetErrorName(s)) + ": " + cudaGetErrorString(s);
  (void)e;  // a non-sticky error is cleared by reading it
  return "";
}
