// layernorm.cpp — CPU reference for LayerNorm over the last dim C (see layernorm.h).
// Forward, per row of x (C values), in double:
//   mean = sum(x) / C;  var = sum((x - mean)^2) / C   (two passes, biased variance as PyTorch)
//   rstd = 1 / sqrt(var + 1e-5);  xhat = (x - mean) * rstd;  y = xhat * weight + bias
//   saves mean and rstd (rounded to `real`) for the backward.
// Backward, per row, from the saved mean/rstd (as the GPU kernels do):
//   g = weight * dy;  dx += rstd * (g - mean(g) - xhat * mean(g * xhat))
//   dweight += sum over rows of dy * xhat;  dbias += sum over rows of dy
// dweight/dbias are summed over rows in double buffers and added once at the end.
#include "kernels/layernorm.h"

#include <cmath>
#include <cstddef>
#include <vector>

namespace {
constexpr double kLayerNormEps = 1e-5;
}

template <typename real>
void layernorm_forward_ref(real* out, real* mean, real* rstd, const real* inp, const real* weight,
                           const real* bias, int N, int C) {
#pragma omp parallel for if ((size_t)N * C >= (1u << 16))
  for (int i = 0; i < N; i++) {
    const real* x = inp + (size_t)i * C;
    double sum = 0.0;
    for (int c = 0; c < C; c++) sum += (double)x[c];
    double m = sum / C;
    double ss = 0.0;
    for (int c = 0; c < C; c++) {
      double d = (double)x[c] - m;
      ss += d * d;
    }
    double s = 1.0 / std::sqrt(ss / C + kLayerNormEps);
    real* y = out + (size_t)i * C;
    for (int c = 0; c < C; c++) {
      double xhat = ((double)x[c] - m) * s;
      y[c] = (real)(xhat * (double)weight[c] + (double)bias[c]);
    }
    mean[i] = (real)m;
    rstd[i] = (real)s;
  }
}

template <typename real>
void layernorm_backward_ref(real* dinp, real* dweight, real* dbias, const real* dout,
                            const real* inp, const real* weight, const real* mean, const real* rstd,
                            int N, int C) {
  std::vector<double> dw(C, 0.0), db(C, 0.0), xhat(C), g(C);
  for (int i = 0; i < N; i++) {
    const real* x = inp + (size_t)i * C;
    const real* dy = dout + (size_t)i * C;
    real* dx = dinp + (size_t)i * C;
    double m = (double)mean[i], s = (double)rstd[i];
    double g_mean = 0.0, gx_mean = 0.0;
    for (int c = 0; c < C; c++) {
      xhat[c] = ((double)x[c] - m) * s;
      g[c] = (double)weight[c] * (double)dy[c];
      g_mean += g[c];
      gx_mean += g[c] * xhat[c];
      dw[c] += (double)dy[c] * xhat[c];
      db[c] += (double)dy[c];
    }
    g_mean /= C;
    gx_mean /= C;
    for (int c = 0; c < C; c++)
      dx[c] = (real)((double)dx[c] + s * (g[c] - g_mean - xhat[c] * gx_mean));
  }
  for (int c = 0; c < C; c++) {
    dweight[c] = (real)((double)dweight[c] + dw[c]);
    dbias[c] = (real)((double)dbias[c] + db[c]);
  }
}

template void layernorm_forward_ref<float>(float*, float*, float*, const float*, const float*,
                                           const float*, int, int);
template void layernorm_forward_ref<double>(double*, double*, double*, const double*, const double*,
                                            const double*, int, int);
template void layernorm_backward_ref<float>(float*, float*, float*, const float*, const float*,
                                            const float*, const float*, const float*, int, int);
template void layernorm_backward_ref<double>(double*, double*, double*, const double*,
                                             const double*, const double*, const double*,
                                             const double*, int, int);
