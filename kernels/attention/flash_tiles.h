// flash_tiles — the tile sizes of the "flash" kernels (FlashAttention-2 schedule), by head size.
// flash_fwd.cu and flash_bwd*.cuh build their compile-time traits from these; the backend's
// spec (backends.cpp) computes its cost from the same numbers. Why each size: the tuning notes
// beside the traits (flash_fwd.cu FwdTile, flash_bwd_mma.cuh BwdTile, flash_bwd_wgmma.cuh
// BwdTileWG). Host and device code; no CUDA headers.
#pragma once

struct FlashTiles {
  int fwd_Br, fwd_Bc;  // forward: Q tile rows, K/V tile rows (one block per Q tile)
  int bwd_Br, bwd_Bc;  // backward: Q tile rows, K/V tile rows (one block per K/V tile)
  // Causal skipping granularity of the backward: a (query rows x keys) piece whose queries all
  // precede its keys is skipped. HS 64 (mma.sync): query chunks of 32 x one warp's 16 keys;
  // HS 128 (wgmma): the whole Q tile x one warpgroup's 64 keys.
  int bwd_skip_rows, bwd_skip_keys;
};

// HS 64 and 128 (the kernels' head sizes); other head sizes get HS 64's tiles, and the spec
// reports them unsupported.
constexpr FlashTiles flash_tiles(int HS) {
  return HS == 128 ? FlashTiles{128, 32, 64, 128, 64, 64} : FlashTiles{128, 64, 128, 128, 32, 16};
}
