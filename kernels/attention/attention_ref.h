// attention_ref — masked multi-head attention on the CPU, in the forms the GPU runs.
// These are the oracles for every GPU attention kernel.
//
// Layout (shared with the GPU backends):
//   qkv (B, T, NH + 2*NKV, HS): per token, NH query heads, then NKV key heads, then NKV value
//       heads. With NKV == NH this is PyTorch/llm.c's (B, T, 3, NH, HS). Query head h uses
//       key/value head h / (NH / NKV) (grouped-query attention; NKV = 1 is multi-query).
//   out (B, T, NH, HS) = (B, T, C): ready for the output projection.
//   scale = 1/sqrt(HS), causal (query t sees keys 0..t) or the mask given (mask.h).
//
// naive: S = scale Q K^T, mask, P = softmax(S) stored (B, NH, T, T), O = P V.
//        backward: dV = P^T dO, dP = dO V^T, dS = P o (dP - rowsum(dP o P)), dQ = scale dS K,
//        dK = scale dS^T Q.
// flash: FlashAttention-2 exactly as the GPU kernel runs it: for each Q tile of Br rows,
//        loop over K/V tiles of Bc rows, online softmax (running max m_i, sum l_i, rescaled
//        accumulator), tiles the mask empties skipped (causal: those above the diagonal),
//        only the partial tiles masked (causal: the diagonal ones); saves LSE (B, NH, T) =
//        m_i + log(l_i). Backward: D = rowsum(dO o O), then per
//        (K/V tile, Q tile) recompute P_ij = exp(S_ij - LSE_i), dV_j += P_ij^T dO_i,
//        dP_ij = dO_i V_j^T, dS_ij = P_ij o (dP_ij - D_i), dQ_i += scale dS_ij K_j,
//        dK_j += scale dS_ij^T Q_i. Never allocates anything T x T.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "kernels/attention/backends.h"  // AttnShape
#include "kernels/attention/mask.h"

// The references are templates on the element type `real`, instantiated for float (the
// oracle the GPU kernels and the CPU model use) and double (finite-difference checks). All
// arithmetic inside runs in double whatever `real` is; results are rounded to `real` once.
// Bad shapes (a dim < 1, NH % NKV != 0), tile sizes (Br or Bc < 1) or masks (validate_mask)
// throw flashgpt::Error.
// mask (mask.h): which keys each query sees: the causal mask ({}, the default), the document
// mask, a sliding window. Query t sees keys lo(t)..t: a row's softmax runs over those only,
// and P (naive) is 0 outside them. The tiled loops take their ranges from mask.h's TileRange:
// EMPTY tiles are never loaded, only PARTIAL tiles are masked element by element.
// OpenMP: forward over (b, h) (naive) or (b, h, Q tile) (flash); backward over (b, kv head), so
// each thread owns the dK/dV of its kv head and the dQ of that head's query heads: no races, no
// atomics. Shapes too small to repay a fork/join run on one thread.
template <typename real>
void attention_naive_forward_ref(real* out,        // (B, T, NH, HS)
                                 real* P,          // (B, NH, T, T) saved probabilities
                                 const real* qkv,  // (B, T, NH + 2*NKV, HS)
                                 AttnShape s, const AttnMask& mask = {});
template <typename real>
void attention_naive_backward_ref(real* dqkv,       // (B, T, NH + 2*NKV, HS) overwritten
                                  const real* dout, // (B, T, NH, HS)
                                  const real* qkv,  // (B, T, NH + 2*NKV, HS)
                                  const real* P,    // (B, NH, T, T)
                                  AttnShape s, const AttnMask& mask = {});

// The tiled references run either loop order; both compute the same maths with the same
// double arithmetic per element, give the same outputs and save the same LSE, so either's LSE
// feeds either backward.
//   kFA2  FlashAttention-2 (the "flash" and "flash3" GPU backends): described above.
//   kFA1  FlashAttention-1's loop order (Dao et al. 2022, Algorithm 1; the GPU backend
//         "flash1", kernels/attention/flash1.cu, runs exactly this). Forward, per (b, h): OUTER
//         loop over K/V tiles j (Bc rows), INNER loop over the Q tiles i that tile j meets;
//         O_i (un-normalised), m_i and l_i live in per-head T-sized buffers (the GPU's fp32
//         scratch in device memory), re-read and re-written on every (j, i) pass; the pass of
//         the last K/V tile a Q tile meets writes O_i / l_i and LSE_i = m_i + log(l_i) instead.
//         Backward, per (b, kv head): for each K/V tile j (dK_j, dV_j accumulated over the
//         group's query heads and the Q tiles it meets), dQ_i read-modify-written in a
//         per-head buffer on every pass and written out on tile i's last pass. Working memory
//         O(T x HS) per thread (the accumulators), never T x T.
enum class FlashOrder { kFA2, kFA1 };

// Br, Bc: Q and K/V tile rows, any values >= 1 (T need not be a multiple; Br != Bc is fine).
// Working memory (kFA2) is per thread and tile-sized (Br x HS, Bc x HS, Bc); the backward adds
// a double dQ accumulator of (NH/NKV) x T x HS per thread, the CPU analogue of the GPU's fp32
// dQ accumulator. Nothing is T x T.
template <typename real>
void attention_flash_forward_ref(real* out,        // (B, T, NH, HS)
                                 real* lse,        // (B, NH, T) saved log-sum-exp
                                 const real* qkv,  // (B, T, NH + 2*NKV, HS)
                                 AttnShape s, int Br, int Bc, const AttnMask& mask = {},
                                 FlashOrder order = FlashOrder::kFA2);
template <typename real>
void attention_flash_backward_ref(real* dqkv,        // (B, T, NH + 2*NKV, HS) overwritten
                                  const real* dout,  // (B, T, NH, HS)
                                  const real* qkv,   // (B, T, NH + 2*NKV, HS)
                                  const real* out,   // (B, T, NH, HS)
                                  const real* lse,   // (B, NH, T)
                                  AttnShape s, int Br, int Bc, const AttnMask& mask = {},
                                  FlashOrder order = FlashOrder::kFA2);

// Tile sizes of the "flash" and "flash1" CpuAttention backends. 32 x 32 keeps the per-thread
// working set in double at HS = 64 near 72 KB forward and 128 KB backward, inside L2. On the
// 2-core CPU machine 16..64 measured within noise (GPT-2 small shape B=4 T=1024 NH=12: flash
// forward ~1-1.6 s, backward ~2-3.7 s, naive 2 s / 4 s, load average 7+ at the time).
constexpr int kCpuFlashBr = 32;
constexpr int kCpuFlashBc = 32;

// The CPU model talks to attention through this interface; `--attn` picks the backend. It is
// a template on `real` like the functions above, so the whole model can run in double for
// finite-difference checks. saved_floats() sizes the per-layer saved state: naive P,
// B*NH*T*T; flash and flash1 LSE, B*NH*T (both run with Br = kCpuFlashBr, Bc = kCpuFlashBc).
// backward() overwrites dqkv; naive ignores `out`. The mask of forward and backward must be
// the same.
template <typename real>
class CpuAttention {
 public:
  virtual ~CpuAttention() = default;
  virtual const char* name() const = 0;
  virtual size_t saved_floats(const AttnShape& s) const = 0;
  virtual void forward(real* out, real* saved, const real* qkv, const AttnShape& s,
                       const AttnMask& mask) const = 0;
  virtual void backward(real* dqkv, const real* dout, const real* qkv, const real* out,
                        const real* saved, const AttnShape& s, const AttnMask& mask) const = 0;
};
// Known names: "naive", "flash", "flash1". Unknown name: throws flashgpt::Error listing the
// names, "--attn 'foo' is unknown; use one of: naive, flash, flash1"; a GPU-only backend
// (backends.h, e.g. "scalar") says that it has no CPU version.
template <typename real = float>
std::unique_ptr<CpuAttention<real>> make_cpu_attention(const std::string& name);
std::vector<std::string> cpu_attention_names();
