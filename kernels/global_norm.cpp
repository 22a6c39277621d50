// global_norm.cpp — CPU reference for the squared L2 norm of a gradient vector, sum_i g[i]^2,
// accumulated in double (see global_norm.h). Serial on purpose: one fixed summation order for a
// given build, whatever the thread count, so clipping (and resume) stays bit-reproducible.
#include "kernels/global_norm.h"

template <typename real>
double global_norm_squared_ref(const real* g, size_t n) {
  double sum = 0.0;
#pragma omp simd reduction(+ : sum)
  for (size_t i = 0; i < n; i++) {
    double x = (double)g[i];
    sum += x * x;
  }
  return sum;
}

template double global_norm_squared_ref<float>(const float*, size_t);
template double global_norm_squared_ref<double>(const double*, size_t);
