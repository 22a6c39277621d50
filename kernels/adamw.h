// adamw — AdamW step with decoupled weight decay (Loshchilov & Hutter), bias-corrected:
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p -= lr * ( (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps) + wd * p )
// grad_scale multiplies g first (global-norm clipping folds in here).
// As in llm.c and nanoGPT, decay applies to 2-D matrices only (wte, wpe, qkvw, attprojw,
// fcw, fcprojw); the model passes weight_decay = 0 for biases and LayerNorm parameters.
// CPU reference (element type `real`, arithmetic in double; hyperparameters stay float in both
// instantiations), instantiated for float and double in adamw.cpp. CUDA version: adamw.cuh.
#pragma once
#include <cstddef>
template <typename real>
void adamw_update_ref(real* params,       // (n) fp32 master weights
                      const real* grads,  // (n)
                      real* m,            // (n)
                      real* v,            // (n)
                      size_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                      float grad_scale, int t /* step, from 1 */);
