// flash_tiles — the tile sizes and the backward scratch layout of the "flash" kernels
// (FlashAttention-2 schedule), by head size. flash_fwd.cu and flash_bwd*.cuh build their
// compile-time traits from these; the backend's spec (backends.cpp) computes its cost and
// scratch from the same numbers, and flash3 (whose backward is this one) reuses the backward's.
// Why each size: the tuning notes beside the traits (flash_fwd.cu FwdTile, flash_bwd_wgmma.cuh
// BwdTileWG). Host and device code; no CUDA headers.
#pragma once
#include <cstddef>

#include "kernels/attention/backends.h"  // AttnShape

struct FlashTiles {
  int fwd_Br, fwd_Bc;  // forward: Q tile rows, K/V tile rows (one block per Q tile)
  int bwd_Br, bwd_Bc;  // backward: Q tile rows, K/V tile rows (one block per K/V tile)
  // Causal skipping granularity of the backward: a (query rows x keys) piece whose queries all
  // precede its keys is skipped: the whole Q tile x one warpgroup's 64 keys.
  int bwd_skip_rows, bwd_skip_keys;
};

// HS 64 and 128 (the kernels' head sizes); other head sizes get HS 64's tiles, and the spec
// reports them unsupported.
constexpr FlashTiles flash_tiles(int HS) {
  return HS == 128 ? FlashTiles{128, 32, 64, 128, 64, 64} : FlashTiles{128, 64, 128, 128, 128, 64};
}

// The backward's scratch, byte offsets into one buffer (flash_bwd.cu):
//   dq_accum (B, NH, T, HS) fp32 | D (B, NH, T) fp32 | sem (B, NH, ceil(T / bwd_Br)) int, the
//   semaphores of the deterministic dQ order (--deterministic).
struct FlashBwdScratch {
  size_t dq_accum, D, sem, bytes;
};
inline FlashBwdScratch flash_bwd_scratch(const AttnShape& s) {
  const size_t rows = (size_t)s.B * s.NH * s.T;
  const int Br = flash_tiles(s.HS).bwd_Br;
  FlashBwdScratch o;
  o.dq_accum = 0;
  o.D = rows * s.HS * sizeof(float);
  o.sem = o.D + rows * sizeof(float);
  o.bytes = o.sem + (size_t)s.B * s.NH * ((s.T + Br - 1) / Br) * sizeof(int);
  return o;
}
