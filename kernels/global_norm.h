// global_norm — sum of squares of a gradient vector (double accumulation); the model adds the
// pieces and takes sqrt, then clips with scale = min(1, clip / (norm + 1e-6)).
// CPU reference (element type `real`), instantiated for float and double in global_norm.cpp.
// CUDA version: global_norm.cuh.
#pragma once
#include <cstddef>
template <typename real>
double global_norm_squared_ref(const real* g, size_t n);  // g: (n)
