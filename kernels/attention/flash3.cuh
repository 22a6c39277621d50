// flash3.cuh — the "flash3" GPU attention backend: the FlashAttention-3 schedule on sm_90a,
// warp-specialised TMA + wgmma, forward (flash3.cu) and backward (flash3_bwd.cu).
// Saves only LSE (B, NH, T) fp32, like flash. Tiles: flash3_tiles.h; spec: backends.cpp.
#pragma once
#include <memory>

#include "kernels/attention/attention.cuh"
#include "kernels/attention/flash.cuh"  // BwdProblem, the backward's scratch

std::unique_ptr<AttentionBackend> make_flash3_attention();

// The kernels behind the backend, bf16, causal or the mask given (mask.h, doc_start on the
// device), scale 1/sqrt(HS), HS 64 or 128.
namespace flash3 {
// Every consumer (math) thread arrives on a stage's empty barrier, forward and backward, in a
// build for compute-sanitizer racecheck, else lane 0 of each consumer warp: racecheck models an
// mbarrier hand-off only for the threads that arrive (flash3_bwd.cu's release_stage says more).
// The environment's NVCCFLAGS, which the Makefile extends, in a build folder of its own (make
// does not rebuild for changed flags):
//   NVCCFLAGS="-O3 -g -lineinfo -DFLASHGPT_FLASH3_RACECHECK" make -j BUILD=build-racecheck
//     build-racecheck/test_gpu   (one command line; docs/testing.md, "Sanitizers", has it)
#ifdef FLASHGPT_FLASH3_RACECHECK
constexpr bool kEveryThreadReleases = true;
#else
constexpr bool kEveryThreadReleases = false;
#endif

// out (B, T, NH, HS), lse (B, NH, T) fp32, qkv (B, T, NH + 2*NKV, HS); scratch of at least
// kFwdScratchBytes (its first int is the work-tile counter).
void forward_bf16(__nv_bfloat16* out, float* lse, void* scratch, const __nv_bfloat16* qkv,
                  const AttnShape& s, const AttnMask& mask, cudaStream_t stream);
// One problem (a ring pair: attention.cuh AttnFwdProblem) into the ring's fp32 running O, its
// diagonal pair causal or a full pair; the same kernel as forward_bf16 (static tile order).
void forward_problem(const AttnFwdProblem& p, cudaStream_t stream);
// The backward's blocks with GQA (flash3_bwd.cu): one per kv head, or one per query head whose
// G blocks sum dK, dV in turn; kByRule: flash3_tiles.h kBwdQueryHeadBlocks picks (the backend).
// The tests run both on small shapes, where the rule picks kv heads.
enum class BwdHeads { kByRule, kKvHeads, kQueryHeads };
// The backward (flash3_bwd.cu): as flash::backward_bf16 (scratch: flash3_tiles.h
// bwd_scratch_bytes; the same arguments), on the warp-specialised schedule.
void backward_bf16(__nv_bfloat16* dqkv, void* scratch, const __nv_bfloat16* dout,
                   const __nv_bfloat16* qkv, const __nv_bfloat16* out, const float* lse,
                   const AttnShape& s, bool deterministic, const AttnMask& mask,
                   cudaStream_t stream, BwdHeads heads = BwdHeads::kByRule);
// One problem (a ring pair), dQ in arrival order: as flash::backward_problem.
void backward_problem(const flash::BwdProblem& p, cudaStream_t stream);
}  // namespace flash3
