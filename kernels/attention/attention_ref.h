// attention_ref — causal multi-head attention on the CPU, in the two forms the GPU runs.
// These are the oracles for every GPU attention kernel.
//
// Layout (shared with the GPU backends):
//   qkv (B, T, NH + 2*NKV, HS): per token, NH query heads, then NKV key heads, then NKV value
//       heads. With NKV == NH this is PyTorch/llm.c's (B, T, 3, NH, HS). Query head h uses
//       key/value head h / (NH / NKV) (grouped-query attention; NKV = 1 is multi-query).
//   out (B, T, NH, HS) = (B, T, C): ready for the output projection.
//   scale = 1/sqrt(HS), causal (query t sees keys 0..t).
//
// naive: S = scale Q K^T, mask, P = softmax(S) stored (B, NH, T, T), O = P V.
//        backward: dV = P^T dO, dP = dO V^T, dS = P o (dP - rowsum(dP o P)), dQ = scale dS K,
//        dK = scale dS^T Q.
// flash: FlashAttention-2 exactly as the GPU kernel runs it: for each Q tile of Br rows,
//        loop over K/V tiles of Bc rows, online softmax (running max m_i, sum l_i, rescaled
//        accumulator), tiles fully above the diagonal skipped, only the diagonal tiles masked;
//        saves LSE (B, NH, T) = m_i + log(l_i). Backward: D = rowsum(dO o O), then per
//        (K/V tile, Q tile) recompute P_ij = exp(S_ij - LSE_i), dV_j += P_ij^T dO_i,
//        dP_ij = dO_i V_j^T, dS_ij = P_ij o (dP_ij - D_i), dQ_i += scale dS_ij K_j,
//        dK_j += scale dS_ij^T Q_i. Never allocates anything T x T.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

struct AttnShape {
  int B, T, NH, NKV, HS;  // NKV < NH: grouped-query attention; NH % NKV == 0
};

void attention_naive_forward_ref(float* out,        // (B, T, NH, HS)
                                 float* P,          // (B, NH, T, T) saved probabilities
                                 const float* qkv,  // (B, T, NH + 2*NKV, HS)
                                 AttnShape s);
void attention_naive_backward_ref(float* dqkv,       // (B, T, NH + 2*NKV, HS) overwritten
                                  const float* dout, // (B, T, NH, HS)
                                  const float* qkv,  // (B, T, NH + 2*NKV, HS)
                                  const float* P,    // (B, NH, T, T)
                                  AttnShape s);

void attention_flash_forward_ref(float* out,        // (B, T, NH, HS)
                                 float* lse,        // (B, NH, T) saved log-sum-exp
                                 const float* qkv,  // (B, T, NH + 2*NKV, HS)
                                 AttnShape s, int Br, int Bc);
void attention_flash_backward_ref(float* dqkv,        // (B, T, NH + 2*NKV, HS) overwritten
                                  const float* dout,  // (B, T, NH, HS)
                                  const float* qkv,   // (B, T, NH + 2*NKV, HS)
                                  const float* out,   // (B, T, NH, HS)
                                  const float* lse,   // (B, NH, T)
                                  AttnShape s, int Br, int Bc);

// The CPU model talks to attention through this interface; `--attn` picks the backend.
// saved_floats() sizes the per-layer saved state: naive B*NH*T*T, flash B*NH*T.
class CpuAttention {
 public:
  virtual ~CpuAttention() = default;
  virtual const char* name() const = 0;
  virtual size_t saved_floats(const AttnShape& s) const = 0;
  virtual void forward(float* out, float* saved, const float* qkv, const AttnShape& s) const = 0;
  virtual void backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* saved, const AttnShape& s) const = 0;
};
// Known names: "naive", "flash". Unknown name: throws flashgpt::Error listing the names.
std::unique_ptr<CpuAttention> make_cpu_attention(const std::string& name);
std::vector<std::string> cpu_attention_names();
