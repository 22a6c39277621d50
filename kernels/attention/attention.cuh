// attention.cuh — the GPU attention interface and registry. What each backend is (name, limits,
// saved and scratch bytes, cost, determinism) lives in its CUDA-free spec (backends.h); a GPU
// backend is that spec plus its forward and backward kernels, so the host code that sizes
// memory or checks options without a GPU and the GPU code read the same facts.
// All read Q, K, V in place from the packed qkv buffer (B, T, NH + 2*NKV, HS) and write out
// (B, T, NH, HS). Scale 1/sqrt(HS); causal, or the mask given (mask.h: documents, a sliding
// window), which a backend's spec says whether it runs (attention_unsupported_reason). Layout
// and maths: attention_ref.h.
#pragma once
#include <memory>
#include <string>

#include "kernels/attention/backends.h"
#include "kernels/attention/mask.h"
#include "kernels/cuda_common.cuh"

struct AttnForwardArgs {
  floatX* out;        // (B, T, NH, HS)
  void* saved;        // saved_bytes(): naive P (B, NH, T, T) floatX; LSE backends (B, NH, T) fp32
  void* scratch;      // scratch_bytes()
  const floatX* qkv;  // (B, T, NH + 2*NKV, HS)
  AttnShape shape;
  AttnMask mask;  // {} = causal; doc_start a DEVICE pointer (B, T)
};
struct AttnBackwardArgs {
  floatX* dqkv;        // (B, T, NH + 2*NKV, HS) overwritten
  void* scratch;       // scratch_bytes()
  const floatX* dout;  // (B, T, NH, HS)
  const floatX* qkv;   // (B, T, NH + 2*NKV, HS)
  const floatX* out;   // (B, T, NH, HS)
  const void* saved;   // as written by forward
  AttnShape shape;
  // --deterministic: the backends with a deterministic mode (spec().deterministic_mode) sum dQ
  // in a fixed order, so the whole backward is bitwise reproducible; the others already are.
  bool deterministic = false;
  AttnMask mask;  // the forward's
};

// ---- one attention problem (bf16), for the ring of context parallelism (ring_attention.cuh) ----
// Q rows against K/V rows, each from its own buffer with its own strides (in elements), so a
// ring step can pair this rank's queries (or one chunk of them) with a K/V block that came from
// another rank. flash's forward_bf16/backward_bf16 are the special case "Q, K, V all in qkv".
// Row t of a query head h of batch b lives at q + b*q_bs + t*q_ld + h*HS; row s of kv head g at
// k + b*kv_bs + s*kv_ld + g*HS (v likewise).
// A problem is its core (AttnFwdCore, AttnBwdCore: the tensors, shape and causal flag, what the
// causal kernels take as their parameter) and its mask (AttnProblemMask, which the masked
// kernels take as a parameter of its own): so the mask leaves the causal kernels untouched.

// The mask of a problem (mask.h). Causal ({}): the core's `causal` decides. Otherwise it replaces
// `causal`: key s is visible to query t iff lo(q_pos0 + t) <= k_pos0 + s <= q_pos0 + t, lo read
// at GLOBAL positions from mask.doc_start + b*mask_T (a device pointer, (B, mask_T)) and
// mask.window; a query row may then see none of the problem's keys (its O_blk = 0,
// LSE_blk = -inf). The whole-sequence call has q_pos0 = k_pos0 = 0, mask_T = T.
struct AttnProblemMask {
  AttnMask mask;
  size_t mask_T;
  int q_pos0, k_pos0;
};
struct AttnFwdCore {
  const __nv_bfloat16* q;
  const __nv_bfloat16* k;
  const __nv_bfloat16* v;
  size_t q_ld, q_bs, kv_ld, kv_bs;
  int B, Tq, Tk, NH, NKV, HS;
  // true: key s is visible to query t iff s <= t (Tq == Tk, same origin: the diagonal pair);
  // false: every key < Tk is visible (a pair whose keys all precede its queries).
  bool causal;
  float* lse;  // (B, NH, lse_T) fp32: row t of (b, h) at lse[(b*NH + h)*lse_T + t]
  size_t lse_T;
  // Output, exactly one of: `out`, bf16 O; or `o_run`, the ring's running fp32 O, which with
  // `lse` is overwritten (merge = false) or merged into exactly (merge = true):
  //   LSE' = log(e^LSE + e^LSE_blk),  O' = e^(LSE - LSE') O + e^(LSE_blk - LSE') O_blk.
  __nv_bfloat16* out;
  float* o_run;
  size_t o_ld, o_bs;  // row t, head h of batch b at out/o_run + b*o_bs + t*o_ld + h*HS
  bool merge;
};
struct AttnFwdProblem : AttnFwdCore, AttnProblemMask {};
// The backward of one problem, recomputing from the FINAL LSE and D = rowsum(dO o O) of these
// queries (ring: after all steps merged). dQ is ADDED to dq_accum (fp32, the backward's layout:
// row t of (b, h) at ((b*NH + h)*dq_T + dq_row0 + t)*HS, 8-float segments swizzled by that
// row's index % 8); ring_backward_begin()/ring_backward_end() zero it and convert it.
struct AttnBwdCore {
  const __nv_bfloat16* q;
  const __nv_bfloat16* k;
  const __nv_bfloat16* v;
  const __nv_bfloat16* dout;  // like q, with do_ld, do_bs
  size_t q_ld, q_bs, kv_ld, kv_bs, do_ld, do_bs;
  const float* lse;  // of row 0 of these queries; (b, h) rows lse_T apart (D likewise)
  const float* D;
  size_t lse_T;
  float* dq_accum;
  size_t dq_T;
  int dq_row0;
  int B, Tq, Tk, NH, NKV, HS;
  bool causal;  // as AttnFwdCore
  // dK (times scale) and dV of kv head g, key s at dk + b*dkv_bs + s*dkv_ld + g*HS: bf16
  // overwritten (dk, dv), or fp32 added to (dk_acc, dv_acc: the ring's travelling accumulator).
  __nv_bfloat16* dk;
  __nv_bfloat16* dv;
  float* dk_acc;
  float* dv_acc;
  size_t dkv_ld, dkv_bs;
  // flash3, GQA: a backward block per (batch, query head) and K/V tile rather than per kv head.
  // The G query heads of a kv head sum their dK, dV in turn (head kvh G + g once dkv_turn[(b NKV
  // + kvh) ceil(Tk / Bc) + j] = g, zeroed) in dk_acc, dv_acc (B, Tk, 2, NKV, HS) fp32 (dv_acc =
  // dk_acc + NKV HS); the last one writes the sum into dk, dv.
  bool query_head_blocks;
  int* dkv_turn;
};
struct AttnBwdProblem : AttnBwdCore, AttnProblemMask {};
class AttentionBackend {
 public:
  explicit AttentionBackend(const AttnBackendSpec& spec) : spec_(spec) {}
  virtual ~AttentionBackend() = default;
  const AttnBackendSpec& spec() const { return spec_; }
  const char* name() const { return spec_.name; }
  // "" when fine; this build's floatX decides for the bf16-only backends, the spec for masks.
  std::string unsupported_reason(const AttnShape& s, const MaskSpec& mask = {}) const {
    return attention_unsupported_reason(spec_, s, sizeof(floatX), mask);
  }
  size_t saved_bytes(const AttnShape& s) const { return spec_.saved_bytes(s, sizeof(floatX)); }
  size_t scratch_bytes(const AttnShape& s) const { return spec_.scratch_bytes(s, sizeof(floatX)); }
  // dQ bit-identical on every run, given AttnBackwardArgs::deterministic.
  bool dq_bitwise(bool deterministic) const {
    return spec_.dq_bitwise || (deterministic && spec_.deterministic_mode);
  }
  virtual void forward(const AttnForwardArgs&, cudaStream_t) const = 0;
  virtual void backward(const AttnBackwardArgs&, cudaStream_t) const = 0;

  // Context parallelism (ring_attention.cuh) runs a backend one ring pair at a time. The
  // backends that save only the LSE offer it (flash, flash3: flash's kernels on problems);
  // the others keep these defaults, and the ring refuses them by name.
  virtual bool supports_ring() const { return false; }
  virtual void ring_forward(const AttnFwdProblem&, cudaStream_t) const { no_ring(); }
  // D = rowsum(dO o O) and the dQ accumulator = 0 over the local shape s; scratch_bytes(s).
  virtual void ring_backward_begin(void* scratch, const floatX* dout, const floatX* out,
                                   const AttnShape& s, cudaStream_t) const { no_ring(); }
  virtual void ring_backward(const AttnBwdProblem&, cudaStream_t) const { no_ring(); }
  // dQ from the accumulator into dqkv's query heads.
  virtual void ring_backward_end(floatX* dqkv, void* scratch, const AttnShape& s,
                                 cudaStream_t) const { no_ring(); }
  // The accumulator of ring_backward_begin inside the scratch (AttnBwdProblem::dq_accum, D).
  virtual float* ring_dq_accum(void* scratch, const AttnShape& s) const { return nullptr; }
  virtual float* ring_D(void* scratch, const AttnShape& s) const { return nullptr; }

 protected:
  void no_ring() const {
    THROW_ERROR("attention '%s' cannot run context parallel (--cp > 1): use --attn flash or "
                "flash3", spec_.name);
  }
  // Throws "attention '<name>': <reason>" when the shape or the mask is unsupported.
  void check(const AttnShape& s, const AttnMask& mask) const {
    const std::string why = unsupported_reason(s, mask.spec());
    CHECK(why.empty(), "attention '%s': %s", spec_.name, why.c_str());
  }

 private:
  const AttnBackendSpec& spec_;
};

// The bf16 views of the arguments, for the backends whose kernels are bf16 only (flash1, flash,
// flash3); lse is their saved state (B, NH, T) fp32.
struct Bf16ForwardArgs {
  __nv_bfloat16* out;
  float* lse;
  void* scratch;
  const __nv_bfloat16* qkv;
  AttnShape shape;
  AttnMask mask;
};
struct Bf16BackwardArgs {
  __nv_bfloat16* dqkv;
  void* scratch;
  const __nv_bfloat16* dout;
  const __nv_bfloat16* qkv;
  const __nv_bfloat16* out;
  const float* lse;
  AttnShape shape;
  bool deterministic;
  AttnMask mask;
};
// Such a backend: forward/backward check the shape (in the FP32 build, where floatX is fp32,
// the spec reports the backend unsupported, so check() throws before any bf16 view is used) and
// hand the bf16 views to its kernels.
class Bf16AttentionBackend : public AttentionBackend {
 public:
  using AttentionBackend::AttentionBackend;
  void forward(const AttnForwardArgs& a, cudaStream_t st) const final {
    check(a.shape, a.mask);
    forward_bf16({reinterpret_cast<__nv_bfloat16*>(a.out), static_cast<float*>(a.saved), a.scratch,
                  reinterpret_cast<const __nv_bfloat16*>(a.qkv), a.shape, a.mask},
                 st);
  }
  void backward(const AttnBackwardArgs& a, cudaStream_t st) const final {
    check(a.shape, a.mask);
    backward_bf16({reinterpret_cast<__nv_bfloat16*>(a.dqkv), a.scratch,
                   reinterpret_cast<const __nv_bfloat16*>(a.dout),
                   reinterpret_cast<const __nv_bfloat16*>(a.qkv),
                   reinterpret_cast<const __nv_bfloat16*>(a.out), static_cast<const float*>(a.saved),
                   a.shape, a.deterministic, a.mask},
                  st);
  }

 protected:
  virtual void forward_bf16(const Bf16ForwardArgs& a, cudaStream_t st) const = 0;
  virtual void backward_bf16(const Bf16BackwardArgs& a, cudaStream_t st) const = 0;
};

// The backend named `name` (attention_names() in backends.h lists them). Unknown name: throws
// flashgpt::Error naming --attn and listing the names.
std::unique_ptr<AttentionBackend> make_attention(const std::string& name);
