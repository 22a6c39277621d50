// scale.cu — see scale.cuh.
#include "kernels/scale.cuh"

namespace {

__global__ void scale_add_kernel(float* y, const float* x, float a, size_t n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    y[i] = fmaf(a, x[i], y[i]);
}

__global__ void scale_kernel(floatX* x, float a, size_t n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    x[i] = from_f32<floatX>(a * to_f32(x[i]));
}

int blocks_for(size_t n) { return (int)std::min<size_t>(ceil_div(n, (size_t)256), 132 * 16); }

}  // namespace

void scale_add(float* y, const float* x, float a, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  scale_add_kernel<<<blocks_for(n), 256, 0, stream>>>(y, x, a, n);
  CUDA_CHECK_LAUNCH();
}

void scale_floatX(floatX* x, float a, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  scale_kernel<<<blocks_for(n), 256, 0, stream>>>(x, a, n);
  CUDA_CHECK_LAUNCH();
}
