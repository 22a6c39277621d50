// problem_mask.cuh — the mask (mask.h) as the tiled kernels (flash, flash3) see it on one
// attention problem (attention.cuh AttnFwdProblem / AttnBwdProblem: Tq query rows from global
// position q_pos0, Tk keys from k_pos0, the doc_start of sequence b), in the problem's local rows
// and keys:
//   row t (0 <= t < Tq) sees keys lo_key(t) .. hi_key(t),
//   lo_key(t) = lo(q_pos0 + t) - k_pos0,   hi_key(t) = min(q_pos0 + t - k_pos0, Tk - 1);
// the forward's K/V tiles of a row tile (mask.h kv_tiles_for_rows), and the backward's Q tiles of
// a K/V tile (q_tiles_for_keys), whose two binary searches over lo run on the 32 lanes of a warp
// (mask.h first_row_past_key_32way): at most 4 rounds of one load each up to T = 1M, where one
// thread needs 2 x 20 dependent loads (each an L2 round trip, at the start of every backward
// block).
// The masked kernels take the problem's AttnProblemMask as a parameter of its own after the
// causal kernels' parameters (KernelMask<MASKED>: an empty struct for MASKED = false), so that
// the causal kernels read every parameter at the offset they always did.
#pragma once
#include <climits>
#include <type_traits>

#include "kernels/attention/attention.cuh"
#include "kernels/attention/mask.h"

namespace flash {

struct NoProblemMask {};
template <bool MASKED>
using KernelMask = std::conditional_t<MASKED, AttnProblemMask, NoProblemMask>;

struct ProblemMask {
  SeqMask m;  // the sequence's mask, at global positions
  int q_pos0, k_pos0, Tq, Tk;

  // Sequence b of a problem of Tq rows and Tk keys.
  __device__ __forceinline__ ProblemMask(const AttnProblemMask& a, int b, int Tq_, int Tk_)
      : m(a.mask.seq(b, (int)a.mask_T)), q_pos0(a.q_pos0), k_pos0(a.k_pos0), Tq(Tq_), Tk(Tk_) {}

  // Row t's first key lo_key(t) (local key index); INT_MAX for a row outside the problem, which
  // sees none. Its last key is hi_key(t) = min(t + q_pos0 - k_pos0, Tk - 1).
  __device__ __forceinline__ int lo_key(int t) const {
    return t < 0 || t >= Tq ? INT_MAX : m.lo(q_pos0 + t) - k_pos0;
  }

  // Forward: the K/V tiles (Bc keys from local key 0) that local rows r0 .. r1 meet, the rows
  // outside the problem cut off (r0 < Tq, r1 >= 0). May be empty.
  __device__ __forceinline__ TileRange kv_tiles(int r0, int r1, int Bc) const {
    return kv_tiles_for_rows(m, q_pos0 + max(r0, 0), q_pos0 + min(r1, Tq - 1), k_pos0, Tk, Bc);
  }

  // Backward: the Q tiles (Br rows from local row 0) that local keys k0 .. k0 + Bc - 1 meet
  // (those past Tk cut off). May be empty. Every lane of the calling warp takes part.
  __device__ __forceinline__ TileRange q_tiles_warp(int k0, int Bc, int Br) const {
    const int key0 = k_pos0 + k0, key1 = k_pos0 + min(k0 + Bc, Tk) - 1;
    const int end = q_pos0 + Tq, from = max(key0, q_pos0);
    if (from >= end) return TileRange{0, 0, 0, 0};
    return q_tiles_from_searches(from, first_row_past_key_warp(end, from, key1),
                                 first_row_past_key_warp(end, from, key0), key1, q_pos0, Tq, Br);
  }

  // mask.h first_row_past_key by the warp's 32 lanes (first_row_past_key_32way): lane l
  // probes row a + l step of each round.
  __device__ __forceinline__ int first_row_past_key_warp(int end, int from, int key) const {
    const int lane = threadIdx.x & 31;
    return first_row_past_key_32way(end, from, [&](int a, int step, int b) -> uint32_t {
      const int probe = a + lane * step;
      return __ballot_sync(0xffffffffu, probe >= b || m.lo(probe) > key);
    });
  }
};

}  // namespace flash
