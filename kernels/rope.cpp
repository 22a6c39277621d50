// rope.cpp — CPU reference for rotary position embedding (see rope.h):
//   theta_i = theta^(-2i/HS), a = p * theta_i (double), for each q and k head of each token:
//   (x0, x1) = (x[i], x[i+HS/2]) -> (x0 cos a - x1 sin a, x0 sin a + x1 cos a)   forward
//                                 -> (x0 cos a + x1 sin a, -x0 sin a + x1 cos a)  backward
// Everything in double, one rounding to `real`. The table uses the same angle expression, so
// the table and the direct evaluation agree to the fp32 rounding of cos and sin.
#include "kernels/rope.h"

#include <cmath>
#include <cstddef>
#include <vector>

#include "kernels/common.h"

namespace {

constexpr size_t kParallelMin = 1u << 14;  // tokens x heads below this: one thread

void check_shape(int B, int T, int NH, int NKV, int HS, int pos0) {
  CHECK(B >= 0 && T >= 0 && NH >= 0 && NKV >= 0, "rope: bad shape B=%d T=%d NH=%d NKV=%d", B, T,
        NH, NKV);
  CHECK(HS > 0 && HS % 2 == 0, "rope: head size HS=%d must be even (pairs x[i], x[i+HS/2])", HS);
  CHECK(pos0 >= 0, "rope: pos0=%d must be >= 0", pos0);
}

// theta_i = theta^(-2i/HS) for i in [0, HS/2), in double.
std::vector<double> inv_freq(int HS, float theta) {
  std::vector<double> f(HS / 2);
  for (int i = 0; i < HS / 2; i++) f[i] = std::pow((double)theta, -2.0 * i / HS);
  return f;
}

// sign = +1: forward rotation by +a; sign = -1: the transpose (rotation by -a).
template <typename real>
void rope_apply(real* qkv, int B, int T, int NH, int NKV, int HS, int pos0, float theta,
                double sign) {
  check_shape(B, T, NH, NKV, HS, pos0);
  const int half = HS / 2, H3 = NH + 2 * NKV, NR = NH + NKV;  // NR: rotated heads per token
  const std::vector<double> f = inv_freq(HS, theta);
  const long long rows = (long long)B * T;
#pragma omp parallel for if ((size_t)rows * NR >= kParallelMin)
  for (long long bt = 0; bt < rows; bt++) {
    const double p = (double)(pos0 + (int)(bt % T));
    std::vector<double> c(half), s(half);
    for (int i = 0; i < half; i++) {
      const double a = p * f[i];
      c[i] = std::cos(a);
      s[i] = sign * std::sin(a);
    }
    for (int h = 0; h < NR; h++) {
      real* x = qkv + ((size_t)bt * H3 + h) * HS;
      for (int i = 0; i < half; i++) {
        const double x0 = (double)x[i], x1 = (double)x[i + half];
        x[i] = (real)(x0 * c[i] - x1 * s[i]);
        x[i + half] = (real)(x0 * s[i] + x1 * c[i]);
      }
    }
  }
}

}  // namespace

void rope_table_ref(float* cos_sin, int rows, int HS, float theta, int pos0) {
  CHECK(rows >= 0 && pos0 >= 0, "rope_table_ref: rows=%d, pos0=%d must be >= 0", rows, pos0);
  CHECK(HS > 0 && HS % 2 == 0, "rope: head size HS=%d must be even (pairs x[i], x[i+HS/2])", HS);
  const int half = HS / 2;
  const std::vector<double> f = inv_freq(HS, theta);
#pragma omp parallel for if ((size_t)rows * half >= kParallelMin)
  for (int p = 0; p < rows; p++)
    for (int i = 0; i < half; i++) {
      const double a = (double)(pos0 + p) * f[i];
      cos_sin[((size_t)p * half + i) * 2 + 0] = (float)std::cos(a);
      cos_sin[((size_t)p * half + i) * 2 + 1] = (float)std::sin(a);
    }
}

template <typename real>
void rope_forward_ref(real* qkv, int B, int T, int NH, int NKV, int HS, int pos0, float theta) {
  rope_apply(qkv, B, T, NH, NKV, HS, pos0, theta, 1.0);
}

template <typename real>
void rope_backward_ref(real* dqkv, int B, int T, int NH, int NKV, int HS, int pos0, float theta) {
  rope_apply(dqkv, B, T, NH, NKV, HS, pos0, theta, -1.0);
}

template void rope_forward_ref<float>(float*, int, int, int, int, int, int, float);
template void rope_forward_ref<double>(double*, int, int, int, int, int, int, float);
template void rope_backward_ref<float>(float*, int, int, int, int, int, int, float);
template void rope_backward_ref<double>(double*, int, int, int, int, int, int, float);
