// matmul.cpp — CPU reference for the linear layer (see matmul.h):
//   forward   out[n,o]     = bias[o] + sum_c inp[n,c] * weight[o,c]
//   backward  dinp[n,c]    = sum_o dout[n,o] * weight[o,c]          (overwritten)
//             dweight[o,c] += sum_n dout[n,o] * inp[n,c]            (accumulated)
//             dbias[o]     += sum_n dout[n,o]                       (accumulated)
// Every sum is taken in double and rounded to `real` once, when the result is stored.
//
// Speed (the CPU trainer runs on these): every inner loop runs over a contiguous row, so it
// vectorises, and rows are processed in small blocks so one load feeds several FMAs:
//   forward   a kRows x kCols tile of dot products (kRows rows of inp against kCols rows of
//             weight), reduced along C with `omp simd`;
//   dinp      kRows rows of dinp accumulated together in double buffers: for each o, one
//             row of weight is loaded once and added, scaled, into all kRows buffers;
//   dweight   the same with kRows rows of dweight and one row of inp per n.
// OpenMP splits the forward and dinp over rows of N and dweight/dbias over rows of OC, so no
// two threads write the same element, and each output is summed in the same order whatever
// the thread count (the results do not depend on OMP_NUM_THREADS).
// Tuning (Xeon, AVX2 build, fp32, N=1024 C=128 OC=512, one thread): the 4x2 tile takes the
// forward from 13.1 ms (one dot product per output) to 9.0 ms; 4-row blocks take the backward
// from 23.7 to 18.1 ms. Slicing weight to fit L2 (for the vocab projection) gave nothing
// measurable at C=768 OC=8192 and slowed dinp, so weight is read whole per row block.
#include "kernels/matmul.h"

#include <algorithm>
#include <cstddef>
#include <vector>

namespace {
constexpr int kRows = 4;  // register tile: rows of inp (forward), rows of the output (backward)
constexpr int kCols = 2;  // register tile: rows of weight (forward)
// 4 x 2 tile: 8 double accumulators plus 6 loaded values fit the 16 AVX2 registers. The tile
// and row-block loops below are written out for these sizes.
static_assert(kRows == 4 && kCols == 2, "dot_tile and scaled_row_sums are unrolled for 4 x 2");
// Below this many multiply-adds (N*C*OC) one thread does it: waking the team costs more.
constexpr size_t kParallelMinWork = 1u << 16;

// out[n, o] for n in [n0, n0 + kRows), o in [o0, o0 + kCols): all of the tile in registers.
template <typename real>
inline void dot_tile(real* out, const real* inp, const real* weight, const real* bias, int n0,
                     int o0, int C, int OC) {
  const real* x0 = inp + (size_t)(n0 + 0) * C;
  const real* x1 = inp + (size_t)(n0 + 1) * C;
  const real* x2 = inp + (size_t)(n0 + 2) * C;
  const real* x3 = inp + (size_t)(n0 + 3) * C;
  const real* w0 = weight + (size_t)(o0 + 0) * C;
  const real* w1 = weight + (size_t)(o0 + 1) * C;
  double s00 = 0, s01 = 0, s10 = 0, s11 = 0, s20 = 0, s21 = 0, s30 = 0, s31 = 0;
#pragma omp simd reduction(+ : s00, s01, s10, s11, s20, s21, s30, s31)
  for (int c = 0; c < C; c++) {
    double a0 = x0[c], a1 = x1[c], a2 = x2[c], a3 = x3[c];
    double b0 = w0[c], b1 = w1[c];
    s00 += a0 * b0;
    s01 += a0 * b1;
    s10 += a1 * b0;
    s11 += a1 * b1;
    s20 += a2 * b0;
    s21 += a2 * b1;
    s30 += a3 * b0;
    s31 += a3 * b1;
  }
  double bias0 = bias ? (double)bias[o0] : 0.0, bias1 = bias ? (double)bias[o0 + 1] : 0.0;
  out[(size_t)(n0 + 0) * OC + o0] = (real)(bias0 + s00);
  out[(size_t)(n0 + 0) * OC + o0 + 1] = (real)(bias1 + s01);
  out[(size_t)(n0 + 1) * OC + o0] = (real)(bias0 + s10);
  out[(size_t)(n0 + 1) * OC + o0 + 1] = (real)(bias1 + s11);
  out[(size_t)(n0 + 2) * OC + o0] = (real)(bias0 + s20);
  out[(size_t)(n0 + 2) * OC + o0 + 1] = (real)(bias1 + s21);
  out[(size_t)(n0 + 3) * OC + o0] = (real)(bias0 + s30);
  out[(size_t)(n0 + 3) * OC + o0 + 1] = (real)(bias1 + s31);
}

// out[n, o], one element: the edges the tile does not cover.
template <typename real>
inline void dot_one(real* out, const real* inp, const real* weight, const real* bias, int n, int o,
                    int C, int OC) {
  const real* x = inp + (size_t)n * C;
  const real* w = weight + (size_t)o * C;
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int c = 0; c < C; c++) s += (double)x[c] * (double)w[c];
  out[(size_t)n * OC + o] = (real)((bias ? (double)bias[o] : 0.0) + s);
}

// acc[r][:] += sum over k of a[r][k] * rows[k][:], for r < nr (<= kRows) and k < K, in
// increasing k, where a[r][k] = a_base[r * a_row_stride + k * a_k_stride], rows[k] =
// rows_base + k * C and acc[r] = acc + r * C. It is the dinp and the dweight loop.
template <typename real>
inline void scaled_row_sums(double* acc, int nr, const real* a_base, size_t a_row_stride,
                            size_t a_k_stride, const real* rows_base, int K, int C) {
  double* acc0 = acc;
  double* acc1 = acc + (size_t)C;
  double* acc2 = acc + (size_t)2 * C;
  double* acc3 = acc + (size_t)3 * C;
  for (int k = 0; k < K; k++) {
    const real* row = rows_base + (size_t)k * C;
    const real* a = a_base + (size_t)k * a_k_stride;
    if (nr == kRows) {
      double a0 = a[0], a1 = a[a_row_stride], a2 = a[2 * a_row_stride], a3 = a[3 * a_row_stride];
#pragma omp simd
      for (int c = 0; c < C; c++) {
        double r = row[c];
        acc0[c] += a0 * r;
        acc1[c] += a1 * r;
        acc2[c] += a2 * r;
        acc3[c] += a3 * r;
      }
    } else {
      for (int i = 0; i < nr; i++) {
        double ai = a[i * a_row_stride];
        double* acci = acc + (size_t)i * C;
#pragma omp simd
        for (int c = 0; c < C; c++) acci[c] += ai * (double)row[c];
      }
    }
  }
}
}  // namespace

template <typename real>
void matmul_forward_ref(real* out, const real* inp, const real* weight, const real* bias, int N,
                        int C, int OC) {
  const int n_blocks = (N + kRows - 1) / kRows;
  const bool parallel = (size_t)N * C * OC >= kParallelMinWork;
#pragma omp parallel for schedule(static) if (parallel)
  for (int nb = 0; nb < n_blocks; nb++) {
    const int n0 = nb * kRows, n1 = std::min(N, n0 + kRows);
    int o = 0;
    if (n1 - n0 == kRows)
      for (; o + kCols <= OC; o += kCols) dot_tile(out, inp, weight, bias, n0, o, C, OC);
    for (; o < OC; o++)
      for (int n = n0; n < n1; n++) dot_one(out, inp, weight, bias, n, o, C, OC);
  }
}

template <typename real>
void matmul_backward_ref(real* dinp, real* dweight, real* dbias, const real* dout, const real* inp,
                         const real* weight, int N, int C, int OC) {
  const bool parallel = (size_t)N * C * OC >= kParallelMinWork;
  // dinp[n, :] = sum_o dout[n, o] * weight[o, :], kRows rows of N per block.
  const int n_blocks = (N + kRows - 1) / kRows;
#pragma omp parallel if (parallel)
  {
    std::vector<double> acc((size_t)kRows * C);
#pragma omp for schedule(static)
    for (int nb = 0; nb < n_blocks; nb++) {
      const int n0 = nb * kRows, nr = std::min(kRows, N - n0);
      std::fill(acc.begin(), acc.end(), 0.0);
      scaled_row_sums(acc.data(), nr, dout + (size_t)n0 * OC, (size_t)OC, 1, weight, OC, C);
      for (int i = 0; i < nr; i++) {
        real* d = dinp + (size_t)(n0 + i) * C;
        const double* a = acc.data() + (size_t)i * C;
        for (int c = 0; c < C; c++) d[c] = (real)a[c];
      }
    }
  }
  // dweight[o, :] += sum_n dout[n, o] * inp[n, :] and dbias[o] += sum_n dout[n, o],
  // kRows rows of OC per block.
  const int o_blocks = (OC + kRows - 1) / kRows;
#pragma omp parallel if (parallel)
  {
    std::vector<double> acc((size_t)kRows * C);
#pragma omp for schedule(static)
    for (int ob = 0; ob < o_blocks; ob++) {
      const int o0 = ob * kRows, nr = std::min(kRows, OC - o0);
      std::fill(acc.begin(), acc.end(), 0.0);
      scaled_row_sums(acc.data(), nr, dout + o0, 1, (size_t)OC, inp, N, C);
      for (int i = 0; i < nr; i++) {
        real* dw = dweight + (size_t)(o0 + i) * C;
        const double* a = acc.data() + (size_t)i * C;
        for (int c = 0; c < C; c++) dw[c] = (real)((double)dw[c] + a[c]);
        if (dbias) {
          double s = 0;
          for (int n = 0; n < N; n++) s += (double)dout[(size_t)n * OC + o0 + i];
          dbias[o0 + i] = (real)((double)dbias[o0 + i] + s);
        }
      }
    }
  }
}

template void matmul_forward_ref<float>(float*, const float*, const float*, const float*, int, int,
                                        int);
template void matmul_forward_ref<double>(double*, const double*, const double*, const double*, int,
                                         int, int);
template void matmul_backward_ref<float>(float*, float*, float*, const float*, const float*,
                                         const float*, int, int, int);
template void matmul_backward_ref<double>(double*, double*, double*, const double*, const double*,
                                          const double*, int, int, int);
