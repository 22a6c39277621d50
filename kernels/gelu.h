// gelu — tanh approximation, as GPT-2:
//   y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
// CPU reference. CUDA version: gelu.cuh.
#pragma once
#include <cstddef>
void gelu_forward_ref(float* out, const float* inp, size_t n);                      // (n)
void gelu_backward_ref(float* dinp, const float* inp, const float* dout, size_t n);  // dinp overwritten
