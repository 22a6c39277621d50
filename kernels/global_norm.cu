// global_norm.cu — see global_norm.cuh.
#include "kernels/global_norm.cuh"

namespace {

// kGlobalNormBlocks: global_norm.h.
constexpr int kThreads = 512;

__device__ double block_sum_double(double v) {
  __shared__ double sh[kThreads / 32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) sh[threadIdx.x / 32] = v;
  __syncthreads();
  double r = 0.0;
  if (threadIdx.x < 32) {
    r = threadIdx.x < blockDim.x / 32 ? sh[threadIdx.x] : 0.0;
    for (int o = 16; o > 0; o >>= 1) r += __shfl_xor_sync(0xffffffffu, r, o);
  }
  return r;  // valid in thread 0
}

// 128-bit loads, 4 of them in flight per thread per step (vec: g 16-byte aligned), then the
// scalar tail; two fp32 accumulators per thread.
__global__ void __launch_bounds__(kThreads) norm_partials_kernel(double* partials, const float* g,
                                                                 size_t n, bool vec) {
  constexpr int U = 4;
  float acc0 = 0.0f, acc1 = 0.0f;
  const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  const size_t n4 = vec ? n / 4 : 0;
  const float4* g4 = reinterpret_cast<const float4*>(g);
  size_t i = tid;
  for (; i + (U - 1) * stride < n4; i += U * stride) {
    float4 v[U];
#pragma unroll
    for (int u = 0; u < U; u++) v[u] = __ldcs(g4 + i + u * stride);
#pragma unroll
    for (int u = 0; u < U; u++) {
      acc0 += v[u].x * v[u].x + v[u].y * v[u].y;
      acc1 += v[u].z * v[u].z + v[u].w * v[u].w;
    }
  }
  for (; i < n4; i += stride) {
    const float4 v = __ldcs(g4 + i);
    acc0 += v.x * v.x + v.y * v.y;
    acc1 += v.z * v.z + v.w * v.w;
  }
  for (size_t j = n4 * 4 + tid; j < n; j += stride) acc0 += g[j] * g[j];
  const double r = block_sum_double((double)acc0 + (double)acc1);
  if (threadIdx.x == 0) partials[blockIdx.x] = r;
}

__global__ void __launch_bounds__(kThreads) norm_final_kernel(double* out, const double* partials, int G) {
  double acc = 0.0;
  for (int i = threadIdx.x; i < G; i += blockDim.x) acc += partials[i];
  const double r = block_sum_double(acc);
  if (threadIdx.x == 0) out[0] = r;
}

}  // namespace

void global_norm_squared(double* out, const float* g, size_t n, double* scratch,
                         cudaStream_t stream) {
  norm_partials_kernel<<<kGlobalNormBlocks, kThreads, 0, stream>>>(scratch, g, n, aligned16(g));
  CUDA_CHECK_LAUNCH();
  norm_final_kernel<<<1, kThreads, 0, stream>>>(out, scratch, kGlobalNormBlocks);
  CUDA_CHECK_LAUNCH();
}
