// global_norm — sum of squares of a gradient vector (double accumulation); the model adds the
// pieces and takes sqrt, then clips with scale = min(1, clip / (norm + 1e-6)).
// CPU reference (element type `real`), instantiated for float and double in global_norm.cpp.
// CUDA version: global_norm.cuh.
#pragma once
#include <cstddef>

// Scratch of the CUDA version (global_norm.cuh): one double partial per block of a fixed grid,
// 2 blocks of 512 threads per SM on a 132-SM H100 (fixed, so results do not depend on the GPU).
constexpr int kGlobalNormBlocks = 264;
inline size_t global_norm_scratch_bytes() { return kGlobalNormBlocks * sizeof(double); }
template <typename real>
double global_norm_squared_ref(const real* g, size_t n);  // g: (n)
