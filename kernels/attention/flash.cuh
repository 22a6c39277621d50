// flash.cuh — the "flash" GPU attention backend: our own FlashAttention-2 kernels (tensor cores:
// mma.sync bf16 in the forward and the HS 64 backward, wgmma warpgroup MMAs in the HS 128
// backward; online softmax, recomputation backward). Saves only LSE (B, NH, T) fp32.
// Forward: kernels/attention/flash_fwd.cu; backward: flash_bwd.cu; backend class: flash.cu.
#pragma once
#include <memory>

#include "kernels/attention/attention.cuh"

std::unique_ptr<AttentionBackend> make_flash_attention();

// Kernel entry points behind the backend (flash.cu), also called directly by tests/bench.
// All bf16 regardless of floatX; shapes as in attention.cuh, causal, scale 1/sqrt(HS).
namespace flash {
// out (B, T, NH, HS), lse (B, NH, T) fp32, qkv (B, T, NH + 2*NKV, HS).
void forward_bf16(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, const AttnShape& s,
                  cudaStream_t stream);
// dqkv (B, T, NH + 2*NKV, HS) overwritten; dq_accum (B, NH, T, HS) fp32 and D (B, NH, T) fp32
// are scratch (contents on entry ignored).
void backward_bf16(__nv_bfloat16* dqkv, float* dq_accum, float* D, const __nv_bfloat16* dout,
                   const __nv_bfloat16* qkv, const __nv_bfloat16* out, const float* lse,
                   const AttnShape& s, cudaStream_t stream);
}  // namespace flash
