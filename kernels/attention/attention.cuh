// attention.cuh — the GPU attention interface and registry. What each backend is (name, limits,
// saved and scratch bytes, cost, determinism) lives in its CUDA-free spec (backends.h); a GPU
// backend is that spec plus its forward and backward kernels, so the host code that sizes
// memory or checks options without a GPU and the GPU code read the same facts.
// All read Q, K, V in place from the packed qkv buffer (B, T, NH + 2*NKV, HS) and write out
// (B, T, NH, HS). Causal, scale 1/sqrt(HS). Layout and maths: attention_ref.h.
#pragma once
#include <memory>
#include <string>

#include "kernels/attention/backends.h"
#include "kernels/cuda_common.cuh"

struct AttnForwardArgs {
  floatX* out;        // (B, T, NH, HS)
  void* saved;        // saved_bytes(): naive P (B, NH, T, T) floatX; LSE backends (B, NH, T) fp32
  void* scratch;      // scratch_bytes()
  const floatX* qkv;  // (B, T, NH + 2*NKV, HS)
  AttnShape shape;
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
};

class AttentionBackend {
 public:
  explicit AttentionBackend(const AttnBackendSpec& spec) : spec_(spec) {}
  virtual ~AttentionBackend() = default;
  const AttnBackendSpec& spec() const { return spec_; }
  const char* name() const { return spec_.name; }
  // "" when fine; this build's floatX decides for the bf16-only backends.
  std::string unsupported_reason(const AttnShape& s) const {
    return attention_unsupported_reason(spec_, s, sizeof(floatX));
  }
  size_t saved_bytes(const AttnShape& s) const { return spec_.saved_bytes(s, sizeof(floatX)); }
  size_t scratch_bytes(const AttnShape& s) const { return spec_.scratch_bytes(s, sizeof(floatX)); }
  // dQ bit-identical on every run, given AttnBackwardArgs::deterministic.
  bool dq_bitwise(bool deterministic) const {
    return spec_.dq_bitwise || (deterministic && spec_.deterministic_mode);
  }
  virtual void forward(const AttnForwardArgs&, cudaStream_t) const = 0;
  virtual void backward(const AttnBackwardArgs&, cudaStream_t) const = 0;

 protected:
  // Throws "attention '<name>': <reason>" when the shape is unsupported.
  void check(const AttnShape& s) const {
    const std::string why = unsupported_reason(s);
    CHECK(why.empty(), "attention '%s': %s", spec_.name, why.c_str());
  }

 private:
  const AttnBackendSpec& spec_;
};

// The backend named `name` (attention_names() in backends.h lists them). Unknown name: throws
// flashgpt::Error naming --attn and listing the names.
std::unique_ptr<AttentionBackend> make_attention(const std::string& name);
