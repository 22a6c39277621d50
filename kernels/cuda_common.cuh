// cuda_common.cuh — CUDA-side basics: floatX, error checks, small device helpers.
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <utility>

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

#define CUDA_CHECK(call)                                                                    \
  do {                                                                                      \
    cudaError_t err_ = (call);                                                              \
    if (err_ != cudaSuccess)                                                                \
      THROW_ERROR("CUDA error %s at %s:%d: %s", cudaGetErrorName(err_), __FILE__, __LINE__, \
                  cudaGetErrorString(err_));                                                \
  } while (0)

#define CUBLAS_CHECK(call)                                                   \
  do {                                                                       \
    cublasStatus_t st_ = (call);                                             \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                        \
      THROW_ERROR("cuBLAS error %d at %s:%d", (int)st_, __FILE__, __LINE__); \
  } while (0)

// After every kernel launch.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

// Lets `kernel` launch with `bytes` of dynamic shared memory (over 48 KiB needs this opt-in) on
// the current device. The attribute belongs to the device, and one process may drive several GPUs
// from threads (the NCCL ring tests, tests/gpu/test_ring_attention.cu): so it is set per kernel
// and device, under a lock, not once per process (a once-per-process flag left the second GPU's
// launch failing, and the ring tests hanging on 2 GPUs, 2026-11-25).
inline void allow_dynamic_smem(const void* kernel, int bytes) {
  static std::mutex m;
  static std::map<std::pair<const void*, int>, int> allowed;  // (kernel, device) -> bytes
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(m);
  int& have = allowed[{kernel, dev}];
  if (have >= bytes) return;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  have = bytes;
}

inline int ceil_div(int a, int b) { return (a + b - 1) / b; }
inline size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

// ---------------------------------------------------------------------------------------------
// Helpers shared by the kernels.

#include <cstdint>

// Largest power of two (capped at 256) that divides the address; cuBLASLt and the 128-bit
// kernel paths need to know how aligned a pointer is.
inline int ptr_alignment(const void* p) {
  uintptr_t a = (uintptr_t)p;
  if (a == 0) return 256;
  int al = 1;
  while (al < 256 && (a & (uintptr_t)(2 * al - 1)) == 0) al *= 2;
  return al;
}
inline bool aligned16(const void* p) { return ((uintptr_t)p & 15) == 0; }

// Number of SMs of the current device (cached after the first call).
inline int cuda_num_sms() {
  static int n = 0;
  if (n == 0) {
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
  }
  return n;
}

// L2 cache size of the current device in bytes (cached after the first call).
inline long long cuda_l2_bytes() {
  static int n = -1;
  if (n < 0) {
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrL2CacheSize, dev));
  }
  return n;
}

// floatX as a CUDA data type (cuBLAS / cuBLASLt descriptors).
#if defined(ENABLE_FP32)
constexpr cudaDataType_t kCudaFloatX = CUDA_R_32F;
#else
constexpr cudaDataType_t kCudaFloatX = CUDA_R_16BF;
#endif

// Packed128: 16 bytes of T (8 bf16 or 4 fp32), loaded and stored with one 128-bit access.
template <class T>
struct alignas(16) Packed128 {
  static constexpr int size = 16 / sizeof(T);
  T payload[size];
  __device__ __forceinline__ T& operator[](int i) { return payload[i]; }
  __device__ __forceinline__ const T& operator[](int i) const { return payload[i]; }
};
typedef Packed128<floatX> x128;
typedef Packed128<float> f128;

template <class T>
__device__ __forceinline__ Packed128<T> load128(const T* p) {
  return *reinterpret_cast<const Packed128<T>*>(p);
}
// Streaming load (evict-first): for data read exactly once.
template <class T>
__device__ __forceinline__ Packed128<T> load128cs(const T* p) {
  Packed128<T> r;
  *reinterpret_cast<int4*>(&r) = __ldcs(reinterpret_cast<const int4*>(p));
  return r;
}
template <class T>
__device__ __forceinline__ void store128(T* p, const Packed128<T>& v) {
  *reinterpret_cast<Packed128<T>*>(p) = v;
}
template <class T>
__device__ __forceinline__ void store128cs(T* p, const Packed128<T>& v) {
  __stcs(reinterpret_cast<int4*>(p), *reinterpret_cast<const int4*>(&v));
}

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
template <class T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// out[e] = f(a[e], b[e]) for e < n (f: two floatX -> float): thread i handles elements [i W, i W + W) of the
// 128-bit part (vec: out, a and b 16-byte aligned), then the first W threads the tail one by
// one; else (!vec) element i. Launch max(n / W, W) threads when vec, else n.
template <class F>
__device__ __forceinline__ void map2_elementwise(floatX* out, const floatX* a, const floatX* b,
                                                 size_t n, bool vec, F&& f) {
  constexpr int W = x128::size;
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (vec) {
    const size_t nv = n / W;
    if (i < nv) {
      x128 x = load128cs(a + i * W), y = load128cs(b + i * W), r;
#pragma unroll
      for (int k = 0; k < W; k++) r[k] = from_f32<floatX>(f(x[k], y[k]));
      store128(out + i * W, r);
    }
    const size_t t = nv * W + i;
    if (i < W && t < n) out[t] = from_f32<floatX>(f(a[t], b[t]));
  } else if (i < n) {
    out[i] = from_f32<floatX>(f(a[i], b[i]));
  }
}

// W consecutive elements of a row as floats: one 128-bit access when W == x128::size (8 bf16 or
// 4 fp32: the vector path), else W scalar ones. STREAM: a load of data read once (load128cs).
template <int W, bool STREAM = false>
__device__ __forceinline__ void load_floats(float* dst, const floatX* src) {
  if constexpr (W == x128::size) {
    x128 v;
    if constexpr (STREAM)
      v = load128cs(src);
    else
      v = load128(src);
#pragma unroll
    for (int k = 0; k < W; k++) dst[k] = to_f32(v[k]);
  } else {
#pragma unroll
    for (int k = 0; k < W; k++) dst[k] = to_f32(src[k]);
  }
}
template <int W>
__device__ __forceinline__ void store_floats(floatX* dst, const float* src) {
  if constexpr (W == x128::size) {
    x128 v;
#pragma unroll
    for (int k = 0; k < W; k++) v[k] = from_f32<floatX>(src[k]);
    store128(dst, v);
  } else {
#pragma unroll
    for (int k = 0; k < W; k++) dst[k] = from_f32<floatX>(src[k]);
  }
}

__device__ __forceinline__ float warp_reduce_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_reduce_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Block-wide reductions (blockDim.x a multiple of 32, at most 1024). Every thread gets the
// result. Fixed shuffle/shared-memory order: deterministic.
template <bool IsMax>
__device__ __forceinline__ float block_reduce(float v) {
  __shared__ float shared[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
  v = IsMax ? warp_reduce_max(v) : warp_reduce_sum(v);
  __syncthreads();  // shared[] may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float r = lane < nwarps ? shared[lane] : (IsMax ? -INFINITY : 0.0f);
  return IsMax ? warp_reduce_max(r) : warp_reduce_sum(r);
}
__device__ __forceinline__ float block_reduce_sum(float v) { return block_reduce<false>(v); }
__device__ __forceinline__ float block_reduce_max(float v) { return block_reduce<true>(v); }

// Deterministic second stage of a column reduction: partials (G, M) in fp32, written by G
// blocks of a first-stage kernel. out_a[m] += sum_g partials[g][m] for m < Ca, and
// out_b[m - Ca] += ... for Ca <= m < M (out_b may be nullptr when M == Ca). The sum over g
// runs in a fixed order (thread y of a column adds g = y, y + 32, ... in turn, then one warp adds
// the 32 sums in y order), so the result is bit-identical from run to run.
// Block (32, 32): a column per lane, 32 rows of partials in flight per column and 4 loads per
// thread issued before their adds. The form with (32, 8) blocks and one load at a time ran
// 11.2 us per call in the d12 step (73 calls; G 256 or 1024, M 768-3072: 24-96 blocks on 132
// SMs, latency-bound).
template <int Dummy = 0>
__global__ void __launch_bounds__(1024)
    reduce_partials_kernel(float* out_a, float* out_b, const float* __restrict__ partials, int G,
                           int Ca, int M) {
  __shared__ float s[32][33];
  const int m = blockIdx.x * 32 + threadIdx.x;
  float acc = 0.0f;
  if (m < M) {
    const float* p = partials + m;
    int g = threadIdx.y;
    for (; g + 96 < G; g += 128) {
      const float a0 = p[(size_t)g * M], a1 = p[(size_t)(g + 32) * M],
                  a2 = p[(size_t)(g + 64) * M], a3 = p[(size_t)(g + 96) * M];
      acc += a0;
      acc += a1;
      acc += a2;
      acc += a3;
    }
    for (; g < G; g += 32) acc += p[(size_t)g * M];
  }
  s[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && m < M) {
    float r = 0.0f;
    for (int y = 0; y < 32; y++) r += s[y][threadIdx.x];
    if (m < Ca) out_a[m] += r;
    else out_b[m - Ca] += r;
  }
}
inline void reduce_partials(float* out_a, float* out_b, const float* partials, int G, int Ca,
                            int M, cudaStream_t stream) {
  reduce_partials_kernel<<<ceil_div(M, 32), dim3(32, 32), 0, stream>>>(out_a, out_b, partials, G,
                                                                       Ca, M);
  CUDA_CHECK_LAUNCH();
}

// Round a byte count up to 256 (every sub-buffer carved from one allocation starts aligned).
inline size_t align256(size_t n) { return (n + 255) / 256 * 256; }
