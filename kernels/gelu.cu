// gelu.cu — see gelu.cuh.
#include "kernels/gelu.cuh"

namespace {

constexpr float kSqrt2OverPi = 0.79788456080286535588f;

__device__ __forceinline__ float gelu_f(float x) {
  const float u = kSqrt2OverPi * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + tanhf(u));
}
__device__ __forceinline__ float gelu_grad_f(float x) {
  const float u = kSqrt2OverPi * (x + 0.044715f * x * x * x);
  const float th = tanhf(u);
  return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * kSqrt2OverPi * (1.0f + 3.0f * 0.044715f * x * x);
}

// Thread i handles elements [i*W, i*W + W) of the 128-bit part, then the tail one by one.
__global__ void gelu_forward_kernel(floatX* out, const floatX* inp, size_t n, bool vec) {
  constexpr int W = x128::size;
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (vec) {
    const size_t nv = n / W;
    if (i < nv) {
      x128 x = load128cs(inp + i * W), y;
#pragma unroll
      for (int k = 0; k < W; k++) y[k] = from_f32<floatX>(gelu_f(to_f32(x[k])));
      store128(out + i * W, y);
    }
    const size_t t = nv * W + i;
    if (i < W && t < n) out[t] = from_f32<floatX>(gelu_f(to_f32(inp[t])));
  } else if (i < n) {
    out[i] = from_f32<floatX>(gelu_f(to_f32(inp[i])));
  }
}

__global__ void gelu_backward_kernel(floatX* dinp, const floatX* inp, const floatX* dout, size_t n,
                                     bool vec) {
  map2_elementwise(dinp, inp, dout, n, vec,
                   [](floatX x, floatX d) { return gelu_grad_f(to_f32(x)) * to_f32(d); });
}

}  // namespace

void gelu_forward(floatX* out, const floatX* inp, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  const bool vec = aligned16(out) && aligned16(inp);
  const size_t threads = vec ? std::max(n / x128::size, (size_t)x128::size) : n;
  gelu_forward_kernel<<<ceil_div(threads, (size_t)256), 256, 0, stream>>>(out, inp, n, vec);
  CUDA_CHECK_LAUNCH();
}

void gelu_backward(floatX* dinp, const floatX* inp, const floatX* dout, size_t n,
                   cudaStream_t stream) {
  if (n == 0) return;
  const bool vec = aligned16(dinp) && aligned16(inp) && aligned16(dout);
  const size_t threads = vec ? std::max(n / x128::size, (size_t)x128::size) : n;
  gelu_backward_kernel<<<ceil_div(threads, (size_t)256), 256, 0, stream>>>(dinp, inp, dout, n,
                                                                           vec);
  CUDA_CHECK_LAUNCH();
}
