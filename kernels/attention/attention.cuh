// attention.cuh — the GPU attention interface. Backends: "naive" (materialises and saves
// P (B, NH, T, T) in floatX), "flash" (our FlashAttention-2 kernels; saves LSE (B, NH, T)) and
// "flash1" (FlashAttention-1's loop order, for comparison: flash1.cu). All read Q, K, V in place from the packed qkv buffer (B, T, NH + 2*NKV, HS) and write
// out (B, T, NH, HS). Causal, scale 1/sqrt(HS). Layout and maths: attention_ref.h.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "kernels/attention/attention_ref.h"
#include "kernels/cuda_common.cuh"

struct AttnForwardArgs {
  floatX* out;        // (B, T, NH, HS)
  void* saved;        // saved_bytes(): naive P (B, NH, T, T) floatX; flash LSE (B, NH, T) fp32
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
};

class AttentionBackend {
 public:
  virtual ~AttentionBackend() = default;
  virtual const char* name() const = 0;
  virtual std::string unsupported_reason(const AttnShape&) const = 0;  // "" when fine
  virtual size_t saved_bytes(const AttnShape&) const = 0;
  virtual size_t scratch_bytes(const AttnShape&) const = 0;  // shared by forward and backward
  virtual void forward(const AttnForwardArgs&, cudaStream_t) const = 0;
  virtual void backward(const AttnBackwardArgs&, cudaStream_t) const = 0;
  // Whether dQ comes out bit-identical on every run. Forward, dK and dV always must; flash
  // sums dQ with fp32 reduce-adds in L2 in the order blocks arrive, so its last bits can vary
  // (and a --resume is then equal to an uninterrupted run only to rounding).
  virtual bool deterministic_dq() const { return true; }
};
// Unknown name: throws flashgpt::Error listing the known names.
std::unique_ptr<AttentionBackend> make_attention(const std::string& name);
std::vector<std::string> attention_names();
