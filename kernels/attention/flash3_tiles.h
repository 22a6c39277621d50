// flash3_tiles.h — the forward tile sizes of the "flash3" attention backend, CUDA-free: the
// kernel (flash3.cu) builds its compile-time traits from these numbers and the spec
// (backends.cpp: kSpec_flash3) its cost and scratch, so the two cannot drift apart.
//
// flash3 = the FlashAttention-3 schedule on sm_90a (flash3.cu says how): a producer warp issues
// TMA loads of Q_i once per work tile and of K_j, V_j into a ring of kFwdStages(HS) shared-memory
// stages; 2 consumer warpgroups of 64 query rows each (Br = 128) run S = Q K^T and O += P V on
// wgmma; persistent grid, longest tiles first. The backward (flash3_bwd.cu) runs flash's steps
// and tiles (flash_tiles.h) on a warp-specialised schedule.
#pragma once
#include <cstddef>

namespace flash3 {

constexpr int kFwdBr = 128;           // query rows per work tile: 2 consumer warpgroups x 64
constexpr int kFwdBc = 128;           // keys per K/V tile (= Br: one diagonal tile per row)
constexpr int kFwdThreads = 3 * 128;  // producer warpgroup + 2 consumer warpgroups
constexpr int kFwdStages(int HS) { return HS == 64 ? 4 : 2; }  // K/V ring depth (smem bound)
// The two consumer warpgroups take turns issuing their GEMMs (named barriers) when true.
constexpr bool kFwdPingPongDefault = true;
// Work tiles handed out by an atomic counter when true; else block k takes tiles k, k + grid, ...
// of the longest-first order.
constexpr bool kFwdDynamicDefault = true;
// Backward: after the dS^T exchange of a step, issue dQ before dK (dQ's staging then runs under
// dK) when true; else dK before the exchange, as flash's kernel (flash3_bwd.cu BwdVariant; the
// measured reason is in its tuning notes).
constexpr bool kBwdDqFirstDefault = true;
// Work order of the forward's tiles (flash3.cu work_tile): row-major (the longest rows of every
// head first) while the K and V of all B x NKV heads fit the L2 cache; head-major (one head at a
// time, its longest rows first) once they outgrow it, so that the tiles running at once share
// one head's K/V tiles in L2. Measured on an H100 (50 MiB L2), 2026-11-25, forward TFLOP/s
// head-major / row-major: HS 128 B 4 T 4K 582 / 528, T 16K-128K +2.5..+5%; HS 64 (12 heads)
// T 16K (48 MiB of K/V: row-major kept) +1%, 64K -2%, 128K-512K +1..+3%
// (bench/results/flash3_bwd_nvidia-h100_2026-11-25/run15_*).
constexpr bool kv_outgrows_l2(long long B, long long NKV, long long T, long long HS,
                              long long l2_bytes) {
  return B * NKV * T * HS * 2 * 2 > l2_bytes;
}
// The forward's scratch: the work-tile counter, one int at offset 0 (the backward later
// overwrites it: the forward's scratch need not survive).
constexpr size_t kFwdScratchBytes = sizeof(int);

}  // namespace flash3
