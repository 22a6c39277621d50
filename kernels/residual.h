// residual — out = inp1 + inp2. Its backward is the identity into both inputs, done by the
// model (dinp1 += dout, dinp2 += dout), so only the forward is an op.
// CPU reference (element type `real`), instantiated for float and double in residual.cpp.
#pragma once
#include <cstddef>
template <typename real>
void residual_forward_ref(real* out,         // (n) may be inp1 or inp2 (in place)
                          const real* inp1,  // (n)
                          const real* inp2,  // (n)
                          size_t n);
