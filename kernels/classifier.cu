// classifier.cu — see classifier.cuh.
#include "kernels/classifier.cuh"

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
  if (vec)
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
