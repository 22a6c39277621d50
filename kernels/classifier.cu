// classifier.cu — see classifier.cuh.
#include "kernels/classifier.cuh"

#include "kernels/attention/flash_common.cuh"  // fast_exp2 (MUFU.EX2 alone), kLog2e

namespace {

using flash::fast_exp2;
using flash::kLog2e;
constexpr int kThreads = 1024;  // a row per block (classifier.cuh says why)

// Softmax terms in log2 units: exp(x - m) = 2^(x log2e - m log2e), one FFMA and one MUFU.EX2 an
// element (expf costs ~8 instructions; the kernel was issue-bound with it: classifier.cuh).
template <int W>
__global__ void __launch_bounds__(kThreads)
    classifier_kernel(float* losses, floatX* dlogits, const floatX* logits, const int* targets,
                      float dloss, int V, int Vp) {
  const int row = blockIdx.x;
  const floatX* x = logits + (size_t)row * Vp;
  const int target = targets[row];
  // Read before any thread can overwrite the row (the block reductions below are barriers).
  const float target_logit = threadIdx.x == 0 ? to_f32(x[target]) : 0.0f;

  // Pass 1: per thread a running max m and a sum s of exp(x - m), rescaled only when a chunk
  // raises m. The one chunk that straddles V reads its columns >= V as -inf.
  float m = -INFINITY, s = 0.0f;
  for (int v0 = threadIdx.x * W; v0 < V; v0 += blockDim.x * W) {
    float xv[W];
    load_floats<W>(xv, x + v0);
    if (v0 + W > V) {
#pragma unroll
      for (int k = 0; k < W; k++)
        if (v0 + k >= V) xv[k] = -INFINITY;
    }
    float cmax = xv[0];
#pragma unroll
    for (int k = 1; k < W; k++) cmax = fmaxf(cmax, xv[k]);
    if (cmax > m) {
      s *= fast_exp2((m - cmax) * kLog2e);  // m = -inf on the first chunk: 2^-inf = 0
      m = cmax;
    }
    const float mb = m * kLog2e;
#pragma unroll
    for (int k = 0; k < W; k++) s += fast_exp2(fmaf(xv[k], kLog2e, -mb));
  }
  const float M = block_reduce_max(m);
  const float S = block_reduce_sum(m == -INFINITY ? 0.0f : s * fast_exp2((m - M) * kLog2e));
  const float lse = M + logf(S);
  if (threadIdx.x == 0) losses[row] = lse - target_logit;
  if (dlogits == nullptr) return;

  // Pass 2: dlogits = dloss (p - [v == target]), p = 2^(x log2e - lse log2e); 0 for v >= V.
  floatX* d = dlogits + (size_t)row * Vp;
  const float lb = lse * kLog2e;
  for (int v0 = threadIdx.x * W; v0 < Vp; v0 += blockDim.x * W) {
    float o[W];
    load_floats<W>(o, x + v0);
#pragma unroll
    for (int k = 0; k < W; k++) o[k] = dloss * fast_exp2(fmaf(o[k], kLog2e, -lb));
    if (v0 + W > V) {
#pragma unroll
      for (int k = 0; k < W; k++)
        if (v0 + k >= V) o[k] = 0.0f;
    }
    if (target >= v0 && target < v0 + W) {
#pragma unroll
      for (int k = 0; k < W; k++)
        if (v0 + k == target) o[k] -= dloss;
    }
    store_floats<W>(d + v0, o);
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
    classifier_kernel<x128::size><<<N, kThreads, 0, stream>>>(losses, dlogits, logits, targets, dloss,
                                                          V, Vp);
  else
    classifier_kernel<1><<<N, kThreads, 0, stream>>>(losses, dlogits, logits, targets, dloss, V, Vp);
  CUDA_CHECK_LAUNCH();
}

void mean_loss(float* out, const float* losses, int N, cudaStream_t stream) {
  mean_loss_kernel<<<1, 1024, 0, stream>>>(out, losses, N);
  CUDA_CHECK_LAUNCH();
}
