// ring_attention_ref — context-parallel attention on the CPU: N virtual ranks in one
// process, each holding its zigzag chunks (context_parallel.h) of the sequence, passing K/V
// blocks round a ring. The oracle of the GPU ring (and equal, to fp32 rounding, to full
// attention: attention_ref.h). Layout, chunks, ring schedule and pair kinds: context_parallel.h.
//
// Per rank r, local buffers (Tl = L.local_len(r) rows, global positions L.global_pos(r, .)):
//   qkv (B, Tl, NH + 2*NKV, HS), already RoPE-rotated at GLOBAL positions (cp_rope_*_ref);
//   out (B, Tl, NH, HS), lse (B, NH, Tl), dout like out, dqkv like qkv.
// The block in flight is the owner's K/V heads only: kv (B, Tl_owner, 2*NKV, HS) (per token
// NKV key heads then NKV value heads: the tail of the qkv row). Queries, O and dQ stay home.
//
// Forward, in the FlashAttention paper's notation, per rank r (all ranks run each step
// "at once"; the simulation loops over them):
//   O_r = 0, LSE_r = -inf;  KV_hold[r] = pack(K_r, V_r)
//   for s = 0 .. N-1:                                  (KV_hold[r] is rank (r - s) mod N's)
//     for each chunk pair (Q chunk i of r, K/V chunk j of the held block):
//       skipped (j > i): nothing.  full (j < i): no mask.  diagonal (j == i): causal mask
//       (a mask, mask.h: each key masked by lo(qp) <= kp <= qp at global positions; a pair it
//       empties in every sequence, cp_pair_live, is skipped too)
//       S_ij = scale Q_i K_j^T;  m = rowmax S_ij;  l = rowsum exp(S_ij - m)
//       O_blk = exp(S_ij - m) V_j / l;  LSE_blk = m + log l          (attention_block_forward_ref)
//       LSE_new = log(exp LSE_i + exp LSE_blk)                        (attention_merge_ref)
//       O_i = exp(LSE_i - LSE_new) O_i + exp(LSE_blk - LSE_new) O_blk;  LSE_i = LSE_new
//     s < N-1: send KV_hold[r] to rank r+1, receive rank r-1's          (ring step)
// Backward, per rank r, recomputing from the final LSE (nothing T x T is kept):
//   D_r = rowsum(dO_r o O_r);  dQ_r = 0;  dKV_r = 0;  KV_hold[r] = pack(K_r, V_r)
//   send KV_hold[r] to rank r+1, receive rank r-1's                     (the first K/V hop)
//   for s = 1 .. N-1, then s = 0 (the rank's own chunks, its own K/V, last):
//     dKV_blk = 0
//     for each non-skipped chunk pair (i, j) (attention_block_backward_ref):
//       P_ij = exp(scale Q_i K_j^T - LSE_i) (0 where masked);  dV_j += P_ij^T dO_i
//       dS_ij = P_ij o (dO_i V_j^T - D_i);  dQ_i += scale dS_ij K_j;  dK_j += scale dS_ij^T Q_i
//     s > 0: send dKV_blk to the block's owner src = (r - s) mod N, which adds it:
//            dKV_src += dKV_blk   (on the GPU while the next step runs)
//            s < N-1: send KV_hold[r] to rank r+1
//     s = 0: dKV_r += dKV_blk
//   dqkv_r = (dQ_r, dKV_r)
//
// Precision (mirrors the GPU's fp32 buffers): every product and sum inside a block runs in
// double; the partial O_blk and LSE_blk, the running O and LSE, D, and the dQ and dK/dV
// accumulators are stored as `real` (float: the GPU's fp32; double: finite differences and
// exactness checks), so the float version rounds about 2N times more than attention_ref does.
//
// Limits: any B, NH, HS >= 1, NH % NKV == 0, cp >= 1, T >= 2*cp (CpLayout). Tile sizes are not
// modelled (attention_ref.h does that); a block is one (chunk, chunk) pair. Serial, like the
// small-shape path of attention_ref: this is an oracle for CI-sized shapes.
//
// Test: make NO_CUDA=1 BUILD=build-cpu -j2 build-cpu/test_cpu &&
//       build-cpu/test_cpu --gtest_filter='ContextParallel*'
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/attention/attention_ref.h"
#include "model/context_parallel.h"

// What a simulated ring did, for the tests: which block every rank held at every step, how
// many unmasked (q, k) pairs it computed (per batch row and head), how many bytes it sent.
struct RingTrace {
  std::vector<std::vector<int>> held;     // [step][rank] owner of the K/V block held
  std::vector<std::vector<int>> dkv_sent_to;  // [step][rank] backward: where the step's dK/dV
                                              // contribution went (-1: kept, the own step 0)
  std::vector<int64_t> visible_pairs;     // [rank] unmasked (q, k) pairs computed, per head,
                                          // summed over the batch's sequences
  // [CpPairKind][rank] chunk pairs met of each kind; with a mask, a pair it empties counts as
  // skipped
  std::vector<int64_t> pairs_by_kind[3];
  std::vector<size_t> bytes_sent;         // [rank] with sizeof(real) per element
};

// One (Q chunk, K/V chunk) block: the partial attention of Q rows [q.local_begin, +q.len) of
// the local qkv against K/V rows [k.local_begin, +k.len) of the block in hand, masked by
// GLOBAL position (key kp = k.global_begin + c visible to query qp = q.global_begin + r iff
// lo(qp) <= kp <= qp; causal: lo = 0), so any offsets work: a full pair never masks, a
// diagonal pair masks, a row with no visible key gets O_blk = 0, LSE_blk = -inf. Writes only
// the q chunk's rows of o_blk and lse_blk. Tq = rows of qkv/o_blk/lse_blk, Tk = rows of kv;
// s.T: the whole sequence's length, at which mask.doc_start (B, s.T) is read.
template <typename real>
void attention_block_forward_ref(real* o_blk,       // (B, Tq, NH, HS) partial O, normalised
                                 real* lse_blk,     // (B, NH, Tq) partial LSE
                                 const real* qkv,   // (B, Tq, NH + 2*NKV, HS) (Q heads read)
                                 const real* kv,    // (B, Tk, 2*NKV, HS)
                                 AttnShape s, int Tq, int Tk, CpChunk q, CpChunk k,
                                 const AttnMask& mask = {});

// Merges a partial (o_blk, lse_blk) into the running (o, lse) over the rows of chunk q, exactly:
//   LSE' = log(e^LSE + e^LSE_blk),  O' = e^(LSE - LSE') O + e^(LSE_blk - LSE') O_blk.
// The running state starts as O = 0, LSE = -inf; a -inf side contributes nothing.
template <typename real>
void attention_merge_ref(real* o,              // (B, Tq, NH, HS) running O, updated
                         real* lse,            // (B, NH, Tq) running LSE, updated
                         const real* o_blk,    // (B, Tq, NH, HS)
                         const real* lse_blk,  // (B, NH, Tq)
                         AttnShape s, int Tq, CpChunk q);

// The backward of one block, ACCUMULATING (+=) into dq (rows of chunk q) and dkv (rows of
// chunk k). lse is the FINAL (merged) LSE and D = rowsum(dO o O) of the final O.
template <typename real>
void attention_block_backward_ref(real* dq,          // (B, Tq, NH, HS) +=
                                  real* dkv,         // (B, Tk, 2*NKV, HS) += (dK heads, dV heads)
                                  const real* dout,  // (B, Tq, NH, HS)
                                  const real* qkv,   // (B, Tq, NH + 2*NKV, HS)
                                  const real* kv,    // (B, Tk, 2*NKV, HS)
                                  const real* lse,   // (B, NH, Tq)
                                  const real* D,     // (B, NH, Tq)
                                  AttnShape s, int Tq, int Tk, CpChunk q, CpChunk k,
                                  const AttnMask& mask = {});

// The whole ring. Pointer arrays have one entry per rank (L.cp() of them); s.T must equal
// L.T(). mask: {} causal, or the mask of the whole (B, T) batch (doc_start at global positions,
// the same on every rank). trace: optional (nullptr), filled with what the ring did.
template <typename real>
void ring_attention_forward_ref(real* const* out,        // [cp] (B, Tl_r, NH, HS)
                                real* const* lse,        // [cp] (B, NH, Tl_r)
                                const real* const* qkv,  // [cp] (B, Tl_r, NH + 2*NKV, HS)
                                AttnShape s, const CpLayout& L, const AttnMask& mask = {},
                                RingTrace* trace = nullptr);
template <typename real>
void ring_attention_backward_ref(real* const* dqkv,        // [cp] (B, Tl_r, NH+2*NKV, HS) =
                                 const real* const* dout,  // [cp] (B, Tl_r, NH, HS)
                                 const real* const* qkv,   // [cp] (B, Tl_r, NH + 2*NKV, HS)
                                 const real* const* out,   // [cp] (B, Tl_r, NH, HS)
                                 const real* const* lse,   // [cp] (B, NH, Tl_r)
                                 AttnShape s, const CpLayout& L, const AttnMask& mask = {},
                                 RingTrace* trace = nullptr);

// RoPE at global positions on rank r's local qkv (forward) or dqkv (backward), in place: each
// chunk's rows are rotated by their global positions (rope.h, pos0 = the chunk's a_k).
template <typename real>
void cp_rope_forward_ref(real* qkv,  // (B, Tl_r, NH + 2*NKV, HS)
                         AttnShape s, const CpLayout& L, int r, float theta);
template <typename real>
void cp_rope_backward_ref(real* dqkv,  // (B, Tl_r, NH + 2*NKV, HS)
                          AttnShape s, const CpLayout& L, int r, float theta);
