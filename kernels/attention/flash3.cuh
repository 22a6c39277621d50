// flash3.cuh — the "flash3" GPU attention backend: the FlashAttention-3 schedule's forward on
// sm_90a (warp-specialised TMA + wgmma, flash3.cu) and flash's wgmma backward (flash_bwd.cu).
// Saves only LSE (B, NH, T) fp32, like flash. Tiles: flash3_tiles.h; spec: backends.cpp.
#pragma once
#include <memory>

#include "kernels/attention/attention.cuh"

std::unique_ptr<AttentionBackend> make_flash3_attention();

// The forward kernel behind the backend, bf16, causal, scale 1/sqrt(HS), HS 64 or 128.
namespace flash3 {
// out (B, T, NH, HS), lse (B, NH, T) fp32, qkv (B, T, NH + 2*NKV, HS); scratch of at least
// kFwdScratchBytes (its first int is the work-tile counter).
void forward_bf16(__nv_bfloat16* out, float* lse, void* scratch, const __nv_bfloat16* qkv,
                  const AttnShape& s, cudaStream_t stream);
}  // namespace flash3
