// flash3.cuh — the "flash3" GPU attention backend: the FlashAttention-3 schedule on sm_90a
// (warp-specialised TMA + wgmma forward, wgmma backward with a deterministic dQ). Saves only
// LSE (B, NH, T) fp32, like flash. Sizes, limits and costs: flash3_tiles.h (CUDA-free).
// Forward and backend class: flash3.cu; backward: flash3_bwd.cu.
#pragma once
#include <memory>

#include "kernels/attention/attention.cuh"

std::unique_ptr<AttentionBackend> make_flash3_attention();

// Kernel entry points behind the backend, bf16, causal, scale 1/sqrt(HS), HS 64 or 128.
namespace flash3 {
// out (B, T, NH, HS), lse (B, NH, T) fp32, qkv (B, T, NH + 2*NKV, HS); scratch of
// scratch_bytes(s) (flash3_tiles.h: the forward uses one int of it, the work-tile counter).
void forward_bf16(__nv_bfloat16* out, float* lse, void* scratch, const __nv_bfloat16* qkv,
                  const AttnShape& s, cudaStream_t stream);
// dqkv (B, T, NH + 2*NKV, HS) overwritten; scratch of scratch_bytes(s) (flash3_tiles.h),
// contents on entry ignored.
void backward_bf16(__nv_bfloat16* dqkv, void* scratch, const __nv_bfloat16* dout,
                   const __nv_bfloat16* qkv, const __nv_bfloat16* out, const float* lse,
                   const AttnShape& s, cudaStream_t stream);
// True unless a measurement switch (FLASHGPT_FLASH3_BWD=order, flash3_bwd.cu) picked the
// non-deterministic dQ order.
bool backward_deterministic();
}  // namespace flash3
