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
// All bf16 regardless of floatX; shapes as in attention.cuh, causal or the mask given (mask.h,
// doc_start on the device), scale 1/sqrt(HS).
namespace flash {
// out (B, T, NH, HS), lse (B, NH, T) fp32, qkv (B, T, NH + 2*NKV, HS).
void forward_bf16(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, const AttnShape& s,
                  const AttnMask& mask, cudaStream_t stream);
// dqkv (B, T, NH + 2*NKV, HS) overwritten; scratch of flash_bwd_scratch(s).bytes
// (flash_tiles.h; contents on entry ignored). deterministic: dQ summed in a fixed order
// (bitwise reproducible, 11-15% slower; flash_bwd_wgmma.cuh).
void backward_bf16(__nv_bfloat16* dqkv, void* scratch, const __nv_bfloat16* dout,
                   const __nv_bfloat16* qkv, const __nv_bfloat16* out, const float* lse,
                   const AttnShape& s, bool deterministic, const AttnMask& mask,
                   cudaStream_t stream);

// One attention problem (attention.cuh AttnFwdProblem / AttnBwdProblem): the ring's pairs.
using FwdProblem = AttnFwdProblem;
using BwdProblem = AttnBwdProblem;
using FwdCore = AttnFwdCore;  // what the kernels take (the mask comes apart: problem_mask.cuh)
using BwdCore = AttnBwdCore;
// The part of the whole-sequence problem that the forward and the backward share: Q, K, V read
// in place from qkv (B, T, NH + 2*NKV, HS), the shape, causal or the mask, LSE rows T apart.
template <class Problem>
inline void set_whole_sequence_qkv(Problem& p, const __nv_bfloat16* qkv, const AttnShape& s,
                                   const AttnMask& mask) {
  const size_t ld = (size_t)(s.NH + 2 * s.NKV) * s.HS;
  p.q = qkv;
  p.k = qkv + (size_t)s.NH * s.HS;
  p.v = qkv + (size_t)(s.NH + s.NKV) * s.HS;
  p.q_ld = p.kv_ld = ld;
  p.q_bs = p.kv_bs = (size_t)s.T * ld;
  p.B = s.B;
  p.Tq = p.Tk = s.T;
  p.NH = s.NH;
  p.NKV = s.NKV;
  p.HS = s.HS;
  p.causal = true;
  p.lse_T = s.T;
  p.mask = mask;
  p.mask_T = s.T;
  p.q_pos0 = p.k_pos0 = 0;
}
// A problem with a mask: its rows and keys lie inside the mask's sequences (mask_T positions).
template <class Problem>
inline void check_problem_mask(const Problem& p) {
  CHECK(p.q_pos0 >= 0 && p.k_pos0 >= 0 && (size_t)p.q_pos0 + p.Tq <= p.mask_T &&
            (size_t)p.k_pos0 + p.Tk <= p.mask_T && p.mask.window >= 0,
        "internal: attention problem: rows %d + %d or keys %d + %d outside the mask's %zu "
        "positions (window %d)", p.q_pos0, p.Tq, p.k_pos0, p.Tk, p.mask_T, p.mask.window);
}
void forward_problem(const FwdProblem& p, cudaStream_t stream);
// forward_bf16's problem: the whole sequence of qkv into bf16 out and lse (also flash3's).
FwdProblem whole_sequence_forward_problem(__nv_bfloat16* out, float* lse,
                                          const __nv_bfloat16* qkv, const AttnShape& s,
                                          const AttnMask& mask);

// D = rowsum(dO o O) and dq_accum = 0 over (B, T) local rows of out/dout (B, T, NH, HS);
// scratch as backward_bf16's; zero_semaphores: also the semaphores (the fixed dQ order's, or
// flash3's dQ tickets); zero_dq_accum false: leave dq_accum to a kernel whose first add to each
// tile stores (flash3's).
void backward_begin(void* scratch, const __nv_bfloat16* dout, const __nv_bfloat16* out,
                    const AttnShape& s, cudaStream_t stream, bool zero_semaphores = false,
                    bool zero_dq_accum = true);
// backward_bf16's problem: the whole sequence of qkv, dO, LSE and the scratch's D and
// dq_accum, dK and dV into dqkv. dq_semaphores: the fixed order's semaphores in the scratch.
BwdProblem whole_sequence_problem(__nv_bfloat16* dqkv, void* scratch, const __nv_bfloat16* dout,
                                  const __nv_bfloat16* qkv, const float* lse, const AttnShape& s,
                                  const AttnMask& mask);
int* dq_semaphores(void* scratch, const AttnShape& s);
// --deterministic with a mask: the fixed dQ order's semaphores (zeroed by backward_begin) set
// to the first K/V tile that meets each Q tile (flash_bwd.cu).
void fixed_order_start(int* dq_sem, const AttnMask& mask, const AttnShape& s, cudaStream_t stream);
void backward_problem(const BwdProblem& p, cudaStream_t stream);  // kArrival dQ order
// dQ = scale dq_accum -> bf16 into dqkv's query heads (B, T, NH + 2*NKV, HS).
void backward_end(__nv_bfloat16* dqkv, void* scratch, const AttnShape& s, cudaStream_t stream);

}  // namespace flash

// The ring hooks (attention.cuh) of the backends whose backward scratch is flash's and whose saved
// state is the LSE alone: flash and flash3 derive from this. A ring pair runs flash's
// forward_problem and backward_problem; flash3 overrides both with its own kernels.
class FlashFamilyBackend : public Bf16AttentionBackend {
 public:
  using Bf16AttentionBackend::Bf16AttentionBackend;
  bool supports_ring() const override { return sizeof(floatX) == 2; }
#if !defined(ENABLE_FP32)
  void ring_forward(const AttnFwdProblem& p, cudaStream_t st) const override {
    flash::forward_problem(p, st);
  }
  void ring_backward_begin(void* scratch, const floatX* dout, const floatX* out,
                           const AttnShape& s, cudaStream_t st) const override {
    flash::backward_begin(scratch, dout, out, s, st);
  }
  void ring_backward(const AttnBwdProblem& p, cudaStream_t st) const override {
    flash::backward_problem(p, st);
  }
  void ring_backward_end(floatX* dqkv, void* scratch, const AttnShape& s,
                         cudaStream_t st) const override {
    flash::backward_end(dqkv, scratch, s, st);
  }
  float* ring_dq_accum(void* scratch, const AttnShape& s) const override {
    return reinterpret_cast<float*>(static_cast<char*>(scratch) + flash_bwd_scratch(s).dq_accum);
  }
  float* ring_D(void* scratch, const AttnShape& s) const override {
    return reinterpret_cast<float*>(static_cast<char*>(scratch) + flash_bwd_scratch(s).D);
  }
#endif
};

