// adamw — AdamW step with decoupled weight decay (Loshchilov & Hutter), bias-corrected:
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p -= lr * ( (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps) + wd * p )
// grad_scale multiplies g first (global-norm clipping folds in here).
// As in llm.c and nanoGPT, decay applies to 2-D matrices only (wte, wpe, qkvw, attprojw,
// fcw, fcprojw); the model passes weight_decay = 0 for biases and LayerNorm parameters.
// CPU reference (element type `real`, arithmetic in double; hyperparameters stay float in both
// instantiations), instantiated for float and double in adamw.cpp. CUDA version: adamw.cuh.
#pragma once
#include <cmath>
#include <cstddef>

#ifdef __CUDACC__
#define ADAMW_HOST_DEVICE __host__ __device__
#else
#define ADAMW_HOST_DEVICE
#endif

// Gradient clipping, one definition for the CPU model and the GPU kernel (which computes it on
// the device from the norm the GPU summed, so the host never waits between the norm and the
// update). The norm from its square: sqrt in double, rounded to float. The scale applied to
// the gradients: min(1, clip / norm), float; clip <= 0 turns clipping off. A non-finite norm
// skips the update altogether (both models leave parameters and moments as they were).
ADAMW_HOST_DEVICE inline float grad_norm_from_squared(double norm_squared) {
  return (float)sqrt(norm_squared);
}
ADAMW_HOST_DEVICE inline float clip_scale(float norm, float clip) {
  return (clip > 0.0f && norm > clip) ? clip / norm : 1.0f;
}
template <typename real>
void adamw_update_ref(real* params,       // (n) fp32 master weights
                      const real* grads,  // (n)
                      real* m,            // (n)
                      real* v,            // (n)
                      size_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                      float grad_scale, int t /* step, from 1 */);
