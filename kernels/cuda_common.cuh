// cuda_common.cuh — CUDA-side basics: floatX, error checks, small device helpers.
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/common.h"

// floatX: the type of parameters and activations on the GPU. The default build is bf16 with
// fp32 master weights / optimizer state / statistics; `make PRECISION=FP32` is fp32 throughout.
#if defined(ENABLE_FP32)
typedef float floatX;
#define PRECISION_NAME "fp32"
#else
typedef __nv_bfloat16 floatX;
#define PRECISION_NAME "bf16"
#endif

#define CUDA_CHECK(call)                                                                 \
  do {                                                                                   \
    cudaError_t err_ = (call);                                                           \
    if (err_ != cudaSuccess)                                                             \
      FAIL("CUDA error %s at %s:%d: %s", cudaGetErrorName(err_), __FILE__, __LINE__,     \
           cudaGetErrorString(err_));                                                    \
  } while (0)

#define CUBLAS_CHECK(call)                                                               \
  do {                                                                                   \
    cublasStatus_t st_ = (call);                                                         \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                    \
      FAIL("cuBLAS error %d at %s:%d", (int)st_, __FILE__, __LINE__);                    \
  } while (0)

// After every kernel launch.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

inline int ceil_div(int a, int b) { return (a + b - 1) / b; }
inline size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }
