// gelu — tanh approximation, as GPT-2:
//   y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
// CPU reference (element type `real`, computed in double), instantiated for float and double
// in gelu.cpp. CUDA version: gelu.cuh.
#pragma once
#include <cstddef>
template <typename real>
void gelu_forward_ref(real* out,        // (n)
                      const real* inp,  // (n)
                      size_t n);
template <typename real>
void gelu_backward_ref(real* dinp,        // (n) overwritten
                       const real* inp,   // (n) the forward's input
                       const real* dout,  // (n)
                       size_t n);
