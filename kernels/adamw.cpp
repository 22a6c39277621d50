// adamw.cpp — CPU reference for one AdamW step (see adamw.h), elementwise, in double:
//   g = grad * grad_scale
//   m = b1 m + (1-b1) g;   v = b2 v + (1-b2) g^2
//   p -= lr * ( (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps) + wd * p )
// The decay term uses p before this step's update. m, v, p are stored back as `real`.
#include "kernels/adamw.h"

#include <cmath>

#include "kernels/common.h"

template <typename real>
void adamw_update_ref(real* params, const real* grads, real* m, real* v, size_t n, float lr,
                      float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                      int t) {
  CHECK(t >= 1, "adamw: step t=%d must count from 1", t);
  const double b1 = beta1, b2 = beta2;
  const double bc1 = 1.0 - std::pow(b1, t), bc2 = 1.0 - std::pow(b2, t);
#pragma omp parallel for if (n >= (1u << 16))
  for (size_t i = 0; i < n; i++) {
    double g = (double)grads[i] * (double)grad_scale;
    double mi = b1 * (double)m[i] + (1.0 - b1) * g;
    double vi = b2 * (double)v[i] + (1.0 - b2) * g * g;
    double p = (double)params[i];
    double step = (mi / bc1) / (std::sqrt(vi / bc2) + (double)eps) + (double)weight_decay * p;
    m[i] = (real)mi;
    v[i] = (real)vi;
    params[i] = (real)(p - (double)lr * step);
  }
}

template void adamw_update_ref<float>(float*, const float*, float*, float*, size_t, float, float,
                                      float, float, float, float, int);
template void adamw_update_ref<double>(double*, const double*, double*, double*, size_t, float,
                                       float, float, float, float, float, int);
