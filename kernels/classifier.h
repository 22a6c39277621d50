// classifier — fused softmax + cross-entropy + dlogits over the (padded) vocabulary.
//   loss[i]      = logsumexp(logits[i, :V]) - logits[i, target[i]]
//   dlogits[i,v] = dloss * (softmax(logits[i, :V])[v] - [v == target[i]]),  0 for v >= V
// Padded columns V..Vp-1 are ignored in the softmax and get zero gradient.
// dloss is the gradient of the final scalar wrt each loss[i] (1 / (B*T*grad_accum_steps)).
// It stays float in both instantiations: a hyperparameter, not an element, so float and
// double callers alike can pass it without a deduction conflict.
// dlogits may alias logits (in place) or be nullptr (eval: losses only).
// A target outside [0, V) throws flashgpt::Error.
// CPU reference (element type `real`, softmax statistics in double), instantiated for float
// and double in classifier.cpp. CUDA version: classifier.cuh (vocab processed in chunks, no
// probs tensor).
#pragma once
template <typename real>
void classifier_ref(real* losses,        // (N)
                    real* dlogits,       // (N, Vp) or nullptr; may equal logits
                    const real* logits,  // (N, Vp)
                    const int* targets,  // (N) each < V
                    float dloss, int N, int V, int Vp);
