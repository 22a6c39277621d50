// flash3_tiles.h — every fact of the "flash3" attention backend that the host needs, CUDA-free:
// tile sizes, limits, saved and scratch bytes, cost, determinism. The kernels (flash3.cu,
// flash3_bwd.cu) build their compile-time traits from these numbers (static_asserts there), so
// the memory plan, the cost model and the kernels cannot drift apart.
//
// flash3 = the FlashAttention-3 schedule on sm_90a (see flash3.cu for the algorithm):
//   forward:  a producer warp issues TMA loads of Q_i once per tile and of K_j, V_j into a ring of
//             kFwdStages(HS) shared-memory stages; 2 consumer warpgroups of 64 query rows each
//             (Br = 128) run S = Q K^T and O += P V on wgmma; persistent grid, longest tiles first.
//   backward: D = rowsum(dO o O); one block per (K/V tile of 128 keys, kv head, batch) on wgmma
//             (flash_bwd_wg.cuh); dQ summed in fp32 in a FIXED order (block j adds its part of
//             dQ_i after block j-1, ordered by a semaphore per Q tile): bitwise reproducible.
#pragma once
#include <cstddef>
#include <string>

#include "kernels/attention/attention_ref.h"  // AttnShape
#include "kernels/common.h"                   // strformat

namespace flash3 {

// ---- forward ----
constexpr int kFwdBr = 128;              // query rows per work tile: 2 consumer warpgroups x 64
constexpr int kFwdBc = 128;              // keys per K/V tile (= Br: one diagonal tile per row)
constexpr int kFwdThreads = 3 * 128;     // producer warpgroup + 2 consumer warpgroups
constexpr int kFwdStages(int HS) { return HS == 64 ? 4 : 2; }  // K/V ring depth (smem bound)
// The two consumer warpgroups take turns issuing their GEMMs (named barriers) when true.
constexpr bool kFwdPingPongDefault = true;
// Work tiles handed out by an atomic counter (in the scratch) when true; else block k takes
// tiles k, k + grid, ... of the longest-first order.
constexpr bool kFwdDynamicDefault = true;

// ---- backward (flash_bwd_wg.cuh traits BwdTileWG<HS, Br>) ----
constexpr int kBwdBc = 128;                                      // keys per block
constexpr int kBwdBr(int HS) { return HS == 64 ? 128 : 64; }     // queries per step
constexpr int kBwdSkipKeys = 64;  // causal skipping granularity: one warpgroup's keys

// dQ is summed in a fixed order (semaphores), so the whole backward is bitwise reproducible.
constexpr bool kDeterministic = true;

inline int bwd_q_tiles(const AttnShape& s) { return (s.T + kBwdBr(s.HS) - 1) / kBwdBr(s.HS); }

inline std::string unsupported_reason(const AttnShape& s) {
  if (s.B < 1 || s.T < 1 || s.NH < 1 || s.NKV < 1 || s.HS < 1)
    return flashgpt::strformat("bad shape B=%d T=%d NH=%d NKV=%d HS=%d", s.B, s.T, s.NH, s.NKV,
                               s.HS);
  if (s.NH % s.NKV != 0)
    return flashgpt::strformat("--kv-heads %d does not divide --heads %d", s.NKV, s.NH);
  if (s.HS != 64 && s.HS != 128)
    return flashgpt::strformat(
        "flash3 attention supports head size 64 or 128, not %d; use --attn naive", s.HS);
  if (s.T > (1 << 22)) return flashgpt::strformat("sequence length %d is over 4M", s.T);
  return "";
}

// saved: LSE (B, NH, T) fp32, natural log (the same as flash).
inline size_t saved_bytes(const AttnShape& s) { return (size_t)s.B * s.NH * s.T * sizeof(float); }

// scratch: backward: dQacc (B, NH, T, HS) fp32 | D (B, NH, T) fp32 | one int semaphore per
// (b, h, backward Q tile); forward: one int (the work-tile counter) at offset 0, which the
// backward then overwrites (the forward's scratch need not survive).
inline size_t scratch_fwd_counter_offset(const AttnShape&) { return 0; }
inline size_t scratch_dq_offset(const AttnShape&) { return 0; }
inline size_t scratch_D_offset(const AttnShape& s) {
  return (size_t)s.B * s.NH * s.T * s.HS * sizeof(float);
}
inline size_t scratch_sem_offset(const AttnShape& s) {
  return scratch_D_offset(s) + (size_t)s.B * s.NH * s.T * sizeof(float);
}
inline size_t scratch_bytes(const AttnShape& s) {
  return scratch_sem_offset(s) + (size_t)s.B * s.NH * bwd_q_tiles(s) * sizeof(int);
}

}  // namespace flash3
