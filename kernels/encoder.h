// encoder — token + learned position embedding.
//   forward:  out[b,t,:] = wte[inp[b,t],:] + wpe[t,:]
//   backward: dwte[inp[b,t],:] += dout[b,t,:];  dwpe[t,:] += dout[b,t,:]
// wpe == nullptr (models without learned positions, e.g. RoPE): out = wte[inp] alone;
// dwpe == nullptr: the backward skips it.
// CPU reference (the oracle), a template on the element type `real`, instantiated for float
// and double in encoder.cpp. CUDA version: encoder.cuh, same names without _ref.
#pragma once
template <typename real>
void encoder_forward_ref(real* out,        // (B, T, C)
                         const int* inp,   // (B, T) token ids < Vp
                         const real* wte,  // (Vp, C)
                         const real* wpe,  // (maxT, C) or nullptr
                         int B, int T, int C);
template <typename real>
void encoder_backward_ref(real* dwte,        // (Vp, C)   accumulates
                          real* dwpe,        // (maxT, C) accumulates, or nullptr
                          const real* dout,  // (B, T, C)
                          const int* inp,    // (B, T)
                          int B, int T, int C);
