// encoder — token + learned position embedding.
//   forward:  out[b,t,:] = wte[inp[b,t],:] + wpe[t,:]
//   backward: dwte[inp[b,t],:] += dout[b,t,:];  dwpe[t,:] += dout[b,t,:]
// CPU reference (fp32, the oracle). CUDA version: encoder.cuh, same names without _ref.
#pragma once
void encoder_forward_ref(float* out,        // (B, T, C)
                         const int* inp,    // (B, T) token ids < Vp
                         const float* wte,  // (Vp, C)
                         const float* wpe,  // (maxT, C)
                         int B, int T, int C);
void encoder_backward_ref(float* dwte,        // (Vp, C)   accumulates
                          float* dwpe,        // (maxT, C) accumulates
                          const float* dout,  // (B, T, C)
                          const int* inp,     // (B, T)
                          int B, int T, int C);
