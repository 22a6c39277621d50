// gelu.cpp — CPU reference for GPT-2's tanh-approximated GELU and its derivative (see gelu.h):
//   u  = sqrt(2/pi) (x + 0.044715 x^3)
//   y  = 0.5 x (1 + tanh u)
//   dy/dx = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
// Evaluated in double, rounded once to `real`. The backward overwrites dinp.
#include "kernels/gelu.h"

#include <cmath>

namespace {
constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2/pi)
constexpr double kGeluCubic = 0.044715;
constexpr size_t kParallelMin = 1u << 14;  // below this, threads cost more than they save
}  // namespace

template <typename real>
void gelu_forward_ref(real* out, const real* inp, size_t n) {
#pragma omp parallel for if (n >= kParallelMin)
  for (size_t i = 0; i < n; i++) {
    double x = (double)inp[i];
    double u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
    out[i] = (real)(0.5 * x * (1.0 + std::tanh(u)));
  }
}

template <typename real>
void gelu_backward_ref(real* dinp, const real* inp, const real* dout, size_t n) {
#pragma omp parallel for if (n >= kParallelMin)
  for (size_t i = 0; i < n; i++) {
    double x = (double)inp[i];
    double u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
    double th = std::tanh(u);
    double du_dx = kSqrt2OverPi * (1.0 + 3.0 * kGeluCubic * x * x);
    double dy_dx = 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * du_dx;
    dinp[i] = (real)(dy_dx * (double)dout[i]);
  }
}

template void gelu_forward_ref<float>(float*, const float*, size_t);
template void gelu_forward_ref<double>(double*, const double*, size_t);
template void gelu_backward_ref<float>(float*, const float*, const float*, size_t);
template void gelu_backward_ref<double>(double*, const double*, const double*, size_t);
