// scale — the two elementwise scalings the chunked classifier needs (model/gpt_cuda.cu):
//   scale_add:  y += a * x      (fp32; the lm-head weight gradient, computed in the forward
//                                for d(mean loss), joins the gradients times the loss scale)
//   scale:      x  = a * x      (in place; the lnf input gradient likewise)
// CPU reference in double, rounded once. CUDA version: scale.cuh.
#pragma once
#include <cstddef>
template <typename real>
void scale_add_ref(real* y,        // (n) accumulates
                   const real* x,  // (n)
                   float a, size_t n);
template <typename real>
void scale_ref(real* x,  // (n) in place
               float a, size_t n);
