// adamw.cu — see adamw.cuh.
#include "kernels/adamw.cuh"

#include <cmath>

namespace {

__global__ void adamw_kernel(float* params, floatX* params_x, const float* grads, float* m,
                             float* v, size_t n, float lr, float beta1, float beta2, float eps,
                             float wd, float grad_scale, float bc1, float bc2) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float g = grads[i] * grad_scale;
  const float mi = beta1 * m[i] + (1.0f - beta1) * g;
  const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
  const float p = params[i];
  const float pn = p - lr * ((mi / bc1) / (sqrtf(vi / bc2) + eps) + wd * p);
  m[i] = mi;
  v[i] = vi;
  params[i] = pn;
  if (params_x) params_x[i] = from_f32<floatX>(pn);
}

__global__ void copy_float_to_floatX_kernel(floatX* out, const float* in, size_t n) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = from_f32<floatX>(in[i]);
}

}  // namespace

void adamw_update(float* params, floatX* params_x, const float* grads, float* m, float* v,
                  size_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                  float grad_scale, int t, cudaStream_t stream) {
  CHECK(t >= 1, "adamw: step t=%d must count from 1", t);
  if (n == 0) return;
  const float bc1 = (float)(1.0 - std::pow((double)beta1, t));
  const float bc2 = (float)(1.0 - std::pow((double)beta2, t));
  adamw_kernel<<<ceil_div(n, (size_t)256), 256, 0, stream>>>(
      params, params_x, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, grad_scale, bc1, bc2);
  CUDA_CHECK_LAUNCH();
}

void copy_float_to_floatX(floatX* out, const float* in, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  copy_float_to_floatX_kernel<<<ceil_div(n, (size_t)256), 256, 0, stream>>>(out, in, n);
  CUDA_CHECK_LAUNCH();
}
