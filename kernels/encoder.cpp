// encoder.cpp — CPU reference for the token + position embedding (see encoder.h):
//   forward  out[b,t,:] = wte[inp[b,t],:] + wpe[t,:]
//   backward dwte[inp[b,t],:] += dout[b,t,:], dwpe[t,:] += dout[b,t,:]
// wpe == nullptr: out = wte[inp] (copied exactly); dwpe == nullptr: only dwte.
// The backward adds straight into dwte/dwpe in `real`, row by row in (b, t) order: a double
// buffer the size of wte (Vp x C) would cost more than the rounding it saves, and the order is
// fixed, so the result is deterministic.
#include "kernels/encoder.h"

#include <cstddef>

template <typename real>
void encoder_forward_ref(real* out, const int* inp, const real* wte, const real* wpe, int B, int T,
                         int C) {
  for (int b = 0; b < B; b++) {
    for (int t = 0; t < T; t++) {
      size_t bt = (size_t)b * T + t;
      real* o = out + bt * C;
      const real* we = wte + (size_t)inp[bt] * C;
      if (wpe == nullptr) {
        for (int c = 0; c < C; c++) o[c] = we[c];
        continue;
      }
      const real* pe = wpe + (size_t)t * C;
      for (int c = 0; c < C; c++) o[c] = (real)((double)we[c] + (double)pe[c]);
    }
  }
}

template <typename real>
void encoder_backward_ref(real* dwte, real* dwpe, const real* dout, const int* inp, int B, int T,
                          int C) {
  for (int b = 0; b < B; b++) {
    for (int t = 0; t < T; t++) {
      size_t bt = (size_t)b * T + t;
      const real* d = dout + bt * C;
      real* dwe = dwte + (size_t)inp[bt] * C;
      for (int c = 0; c < C; c++) dwe[c] = (real)((double)dwe[c] + (double)d[c]);
      if (dwpe == nullptr) continue;
      real* dpe = dwpe + (size_t)t * C;
      for (int c = 0; c < C; c++) dpe[c] = (real)((double)dpe[c] + (double)d[c]);
    }
  }
}

template void encoder_forward_ref<float>(float*, const int*, const float*, const float*, int, int,
                                         int);
template void encoder_forward_ref<double>(double*, const int*, const double*, const double*, int,
                                          int, int);
template void encoder_backward_ref<float>(float*, float*, const float*, const int*, int, int, int);
template void encoder_backward_ref<double>(double*, double*, const double*, const int*, int, int,
                                           int);
