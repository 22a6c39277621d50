// global_norm — sum of squares of a gradient vector (double accumulation); the model adds the
// pieces and takes sqrt, then clips with scale = min(1, clip / (norm + 1e-6)).
// CPU reference. CUDA version: global_norm.cuh.
#pragma once
#include <cstddef>
double global_norm_squared_ref(const float* g, size_t n);
