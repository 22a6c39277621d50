// ceilings.cu — see ceilings.h: device-to-device copy bandwidth and the cuBLAS bf16 GEMM rate
// of the current GPU, each the median of several runs timed with CUDA events.
#include "bench/ceilings.h"

#include <algorithm>
#include <vector>

#include "bench/bench_util.cuh"
#include "kernels/cuda_common.cuh"
#include "kernels/cuda_timer.cuh"

namespace {

struct Cublas {
  cublasHandle_t h = nullptr;
  Cublas() { CUBLAS_CHECK(cublasCreate(&h)); }
  ~Cublas() { cublasDestroy(h); }
};

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
    DeviceAllocs buf;
    char* src = buf.alloc(bytes);
    char* dst = buf.alloc(bytes);
    CUDA_CHECK(cudaMemsetAsync(src, 1, bytes, st));
    const double ms = median_ms(
        [&] { CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, st)); }, 2, 9,
        0, st);
    out.copy_bytes = bytes;
    out.copy_bytes_per_s = ms > 0 ? 2.0 * double(bytes) / (ms * 1e-3) : 0;
  }
  {  // bf16 GEMM rate: C = A B, M = N = K
    const int N = out.free_bytes > (2ull << 30) ? 8192 : 4096;
    const size_t elems = size_t(N) * N;
    DeviceAllocs buf;
    auto* A = buf.alloc<__nv_bfloat16>(elems);
    auto* B = buf.alloc<__nv_bfloat16>(elems);
    auto* C = buf.alloc<__nv_bfloat16>(elems);
    fill_uniform(A, elems, 1u, -1.f, 1.f, st);  // random: zeros run the tensor cores cooler
    fill_uniform(B, elems, 2u, -1.f, 1.f, st);
    Cublas cb;
    CUBLAS_CHECK(cublasSetStream(cb.h, st));
    const float alpha = 1.f, beta = 0.f;
    const double ms = median_ms(
        [&] {
          CUBLAS_CHECK(cublasGemmEx(cb.h, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &alpha, A, CUDA_R_16BF, N,
                                    B, CUDA_R_16BF, N, &beta, C, CUDA_R_16BF, N, CUBLAS_COMPUTE_32F,
                                    CUBLAS_GEMM_DEFAULT));
        },
        2, 7, 0, st);
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
