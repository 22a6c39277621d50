// residual.cpp — CPU reference for the residual add out = inp1 + inp2 (see residual.h).
// out may alias either input (in-place add into the residual stream).
#include "kernels/residual.h"

template <typename real>
void residual_forward_ref(real* out, const real* inp1, const real* inp2, size_t n) {
#pragma omp parallel for if (n >= (1u << 16))
  for (size_t i = 0; i < n; i++) out[i] = inp1[i] + inp2[i];
}

template void residual_forward_ref<float>(float*, const float*, const float*, size_t);
template void residual_forward_ref<double>(double*, const double*, const double*, size_t);
