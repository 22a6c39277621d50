// residual.cu — see residual.cuh.
#include "kernels/residual.cuh"

namespace {

__global__ void residual_forward_kernel(floatX* out, const floatX* a, const floatX* b, size_t n,
                                        bool vec) {
  constexpr int W = x128::size;
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (vec) {
    const size_t nv = n / W;
    if (i < nv) {
      x128 x = load128cs(a + i * W), y = load128cs(b + i * W), r;
#pragma unroll
      for (int k = 0; k < W; k++) r[k] = from_f32<floatX>(to_f32(x[k]) + to_f32(y[k]));
      store128(out + i * W, r);
    }
    const size_t t = nv * W + i;
    if (i < W && t < n) out[t] = from_f32<floatX>(to_f32(a[t]) + to_f32(b[t]));
  } else if (i < n) {
    out[i] = from_f32<floatX>(to_f32(a[i]) + to_f32(b[i]));
  }
}

}  // namespace

void residual_forward(floatX* out, const floatX* inp1, const floatX* inp2, size_t n,
                      cudaStream_t stream) {
  if (n == 0) return;
  const bool vec = aligned16(out) && aligned16(inp1) && aligned16(inp2);
  const size_t threads = vec ? std::max(n / x128::size, (size_t)x128::size) : n;
  residual_forward_kernel<<<ceil_div(threads, (size_t)256), 256, 0, stream>>>(out, inp1, inp2, n,
                                                                              vec);
  CUDA_CHECK_LAUNCH();
}
