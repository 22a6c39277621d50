// classifier.cu — see classifier.cuh.
#include "kernels/classifier.cuh"

#include "kernels/attention/flash_common.cuh"  // cp.async

namespace {

template <int W>
__global__ void __launch_bounds__(1024)
    classifier_kernel(float* losses, floatX* dlogits, const floatX* logits, const int* targets,
                      float dloss, int V, int Vp) {
  const int row = blockIdx.x;
  const floatX* x = logits + (size_t)row * Vp;
  const int target = targets[row];
  // Read before any thread can overwrite the row (the block reductions below are barriers).
  const float target_logit = threadIdx.x == 0 ? to_f32(x[target]) : 0.0f;

  float m = -INFINITY, s = 0.0f;
  for (int v0 = threadIdx.x * W; v0 < V; v0 += blockDim.x * W) {
    float xv[W];
    load_floats<W>(xv, x + v0);
    float cmax = -INFINITY;
#pragma unroll
    for (int k = 0; k < W; k++)
      if (v0 + k < V) cmax = fmaxf(cmax, xv[k]);
    const float mnew = fmaxf(m, cmax);
    s *= expf(m - mnew);  // m = -inf on the first chunk: exp(-inf) = 0
#pragma unroll
    for (int k = 0; k < W; k++)
      if (v0 + k < V) s += expf(xv[k] - mnew);
    m = mnew;
  }
  const float M = block_reduce_max(m);
  const float S = block_reduce_sum(m == -INFINITY ? 0.0f : s * expf(m - M));
  const float lse = M + logf(S);
  if (threadIdx.x == 0) losses[row] = lse - target_logit;
  if (dlogits == nullptr) return;

  floatX* d = dlogits + (size_t)row * Vp;
  for (int v0 = threadIdx.x * W; v0 < Vp; v0 += blockDim.x * W) {
    float xv[W], o[W];
    load_floats<W>(xv, x + v0);
#pragma unroll
    for (int k = 0; k < W; k++) {
      const int v = v0 + k;
      o[k] = v < V ? dloss * (expf(xv[k] - lse) - (v == target ? 1.0f : 0.0f)) : 0.0f;
    }
    if constexpr (W == x128::size) {
      x128 ov;
#pragma unroll
      for (int k = 0; k < W; k++) ov[k] = from_f32<floatX>(o[k]);
      store128(d + v0, ov);
    } else {
      d[v0] = from_f32<floatX>(o[0]);
    }
  }
}

// The row staged in shared memory (128-bit path, Vp * sizeof(floatX) bytes of dynamic shared
// memory): every thread issues all of its 16-byte cp.async copies at once, then the max, the
// sum and the dlogits pass read the row from shared memory. Until the first barrier (in
// block_reduce_max) a thread reads only the chunks it copied itself, which its own wait made
// visible; after it, all of them (the target's logit, and the in-place writes, which come after
// every read of the row from global memory). Two blocks per SM at GPT-2's Vp (98 KiB each): one
// block's copies overlap the other's arithmetic and stores.
__global__ void __launch_bounds__(1024, 2)
    classifier_staged_kernel(float* losses, floatX* dlogits, const floatX* logits,
                             const int* targets, float dloss, int V, int Vp) {
  constexpr int W = x128::size;
  extern __shared__ __align__(16) unsigned char staged_bytes[];
  const floatX* xs = reinterpret_cast<const floatX*>(staged_bytes);
  const int row = blockIdx.x, chunks = Vp / W;
  const floatX* x = logits + (size_t)row * Vp;
  for (int c = threadIdx.x; c < chunks; c += blockDim.x)
    flash::cp_async_16(flash::smem_u32(xs + c * W), x + c * W, true);
  flash::cp_async_commit();
  flash::cp_async_wait<0>();

  float m = -INFINITY;
  for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
    const x128 v = load128(xs + c * W);
#pragma unroll
    for (int k = 0; k < W; k++)
      if (c * W + k < V) m = fmaxf(m, to_f32(v[k]));
  }
  const float M = block_reduce_max(m);
  float s = 0.0f;
  for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
    const x128 v = load128(xs + c * W);
#pragma unroll
    for (int k = 0; k < W; k++)
      if (c * W + k < V) s += expf(to_f32(v[k]) - M);
  }
  const float lse = M + logf(block_reduce_sum(s));
  const int target = targets[row];
  if (threadIdx.x == 0) losses[row] = lse - to_f32(xs[target]);
  if (dlogits == nullptr) return;

  floatX* d = dlogits + (size_t)row * Vp;
  for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
    const x128 v = load128(xs + c * W);
    x128 o;
#pragma unroll
    for (int k = 0; k < W; k++) {
      const int i = c * W + k;
      o[k] = from_f32<floatX>(
          i < V ? dloss * (expf(to_f32(v[k]) - lse) - (i == target ? 1.0f : 0.0f)) : 0.0f);
    }
    store128(d + c * W, o);
  }
}

// Whether a row of Vp fits the staged kernel's shared memory on the current device.
bool staged_fits(int Vp) {
  int dev = 0, optin = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  cudaFuncAttributes fa;
  CUDA_CHECK(cudaFuncGetAttributes(&fa, classifier_staged_kernel));
  return (size_t)Vp * sizeof(floatX) + fa.sharedSizeBytes <= (size_t)optin;
}

__global__ void mean_loss_kernel(float* out, const float* losses, int N) {
  float acc = 0.0f;
  for (int i = threadIdx.x; i < N; i += blockDim.x) acc += losses[i];
  acc = block_reduce_sum(acc);
  if (threadIdx.x == 0) out[0] = acc / N;
}

}  // namespace

void classifier(float* losses, floatX* dlogits, const floatX* logits, const int* targets,
                float dloss, int N, int V, int Vp, cudaStream_t stream) {
  const bool vec = Vp % x128::size == 0 && aligned16(logits) &&
                   (dlogits == nullptr || aligned16(dlogits));
  if (vec && staged_fits(Vp)) {
    const int bytes = Vp * (int)sizeof(floatX);
    allow_dynamic_smem((const void*)classifier_staged_kernel, bytes);
    classifier_staged_kernel<<<N, 1024, bytes, stream>>>(losses, dlogits, logits, targets, dloss,
                                                         V, Vp);
  } else if (vec)
    classifier_kernel<x128::size><<<N, 1024, 0, stream>>>(losses, dlogits, logits, targets, dloss,
                                                          V, Vp);
  else
    classifier_kernel<1><<<N, 1024, 0, stream>>>(losses, dlogits, logits, targets, dloss, V, Vp);
  CUDA_CHECK_LAUNCH();
}

void mean_loss(float* out, const float* losses, int N, cudaStream_t stream) {
  mean_loss_kernel<<<1, 1024, 0, stream>>>(out, losses, N);
  CUDA_CHECK_LAUNCH();
}
