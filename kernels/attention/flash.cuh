// flash.cuh — the "flash" GPU attention backend: our own FlashAttention-2 kernels (tensor cores:
// mma.sync bf16 in the forward, wgmma warpgroup MMAs in the backward; online softmax,
// recomputation backward). Saves only LSE (B, NH, T) fp32.
// Forward: kernels/attention/flash_fwd.cu; backward: flash_bwd.cu; backend class: flash.cu.
#pragma once
#include <memory>

#include "kernels/attention/attention.cuh"
#include "kernels/attention/flash_tiles.h"

std::unique_ptr<AttentionBackend> make_flash_attention();

// Kernel entry points behind the backend (flash.cu), also called directly by tests/bench.
// All bf16 regardless of floatX; shapes as in attention.cuh, causal, scale 1/sqrt(HS).
namespace flash {
// out (B, T, NH, HS), lse (B, NH, T) fp32, qkv (B, T, NH + 2*NKV, HS).
void forward_bf16(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, const AttnShape& s,
                  cudaStream_t stream);
// dqkv (B, T, NH + 2*NKV, HS) overwritten; scratch of flash_bwd_scratch(s).bytes
// (flash_tiles.h; contents on entry ignored). deterministic: dQ summed in a fixed order
// (bitwise reproducible, 13-25% slower; flash_bwd_wgmma.cuh).
void backward_bf16(__nv_bfloat16* dqkv, void* scratch, const __nv_bfloat16* dout,
                   const __nv_bfloat16* qkv, const __nv_bfloat16* out, const float* lse,
                   const AttnShape& s, bool deterministic, cudaStream_t stream);
}  // namespace flash
