// scale.cpp — CPU references, see scale.h.
#include "kernels/scale.h"

template <typename real>
void scale_add_ref(real* y, const real* x, float a, size_t n) {
#pragma omp parallel for if (n >= (1u << 16))
  for (size_t i = 0; i < n; i++) y[i] = (real)((double)y[i] + (double)a * (double)x[i]);
}

template <typename real>
void scale_ref(real* x, float a, size_t n) {
#pragma omp parallel for if (n >= (1u << 16))
  for (size_t i = 0; i < n; i++) x[i] = (real)((double)a * (double)x[i]);
}

template void scale_add_ref<float>(float*, const float*, float, size_t);
template void scale_add_ref<double>(double*, const double*, float, size_t);
template void scale_ref<float>(float*, float, size_t);
template void scale_ref<double>(double*, float, size_t);
