// classifier — fused softmax + cross-entropy + dlogits over the (padded) vocabulary.
//   loss[i]      = logsumexp(logits[i, :V]) - logits[i, target[i]]
//   dlogits[i,v] = dloss * (softmax(logits[i, :V])[v] - [v == target[i]]),  0 for v >= V
// Padded columns V..Vp-1 are ignored in the softmax and get zero gradient.
// dloss is the gradient of the final scalar wrt each loss[i] (1 / (B*T*grad_accum_steps)).
// dlogits may alias logits (in place) or be nullptr (eval: losses only).
// CPU reference. CUDA version: classifier.cuh (vocab processed in chunks, no probs tensor).
#pragma once
void classifier_ref(float* losses,         // (N)
                    float* dlogits,        // (N, Vp) or nullptr
                    const float* logits,   // (N, Vp)
                    const int* targets,    // (N) each < V
                    float dloss, int N, int V, int Vp);
