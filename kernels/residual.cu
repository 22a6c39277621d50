// residual.cu — see residual.cuh.
#include "kernels/residual.cuh"

namespace {

__global__ void residual_forward_kernel(floatX* out, const floatX* a, const floatX* b, size_t n,
                                        bool vec) {
  map2_elementwise(out, a, b, n, vec, [](floatX x, floatX y) { return to_f32(x) + to_f32(y); });
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
