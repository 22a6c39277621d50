// adamw.cu — see adamw.cuh.
#include "kernels/adamw.cuh"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace {

struct AdamWArgs {
  float lr, beta1, beta2, eps, wd, grad_scale, bc1, bc2;
};

__device__ __forceinline__ float adamw_one(float p, float g, float& m, float& v, const AdamWArgs& a) {
  g *= a.grad_scale;
  m = a.beta1 * m + (1.0f - a.beta1) * g;
  v = a.beta2 * v + (1.0f - a.beta2) * g * g;
  return p - a.lr * ((m / a.bc1) / (sqrtf(v / a.bc2) + a.eps) + a.wd * p);
}

// VEC: 4 elements a thread by 128-bit loads and stores (params, grads, m, v 16-byte aligned,
// params_x 8-byte aligned); the n % 4 tail by the first threads, one element each.
template <bool VEC>
__global__ void adamw_kernel(float* params, floatX* params_x, const float* grads, float* m,
                             float* v, size_t n, AdamWArgs a) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if constexpr (VEC) {
    const size_t n4 = n / 4;
    if (i < n4) {
      float4 p = reinterpret_cast<const float4*>(params)[i];
      const float4 g = __ldcs(reinterpret_cast<const float4*>(grads) + i);
      float4 mi = reinterpret_cast<const float4*>(m)[i], vi = reinterpret_cast<const float4*>(v)[i];
      p.x = adamw_one(p.x, g.x, mi.x, vi.x, a);
      p.y = adamw_one(p.y, g.y, mi.y, vi.y, a);
      p.z = adamw_one(p.z, g.z, mi.z, vi.z, a);
      p.w = adamw_one(p.w, g.w, mi.w, vi.w, a);
      reinterpret_cast<float4*>(m)[i] = mi;
      reinterpret_cast<float4*>(v)[i] = vi;
      reinterpret_cast<float4*>(params)[i] = p;
      if (params_x) {
        floatX px[4] = {from_f32<floatX>(p.x), from_f32<floatX>(p.y), from_f32<floatX>(p.z),
                        from_f32<floatX>(p.w)};
        if constexpr (sizeof(floatX) == 2)
          reinterpret_cast<uint2*>(params_x)[i] = *reinterpret_cast<const uint2*>(px);
        else
          reinterpret_cast<float4*>(params_x)[i] = *reinterpret_cast<const float4*>(px);
      }
    }
    const size_t t = n4 * 4 + i;
    if (i < 4 && t < n) {
      const float pn = adamw_one(params[t], grads[t], m[t], v[t], a);
      params[t] = pn;
      if (params_x) params_x[t] = from_f32<floatX>(pn);
    }
  } else if (i < n) {
    const float pn = adamw_one(params[i], grads[i], m[i], v[i], a);
    params[i] = pn;
    if (params_x) params_x[i] = from_f32<floatX>(pn);
  }
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
  const AdamWArgs a{lr, beta1, beta2, eps, weight_decay, grad_scale,
                    (float)(1.0 - std::pow((double)beta1, t)),
                    (float)(1.0 - std::pow((double)beta2, t))};
  const bool vec = aligned16(params) && aligned16(grads) && aligned16(m) && aligned16(v) &&
                   (params_x == nullptr || (uintptr_t)params_x % (4 * sizeof(floatX)) == 0);
  if (vec)
    adamw_kernel<true><<<ceil_div(std::max(n / 4, (size_t)4), (size_t)256), 256, 0, stream>>>(
        params, params_x, grads, m, v, n, a);
  else
    adamw_kernel<false><<<ceil_div(n, (size_t)256), 256, 0, stream>>>(params, params_x, grads, m,
                                                                     v, n, a);
  CUDA_CHECK_LAUNCH();
}

void copy_float_to_floatX(floatX* out, const float* in, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  copy_float_to_floatX_kernel<<<ceil_div(n, (size_t)256), 256, 0, stream>>>(out, in, n);
  CUDA_CHECK_LAUNCH();
}
