// flash3_tiles.h — the forward tile sizes of the "flash3" attention backend, CUDA-free: the
// kernel (flash3.cu) builds its compile-time traits from these numbers and the spec
// (backends.cpp: kSpec_flash3) its cost and scratch, so the two cannot drift apart.
//
// flash3 = the FlashAttention-3 schedule on sm_90a (flash3.cu says how): a producer warp issues
// TMA loads of Q_i once per work tile and of K_j, V_j into a ring of shared-memory stages (as
// many as fit, up to 4: 4 at HS 64, 2 at HS 128); consumer warpgroups of 64 query rows each
// (Br = 192 at HS 64, 128 at HS 128) run S = Q K^T and O += P V on wgmma; persistent grid,
// longest tiles first. The backward
// (flash3_bwd.cu) runs flash's steps and tiles (flash_tiles.h) on a warp-specialised schedule.
#pragma once
#include <cstddef>

#include "kernels/attention/flash_tiles.h"

namespace flash3 {

// Consumer warpgroups of the forward, 64 query rows each: Br = 64 x this. 3 at HS 64
// (FlashAttention-3's 192 x 128 tile there): +8..+19% forward over 2 on an H100, and 4 (on 64-key
// tiles, all their registers fit) slower (flash3.cu's tuning notes); HS 128 keeps 2 (3 would
// leave 160 registers for a consumer's 160 of O, S and P alone).
constexpr int kFwdConsumerWGs(int HS) { return HS == 64 ? 3 : 2; }
constexpr int kFwdBr(int HS) { return 64 * kFwdConsumerWGs(HS); }  // query rows per work tile
constexpr int kFwdBc = 128;  // keys per K/V tile
// Backward step order (flash3_bwd.cu BwdVariant; the measured reasons are in its tuning notes):
// at HS 128 each step issues its S^T and dP^T while the step before's dK runs (kSdpNext: +2..+5%
// backward at T 4K-64K on an H100); at HS 64, where those accumulators do not fit beside dK's
// (ptxas serializes the wgmmas), dQ is issued before dK and staged under it (kDqFirst).
constexpr bool kBwdSdpNext(int HS) { return HS == 128; }
// At HS 64 from T = 4096 on, dQ lags a step and the math warpgroups do not meet each step
// (kDqLag): on an H100, same run, 3 rounds, backward x1.056 / x1.054 / x1.056 at T 4K / 16K / 64K
// (--deterministic x1.041 at 16K; ncu T 16K: 2.63 -> 2.45 ms, tensor pipe 50.6 -> 54.5% busy,
// barrier stalls 0.71 -> 0.34 per instruction). Run at every T it read x0.966 at T 1K, where a
// block's few steps pay the extra dQ at its end, and at HS 128 (on kSdpNext) x0.978-0.983 at
// T 4K-32K. From T 2048 instead (same run, 3 rounds): x0.992 / x0.994 at T 2K / 3K, where the
// unchanged kernels at 1K / 4K read x0.992 / x1.009, and x0.974 with --deterministic at 2K; so
// 4096 stays. Tq: the problem's query rows (a ring pair's chunk).
constexpr bool kBwdDqLag(int HS, long long Tq) { return HS == 64 && Tq >= 4096; }
// Persistent backward blocks (flash3_bwd.cu Bwd3Block: one block per SM claiming K/V tiles, the
// next tile's loads under the epilogue) at HS 64 up to T 8192, where a block's start and end are
// a large part of its few steps. On an H200, same call, 3 rounds, backward against one block per
// tile: T 1K / 2K x1.068 / x1.027 (kDqFirst); with the dQ lag T 4K / 8K x1.034 / x1.020 (ncu:
// the tensor pipe 49.8 -> 52.0% / 52.8 -> 53.9% busy) but 16K / 64K x0.980 / x0.982 (a second
// call x1.027 / x0.979; a tile there runs hundreds of steps, so its start and end leave little
// to save), and one block a tile there runs each head's diagonal step apart (x1.010-1.022),
// which the persistent kernels' registers do not allow (Bwd3Block::PEEL_DIAG).
// `bench-attention`, 2 rounds: T 4K / 8K x1.030 / x1.010; with --deterministic (the static
// stride) x1.000 / x0.986, so the dQ-lag kernels are persistent in the default order only
// (kDqFirst's: x1.05 / x1.03 at 1K / 2K).
// Causal only (the masked kernels keep one block a tile). Tq: the problem's query rows.
constexpr bool kBwdPersistent(int HS, long long Tq) { return HS == 64 && Tq <= 8192; }
// Work order of the forward's tiles (sm90/scheduler.cuh FwdScheduler): row-major (the longest rows of every
// head first) while the K and V of all B x NKV heads fit the L2 cache; head-major (one head at a
// time, its longest rows first) once they outgrow it, so that the tiles running at once share
// one head's K/V tiles in L2. Measured on an H100 (50 MiB L2), 2026-11-25, forward TFLOP/s
// head-major / row-major: HS 128 B 4 T 4K 582 / 528, T 16K-128K +2.5..+5%; HS 64 (12 heads)
// T 16K (48 MiB of K/V: row-major kept) +1%, 64K -2%, 128K-512K +1..+3%.
constexpr bool kv_outgrows_l2(long long B, long long NKV, long long T, long long HS,
                              long long l2_bytes) {
  return B * NKV * T * HS * 2 * 2 > l2_bytes;
}
// Backward block order (flash3_bwd.cu, sm90/scheduler.cuh): groups of (batch, kv head) pairs,
// one group after another, each group's blocks in order of j (the longest first). The blocks of
// one pair read the same Q_i, dO_i tiles and add into the same dQacc rows, so the fewer pairs run
// at once, the fewer of those reads miss L2; a group of fewer blocks than SMs leaves SMs idle at
// its end. So: the largest group whose blocks fit one wave (at least one pair). Measured on an
// H100 (132 SMs): HS 128 B 4 T 4K 380 -> 433-447 TFLOP/s backward over one group of all pairs,
// 8K +3%, 16K/64K +2-4%, HS 64 +1-5% (the table by group size: docs/notes/flash3.md).
constexpr int bwd_pair_group(long long pairs, long long blocks_per_pair, long long sms) {
  const long long one_wave = sms / blocks_per_pair;
  return (int)(one_wave < 1 ? 1 : one_wave > pairs ? pairs : one_wave);
}
// The forward's scratch: the work-tile counter, one int at offset 0 (the backward later
// overwrites it: the forward's scratch need not survive).
constexpr size_t kFwdScratchBytes = sizeof(int);
// GQA backward blocks (flash3_bwd.cu Bwd3Block QUERY_HEADS; AttnBwdCore::query_head_blocks):
// one per (batch, query head) and K/V tile, where a block per kv head runs the steps of all G
// query heads; the G blocks of a K/V tile then sum dK_j, dV_j in turn through an fp32
// accumulator. A kv head's blocks read all G heads' Q_i, dO_i and add into all their dQacc rows,
// G x T x HS x 8 bytes (134 MB at G 8, T 16K, HS 128, against an H200's 50 MB of L2: L2 hit 78%
// against 98% without GQA); a query head's, T x HS x 8. So: query-head blocks once a kv head's
// rows outgrow L2. H200, HS 128, 64 query / 8 kv heads, bench-attention, 2 rounds, backward
// against kv-head blocks: T 16K (B 2) x1.025, 32K x1.027; but T 2K / 4K x0.53 / x0.85 (a pair
// group of 8 query heads runs in one wave there, and its 8 blocks of a K/V tile wait for each
// other's turns; and a block runs 1/G of the steps for the same start and end), and at rows
// that fit L2 HS 64, 12 / 4 heads, T 16K x0.974, HS 128 16 / 8 heads, T 16K x1.003. So also
// only where a pair group is one query head (bwd_pair_group: more K/V tiles than half the SMs,
// T > 8448 on an H200's 132), so that the G blocks of a tile run in different waves. Not with
// --deterministic, whose fixed dQ order keeps every pair in one group.
constexpr bool kBwdQueryHeadBlocks(long long NH, long long NKV, long long T, long long HS,
                                   long long l2_bytes, long long sms, bool deterministic) {
  const long long kv_tiles = (T + flash_tiles((int)HS).bwd_Bc - 1) / flash_tiles((int)HS).bwd_Bc;
  return NH != NKV && !deterministic && NH / NKV * T * HS * 8 > l2_bytes && 2 * kv_tiles > sms;
}
// The backward's scratch: flash's (flash_tiles.h flash_bwd_scratch), then the persistent blocks'
// K/V tile counter, one int at this offset; then with GQA the query-head blocks' turns, one int
// per (batch, kv head, K/V tile), and, 16-byte aligned, their dK, dV accumulator
// (B, T, 2, NKV, HS) fp32.
inline size_t bwd_counter_offset(const AttnShape& s) {
  return (flash_bwd_scratch(s).bytes + sizeof(int) - 1) / sizeof(int) * sizeof(int);
}
inline size_t bwd_dkv_turn_offset(const AttnShape& s) { return bwd_counter_offset(s) + sizeof(int); }
inline size_t bwd_dkv_turns(const AttnShape& s) {
  const int Bc = flash_tiles(s.HS).bwd_Bc;
  return (size_t)s.B * s.NKV * ((s.T + Bc - 1) / Bc);
}
inline size_t bwd_dkv_acc_offset(const AttnShape& s) {
  return (bwd_dkv_turn_offset(s) + bwd_dkv_turns(s) * sizeof(int) + 15) / 16 * 16;
}
inline size_t bwd_scratch_bytes(const AttnShape& s) {
  if (s.NH == s.NKV) return bwd_dkv_turn_offset(s);
  return bwd_dkv_acc_offset(s) + (size_t)s.B * s.T * 2 * s.NKV * s.HS * sizeof(float);
}

}  // namespace flash3
