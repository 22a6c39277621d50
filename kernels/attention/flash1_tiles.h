// flash1_tiles — the tile size of the "flash1" kernels (FlashAttention-1 order, flash1.cu) and
// the padding of its fp32 scratch, shared by flash1.cu and the backend's spec (backends.cpp).
// Host and device code; no CUDA headers.
#pragma once
#include <cstddef>

constexpr int kFlash1Tile = 64;  // Br = Bc = 64 (4 warps of 16 rows; no tuning was done)

// T rounded up to the tile: the scratch rows, so that a ragged last tile needs no predication
// in device memory.
constexpr size_t flash1_padded_T(int T) {
  return ((size_t)T + kFlash1Tile - 1) / kFlash1Tile * kFlash1Tile;
}
