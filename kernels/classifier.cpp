// classifier.cpp — CPU reference for the fused softmax + cross-entropy + dlogits (see
// classifier.h). Per row i, over the real vocabulary v < V only, in double:
//   mx = max_v logits[i,v];  lse = mx + log(sum_v exp(logits[i,v] - mx))
//   loss[i] = lse - logits[i, target]
//   dlogits[i,v] = dloss * (exp(logits[i,v] - lse) - [v == target])  for v < V;  0 for v >= V
// In place (dlogits == logits) is safe: the row's statistics and loss are taken before any of
// it is overwritten, and each dlogits element is written after its logit is read.
#include "kernels/classifier.h"

#include <cmath>
#include <cstddef>

#include "kernels/common.h"

template <typename real>
void classifier_ref(real* losses, real* dlogits, const real* logits, const int* targets,
                    float dloss, int N, int V, int Vp) {
  CHECK(0 < V && V <= Vp, "classifier: vocab size V=%d must be in [1, Vp=%d]", V, Vp);
  for (int i = 0; i < N; i++)
    CHECK(0 <= targets[i] && targets[i] < V,
          "classifier: target %d at position %d is outside the vocabulary [0, %d)", targets[i], i,
          V);
#pragma omp parallel for if ((size_t)N * Vp >= (1u << 16))
  for (int i = 0; i < N; i++) {
    const real* l = logits + (size_t)i * Vp;
    double mx = (double)l[0];
    for (int v = 1; v < V; v++) mx = std::fmax(mx, (double)l[v]);
    double sum = 0.0;
    for (int v = 0; v < V; v++) sum += std::exp((double)l[v] - mx);
    double lse = mx + std::log(sum);
    int target = targets[i];
    losses[i] = (real)(lse - (double)l[target]);
    if (dlogits == nullptr) continue;
    real* dl = dlogits + (size_t)i * Vp;
    for (int v = 0; v < V; v++) {
      double p = std::exp((double)l[v] - lse);
      dl[v] = (real)((double)dloss * (p - (v == target ? 1.0 : 0.0)));
    }
    for (int v = V; v < Vp; v++) dl[v] = (real)0;
  }
}

template void classifier_ref<float>(float*, float*, const float*, const int*, float, int, int, int);
template void classifier_ref<double>(double*, double*, const double*, const int*, float, int, int,
                                     int);
