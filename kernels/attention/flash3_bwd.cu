// flash3_bwd.cu — the "flash3" backward: FlashAttention-2's recomputation (the maths of
// flash_bwd.cu, one step = bwd_step_dkdv + bwd_issue_dq in flash_bwd_wgmma.cuh) on the
// FlashAttention-3 backward schedule: warp specialisation, TMA loads into an mbarrier ring, and
// the dQ reduce-adds handed to a writer warp, so the math warpgroups never load and never wait
// for a whole-block barrier.
//
// One thread block per (K/V tile j of Bc = 128 keys, kv head, batch), in groups of (batch, kv
// head) pairs that fit one wave, each group's blocks in order of j (the longest first; the
// blocks of a group share their Q_i, dO_i and dQacc rows in L2: flash3_tiles.h
// bwd_pair_group), 3 warpgroups (Br, Bc, tiles: flash_tiles.h, as flash's backward). At HS 64
// up to T 8192 (flash3_tiles.h kBwdPersistent) a block per SM instead, whose loader warp claims the
// K/V tiles of that order from a counter and hands each to the other warps through two slots
// in shared memory; the stage ring and the dQ staging run on across its tiles, dK and dV are
// staged in the dS^T buffers, and the next tile's Q_i, dO_i, then K_j, V_j load under the
// epilogue:
//   producer warpgroup (setmaxnreg 24; 32 or 40 in some kernels: Bwd3Block::PRODUCER_REGS):
//     warp 0 (loader):  TMA K_j, V_j once (kv_full); for each step it (query head h, Q tile i):
//                       wait empty[s]; LSE_i, D_i rows -> smem (lanes); TMA Q_i, dO_i -> stage s
//                       (s = it mod 2), completing on full[s]
//     warp 1 (dQ writer): for each step: wait dQ_full (named barrier); [--deterministic: wait
//                       for block j - 1's add to this tile, as flash_bwd_wgmma.cuh]; one bulk
//                       reduce-add of the staged fp32 dQ_i tile into dQacc (in L2), or, for the
//                       tile's first partial, a bulk store (dQacc is not zeroed: a ticket per
//                       tile picks the first comer, the others add once its store is released;
//                       --deterministic: block 0's); once the copy engine has read it, free the
//                       staging buffer (dQ_empty)
//   2 math warpgroups (setmaxnreg 240 or MATH_REGS), warpgroup c owns keys j Bc + 64 c .. +63:
//     wait kv_full; for each step: wait full[s]
//       S^T = K_c Q_i^T, dP^T = V_c dO_i^T  [HS 128: issued while the step before's dK runs;
//                                            then wait for that dK, release its stage]
//       P^T; dV_c += P^T dO_i; dS^T -> smem
//       meet the other math warpgroup (named barrier: dS^T of all 128 keys is in smem)
//       issue dQ_i part = dS_ij K_j, then dK_c += dS^T Q_i; wait for dQ
//         [HS 64 from T 4096 (kDqLag): no meeting; before storing dS^T, wait until the other
//          warpgroup has finished the step before; issue the step before's dQ part instead;
//          one block a tile in the arrival order: each query head's diagonal step first, and
//          the others without the causal mask]
//       wait dQ_empty; stage dQ_i part (fp32) in dQacc's layout (under dK); signal dQ_full
//       [HS 64: wait for dK; release stage s (empty[s])]
//     dK_j (times scale), dV_j -> dqkv (or the ring's fp32 accumulator)
// GQA past L2 (flash3_tiles.h kBwdQueryHeadBlocks: a kv head's G query heads' rows outgrow it,
// and a pair group is one query head): one block per (K/V tile j, query head, batch) instead
// (QUERY_HEADS), its steps that head's only; the G blocks of a K/V tile then sum dK_j, dV_j in
// turn (sum_dk_dv_heads: the first stores its fp32 part, the next ones add theirs, the last
// writes bf16 into dqkv), so dK, dV stay the same on every run.
// Masks (mask.h; the MASKED kernels, the causal ones untouched): the steps of flash's masked
// backward (flash_bwd.cu: the Q tiles that the K/V tile meets, found at the block's start; the
// partial tiles masked element by element), with a third producer warp (doc warp) that stores
// each step's rows' doc_start beside the loader's LSE_i, D_i (arriving on the same full[s]), the
// block's Q tile range in shared memory for the producer warps, and at HS 64 setmaxnreg 32/232
// for producer/math (Bwd3Block::PRODUCER_REGS says why). --deterministic with a mask: dQacc is
// zeroed and every partial adds (the first block of a Q tile is not block 0).
// Against flash's kernel (the same products, same tiles): no cp.async issued by the math warps,
// no __syncthreads in the loop (one 256-thread named barrier per step instead of two block-wide
// ones), and the dQ add (and the deterministic order's wait) leaves the math warps' path.
//
// Tuning notes (H100 80GB HBM3, causal bf16, 16384 tokens per batch, backward TFLOP/s; the
// history and the removed variants: docs/notes/flash3.md):
//   - warp specialisation over flash's kernel (same products and tiles): -1..+11%, most at long
//     T; dQ issued before dK with its staging under dK: 0..+3% at HS 128.
//   - HS 128 (kSdpNext): each step issues its S^T and dP^T while the step before's dK runs, so
//     the tensor pipe does not drain between steps: +2.5..+5.5% at T 4K-64K. At HS 64 those
//     accumulators do not fit beside dK's and ptxas serializes the wgmmas (0.90x): kDqFirst.
//     ptxas serializes every wgmma (C7510-series warnings, 13-15% slower) when an accumulator in
//     flight across the loop's back edge is read by ordinary instructions, a register is zeroed
//     by copying an accumulator register, or a wgmma is issued under a branch its consumer does
//     not share: the loop carries dK across the back edge, zeroes by immediates
//     (sm90::zero_acc) and computes every step (bwd_step_dkdv_pre). The build fails on those
//     lines (Makefile).
//   - kDqLag (HS 64, T >= 4096): the rule and its numbers are flash3_tiles.h kBwdDqLag's. It
//     pays only with one dQ-empty barrier per math warpgroup: a shared one is a meeting too
//     (x0.96-0.98 at every shape with it).
//   - persistent blocks at HS 64 up to T 8192: backward x1.068 / x1.027 / x1.034 / x1.020 at
//     T 1K / 2K / 4K / 8K on an H200 (the rule and its numbers: flash3_tiles.h kBwdPersistent;
//     the design's: Bwd3Block::PERSISTENT).
//   - each head's diagonal step apart (Bwd3Block::PEEL_DIAG: the dQ-lag kernels of one block a
//     tile, arrival order), so that the other steps skip the causal mask's compares: on an H200,
//     3 rounds, x1.017 / x1.022 / x1.010 / x1.011 at T 16K / 32K / 64K / 128K; ncu at 16K:
//     26% fewer instructions, tensor pipe 54.5 -> 55.4% busy. The compares under a warp-uniform
//     branch instead were x0.972 at 64K (the branch cuts the step's schedule in two); the peel in
//     the fixed order (--deterministic) x0.972 / x0.978 at T 4K / 16K.
//   - pair groups that fit one wave (sm90/scheduler.cuh): HS 128 4K +14-17% over one group of
//     all pairs; their locality holds at long T (ncu, H200: L2 hit rate 99.2% / 99.7% at HS
//     64 / 128 at T 64K, 99.0% at HS 64 at 1M; DRAM 30-41 GB/s), and spreading the blocks that
//     run in step over different Q tiles read x0.97-1.01. The first partial of each dQ tile
//     stores (no zeroing in the D kernel): +2.8% at HS 128 4K.
//   - --deterministic (the fixed dQ order) costs 22/8/9% at HS 128 T 4K/16K/64K (360/492/500
//     TFLOP/s): a flag, not the default.
//   - GQA (G query heads a kv head): a pair's blocks read all G heads' Q_i, dO_i and add into
//     all their dQacc rows, G x 16 MiB at T 16K and HS 128, over L2's 50 MiB. On an H200, HS 128,
//     64 query / 8 kv heads, B 2, T 16K: L2 hit 78.2% against 97.9% with 64 kv heads (ncu). So
//     at G > 1 the loader asks L2 to evict Q_i, dO_i first: DRAM writes 17.9 -> 12.7 GB, ncu
//     49.1 -> 47.3 ms; timed x1.023 / x1.025 (2 rounds; T 32K x1.00, where dQacc alone outgrows
//     L2). Past L2 the query-head blocks (their rule and the shapes where they lose:
//     flash3_tiles.h kBwdQueryHeadBlocks), same call, 2 rounds, against kv-head blocks with the
//     evict-first loads: HS 128, 64 / 8 heads, B 2 T 16K x1.035, B 1 T 32K x1.028; 32 / 8 heads
//     T 16K x1.013; HS 64, 16 / 2 heads, T 16K / 32K x1.013 / x1.025, 12 / 3 heads T 32K x1.005.
//     ncu at T 16K, the GPU's own clocks: L2 hit 77.3 -> 97.1%, DRAM read 27.6 -> 3.8 GB, write
//     9.0 -> 3.1 GB, 39.3 -> 37.3 ms at the same tensor-pipe share of the cycles (61.8 / 61.9%):
//     the SM clock under the 700 W cap rose 1.69 -> 1.78 GHz (less DRAM traffic, less power). At
//     ncu's locked clocks the kernel reads 47.3 -> 47.8 ms (G times the K/V loads and the
//     epilogues, the turns): the gain is power.
//
// Limits: bf16; HS 64 or 128; sm_90a (TMA, mbarrier, setmaxnreg, wgmma); q, k, v, dout
// 16-byte aligned with row and batch strides multiples of 8 elements (tensor maps); causal
// needs Tq == Tk; any T >= 1 (TMA zero-fills rows past T; LSE and D rows past T read as 0).
// Scratch: flash's backward scratch (dQacc, D, semaphores: flash_tiles.h); the semaphores are
// the fixed order's (--deterministic) or the dQ tickets; then the persistent blocks' tile
// counter (flash3_tiles.h bwd_counter_offset); with GQA then the query-head blocks' turns and
// their fp32 dK, dV accumulator (bwd_dkv_acc_offset). The ring's problems (backward_problem)
// add every partial into the accumulator the ring zeroed (no tickets).
//
// Test:  ./build/test_gpu --gtest_filter='*flash3*:Flash3*:RingAttention*'
// Bench: ./build/flashgpt bench-attention --backends flash,flash3 [--deterministic]
//        python3 scripts/bench_attention.py --backends flash,flash3
#include <algorithm>
#include <type_traits>

#include "kernels/attention/flash.cuh"
#include "kernels/attention/flash3.cuh"
#include "kernels/attention/flash3_tiles.h"
#include "kernels/attention/flash_bwd_wgmma.cuh"
#include "kernels/attention/sm90/copy.cuh"
#include "kernels/attention/sm90/pipeline.cuh"
#include "kernels/attention/sm90/scheduler.cuh"
#include "kernels/attention/sm90/sync.cuh"
#include "kernels/attention/sm90/wgmma.cuh"

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "flash3_bwd.cu uses TMA, wgmma and setmaxnreg: build for sm_90a (GPU_ARCH=90a)"
#endif

namespace flash3 {

using flash::BwdCore;
using flash::BwdProblem;
using flash::BwdStepMask;
using flash::DqOrder;
using flash::KernelMask;
using flash::kLog2e;
using sm90::reg_fence;
using flash::smem_u32;

// The order of a step's tail (flash3_tiles.h kBwdSdpNext picks): both math warpgroups write
// dS^T, meet, and each computes its half of dQ_i = dS_ij K_j over all Bc keys (flash's split);
// kDqFirst issues dQ before dK so that dQ's staging runs under dK; kSdpNext (HS 128 only: at
// HS 64 the registers are not there and ptxas serializes the wgmmas) is kDqFirst with each
// step's S^T and dP^T issued while the step before's dK still runs, so that the tensor pipe does
// not drain between steps. kDqLag (HS 64 at long T: flash3_tiles.h kBwdDqLag) is kDqFirst without
// the meeting: step it issues dQ_{it-1}, whose dS^T both warpgroups stored a step ago. The same
// variant runs with --deterministic.
enum class BwdVariant { kDqFirst, kSdpNext, kDqLag };

// Compile-time traits: flash's step sizes (flash::BwdTileWG) plus this kernel's shared memory.
template <int HS_, int Br_, BwdVariant V_>
struct Bwd3Tile : flash::BwdTileWG<HS_, Br_> {
  using Base = flash::BwdTileWG<HS_, Br_>;
  static constexpr int HS = HS_, Br = Br_, Bc = Base::Bc;
  static constexpr BwdVariant V = V_;
  // wgmma descriptors built once per operand and stepped (flash_bwd_wgmma.cuh OperandDesc says
  // what it measured)
  static constexpr bool DESC_AT = true;
  // dS^T stored by stmatrix.x4 (bwd_step_dkdv) at HS 128: backward +0.3/+2.2/+0.4/-0.3% at T
  // 1K/4K/16K/64K, 434 -> 414 M instructions at 4K; at HS 64 +0.5/-0.5/-0.6/-1.3%, so not there
  // (H100, 3 interleaved rounds against the tree)
  static constexpr bool DS_STMATRIX = HS == 128;
  static constexpr int NTHREADS = 384;         // producer warpgroup + 2 math warpgroups
  static constexpr int MATH_THREADS = 256;
  static constexpr int PANELS = HS / 64;       // 64-column TMA boxes per row
  static constexpr int KV_BYTES = Base::KV_BYTES, QT_BYTES = Base::QT_BYTES,
                       DS_BYTES = Base::DS_BYTES, DQ_BYTES = Br * HS * 4;
  // smem (1024-aligned): K_j | V_j | Q x2 | dO x2 | dS^T x2 (the next step's is written while
  // the other warpgroup may still read this one) | dQ staging x DQ_BUFS | LSE x2 | D x2 |
  // mbarriers (full[2], empty[2], kv_full)
  static constexpr int OFF_V = KV_BYTES, OFF_Q = 2 * KV_BYTES, OFF_DO = OFF_Q + 2 * QT_BYTES,
                       OFF_DS = OFF_DO + 2 * QT_BYTES, OFF_DQ = OFF_DS + 2 * DS_BYTES;
  static constexpr int FIXED = OFF_DQ + 4 * Br * 4 + 11 * 8 + 1024;  // + slack to align the base
  // Two staging buffers (the writer may lag a whole step) where they fit: HS 128 (Br 64);
  // HS 64 (Br 128) misses by 40 bytes and has one.
  static constexpr int DQ_BUFS = FIXED + 2 * DQ_BYTES <= 227 * 1024 ? 2 : 1;
  static constexpr int OFF_L = OFF_DQ + DQ_BUFS * DQ_BYTES, OFF_D = OFF_L + 2 * Br * 4,
                       OFF_BAR = OFF_D + 2 * Br * 4;
  // mbarriers (8 bytes each): full x 2, empty x 2, kv_full, kv_empty, slot_full x 2,
  // slot_empty x 2; then the two K/V tile slots (ints)
  static constexpr int OFF_FULL = OFF_BAR, OFF_EMPTY = OFF_BAR + 16, OFF_KV_FULL = OFF_BAR + 32,
                       OFF_KV_EMPTY = OFF_BAR + 40, OFF_SLOT_FULL = OFF_BAR + 48,
                       OFF_SLOT_EMPTY = OFF_BAR + 64, OFF_SLOT = OFF_BAR + 80, BAR_BYTES = 11 * 8;
  static constexpr int SMEM = OFF_BAR + BAR_BYTES + 1024;
  static_assert(SMEM <= 227 * 1024, "shared memory per block");
  static_assert(Br % 32 == 0, "LSE/D rows: whole passes of the loader warp");
};

// Named barrier ids (0 is __syncthreads): the math warpgroups' dS^T exchange and epilogue, and
// per dQ staging buffer its full (math -> writer) and empty (writer -> math) signals.
constexpr int kBarDs = 1, kBarEpilogue = 2, kBarDqFull0 = 3, kBarDqEmpty0 = 5;
constexpr int kDqBarThreads = 256 + 32;  // the math warpgroups and the writer warp
// kDqLag: staging buffer d free again for math warpgroup c, id kBarDqEmptyWg0 + 2 d + c (the
// writer arrives on both: a shared one would make the warpgroups meet there each step); math
// warpgroup c has finished step it (its dS^T_it stored, its dQ_{it-1} read), id kBarStepDone0 +
// 2 c + it % 2 (c arrives, the other warpgroup syncs; with two ids c arrives on one again only
// after the other has synced on it).
constexpr int kBarDqEmptyWg0 = 7, kBarStepDone0 = 11;
constexpr int kDqEmptyWgThreads = 128 + 32;  // one math warpgroup and the writer warp
// A dQ ticket (dq_sem, kArrival): the low bits count the blocks that came to the tile, this bit
// says its first partial is stored (released after the bulk store completes).
constexpr int kDqStored = 1 << 30;

// The masked kernels' part of a backward block (Bwd3Block): the problem's mask and the two
// stages of the steps' rows' doc_start in shared memory (after the mbarriers). Empty (a base of
// no size) for the causal kernels, whose code stays as it was (a member there, even unused,
// moved ptxas's register allocation at HS 128).
template <class K, bool MASKED>
struct Bwd3MaskPart {
  __device__ __forceinline__ Bwd3MaskPart(const KernelMask<MASKED>&, uint32_t) {}
};
// Beside the doc_start stages, the block's Q tile range (first, n, end: BwdBlock), written by
// thread 0 at the start: the producer warps read it there for each step rather than hold it (in
// registers, their 24 spilled).
template <class K>
struct Bwd3MaskPart<K, true> {
  static constexpr int OFF_DOC = K::OFF_BAR + K::BAR_BYTES, OFF_QRANGE = OFF_DOC + 2 * K::Br * 4,
                       BYTES = 2 * K::Br * 4 + 3 * 4;
  const AttnProblemMask& mk;
  const uint32_t sDoc, sQRange;
  __device__ __forceinline__ Bwd3MaskPart(const AttnProblemMask& mk_, uint32_t s0)
      : mk(mk_), sDoc(s0 + OFF_DOC), sQRange(s0 + OFF_QRANGE) {}
};

// One backward block: its K/V tile and steps (flash_bwd_wgmma.cuh BwdBlock, from the pair-group
// order of sm90/scheduler.cuh), its shared memory (Bwd3Tile's offsets) and the three roles of
// its warps. MASKED: the problem's mask (Bwd3MaskPart, problem_mask.cuh) in place of causal; the
// loader also stores each step's rows' doc_start.
template <class K, DqOrder ORDER, bool MASKED, bool PERSISTENT_, bool QUERY_HEADS>
struct Bwd3Block : Bwd3MaskPart<K, MASKED> {
  static constexpr int HS = K::HS, Br = K::Br, Bc = K::Bc, NA = K::NA, PANELS = K::PANELS,
                       DQS = K::DQ_BUFS;
  static constexpr bool DET = ORDER == DqOrder::kFixed;
  static constexpr int SMEM = K::SMEM + (MASKED ? Bwd3MaskPart<K, true>::BYTES : 0);
  // Persistent blocks (PERSISTENT_, flash3_tiles.h kBwdPersistent says where; one per SM, the
  // loader claims K/V tiles from a counter and hands them to the other warps) where a block's
  // few steps make its start and end count. There dK, dV are staged in the dS^T buffers, so that
  // the next tile's K_j, V_j load (and before it its first Q_i, dO_i) runs under the epilogue.
  // A block's start and end hold about a quarter of an SM's time at T 1K (docs/notes/flash3.md:
  // the K/V wait 6.7%, the epilogue 5.0%, the last dQ add 6.4%, the launch gap 3.7%); ncu at
  // B 32 x T 1K (H200): 514 -> 482 us, tensor pipe 39.7 -> 42.3% busy, barrier stalls 1.10 ->
  // 0.78 per instruction. --deterministic (the static stride) x1.05 / x1.03 at T 1K / 2K, the
  // d12 step 53.33 -> 53.05 ms. Every kernel made persistent with the epilogue in K_j, V_j read
  // x1.02 at T 1K and x0.97-0.99 from T 4K on. Causal HS 64 only: HS 128's dK, dV (64 KB) do not
  // fit the dS^T buffers (32 KB).
  static constexpr bool PERSISTENT = PERSISTENT_;
  static_assert(!PERSISTENT || (!MASKED && HS == 64), "persistent: the causal HS 64 kernels");
  // setmaxnreg of the producer warpgroup and of the math warpgroups (128 x 24 + 256 x 240 fill
  // the block's 168 x 384). The masked HS 64 kernel gives the producer 32 (math 232): at 24 its
  // loader and dQ writer spilled 4-8 bytes, and its math warps fit 232 without spills (ptxas -v).
  // The persistent ones give it 40 (math 224): at 24 and 32 their producer warps spilled 64-68
  // and 28 bytes; at 40 / 224 nothing spills.
  static constexpr int PRODUCER_REGS = MASKED && HS == 64 ? 32 : PERSISTENT ? 40 : 24,
                       MATH_REGS = MASKED && HS == 64 ? 232 : PERSISTENT ? 224 : 240;
  static_assert(128 * PRODUCER_REGS + 256 * MATH_REGS <= 168 * 384, "the block's registers");
  static_assert(!PERSISTENT || 2 * Bc * HS * 2 <= 2 * K::DS_BYTES, "dK, dV staging in dS^T");
  const BwdCore& p;
  const int NH, Tq;
  const bool causal;
  // The kDqLag kernels of one block a tile in the arrival order run each head's diagonal step
  // first, and the others without the causal mask's compares (math()). Not the persistent
  // kernels: with their math warps' 16 registers fewer, ptxas serializes the peeled loops' wgmmas
  // (C7512); not the fixed order (--deterministic), where the same peel (the diagonal steps
  // last) read x0.972 / x0.978 / x1.000 at T 4K / 16K / 64K.
  static constexpr bool PEEL_DIAG =
      K::V == BwdVariant::kDqLag && !MASKED && !PERSISTENT && !DET;
  static_assert(!PEEL_DIAG || Br == Bc, "BwdBlock's DIAG_FIRST order: one diagonal Q tile a head");
  // QUERY_HEADS (GQA, flash3_tiles.h kBwdQueryHeadBlocks): a block per (batch, query head)
  // and K/V tile, whose dK_j, dV_j the kv head's G blocks sum in turn (sum_dk_dv_heads).
  static_assert(!QUERY_HEADS || !DET, "query-head blocks: the arrival order");
  const flash::BwdBlock<Bc, Br, ORDER, MASKED, PEEL_DIAG, QUERY_HEADS> blk;
  // The problem's pairs: (batch, kv head), or (batch, query head).
  static __host__ __device__ __forceinline__ int pairs(const BwdCore& p) {
    return p.B * (QUERY_HEADS ? p.NH : p.NKV);
  }
  const int b, kvh, j, k0, total, n_qtiles;
  const int dq_sw;  // dQacc's swizzle follows its own row dq_row0 + q0 + r
  // shared memory: K_j | V_j | Q x2 | dO x2 | dS^T x2 | dQ staging | LSE x2 | D x2 | mbarriers
  const uint32_t sK, sV, sQ, sdO, sdS, sdQ, sL, sD;
  // (Q_i, dO_i, LSE_i, D_i) stages: full = the loader's lanes and the TMA bytes, empty = the
  // math warps' release; kv_full: K_j, V_j, once per K/V tile; kv_empty: the math threads are
  // done with K_j, V_j (and the epilogue's staging in their place).
  const sm90::StageBarriers<2> stages;
  const uint32_t bar_kv, bar_kv_empty;

  __device__ __forceinline__ Bwd3Block(const BwdCore& p_, const KernelMask<MASKED>& mk_, int pair,
                                       int j_tile, uint32_t s0)
      : Bwd3MaskPart<K, MASKED>(mk_, s0), p(p_), NH(p_.NH), Tq(p_.Tq), causal(p_.causal),
        blk(p_, pair, j_tile, mk_),
        b(blk.b), kvh(blk.kvh), j(blk.j), k0(blk.k0), total(blk.total), n_qtiles(blk.n_qtiles),
        dq_sw(p_.dq_row0 & 7), sK(s0), sV(s0 + K::OFF_V), sQ(s0 + K::OFF_Q), sdO(s0 + K::OFF_DO),
        sdS(s0 + K::OFF_DS), sdQ(s0 + K::OFF_DQ), sL(s0 + K::OFF_L), sD(s0 + K::OFF_D),
        stages{s0 + K::OFF_FULL, s0 + K::OFF_EMPTY}, bar_kv(s0 + K::OFF_KV_FULL),
        bar_kv_empty(s0 + K::OFF_KV_EMPTY) {}
  __device__ __forceinline__ void step_tile(int it, int& hq, int& q0) const {
    blk.tile(it, hq, q0);
  }
  // The producer warps' steps: MASKED, from the Q tile range in shared memory (Bwd3MaskPart).
  __device__ __forceinline__ int producer_steps() const {
    if constexpr (MASKED) return blk.G * flash::ld_shared_s32(this->sQRange + 4);
    else return total;
  }
  __device__ __forceinline__ void producer_step_tile(int it, int& hq, int& q0) const {
    if constexpr (MASKED)
      blk.tile_in(it, flash::ld_shared_s32(this->sQRange), flash::ld_shared_s32(this->sQRange + 4),
                  flash::ld_shared_s32(this->sQRange + 8), hq, q0);
    else
      blk.tile(it, hq, q0);
  }
  // Thread 0, before the block's first barrier (MASKED): the Q tile range into shared memory.
  __device__ __forceinline__ void publish_q_range() const {
    if constexpr (MASKED) {
      flash::st_shared_u32(this->sQRange, blk.i_begin);
      flash::st_shared_u32(this->sQRange + 4, blk.n_i);
      flash::st_shared_u32(this->sQRange + 8, blk.range.end);
    }
  }

  // ---- loader warp: K_j, V_j once; per step its Q_i, dO_i (TMA) and LSE_i, D_i rows ----
  // n: the block's K/V tiles before this one; base: their steps (the stage ring runs on).
  __device__ __forceinline__ void load(const CUtensorMap& tm_q, const CUtensorMap& tm_k,
                                       const CUtensorMap& tm_v, const CUtensorMap& tm_do,
                                       int lane, int n, int base) const {
    auto load_kv = [&] {
      if (lane == 0) {
        if (n > 0) sm90::mbar_wait(bar_kv_empty, (n - 1) & 1);  // the last tile's products are done
        sm90::mbar_arrive_expect_tx(bar_kv, 2 * K::KV_BYTES);
#pragma unroll
        for (int pn = 0; pn < PANELS; ++pn) {
          sm90::tma_load_4d(sK + pn * K::KV_PANEL, &tm_k, bar_kv, pn * 64, kvh, k0, b);
          sm90::tma_load_4d(sV + pn * K::KV_PANEL, &tm_v, bar_kv, pn * 64, kvh, k0, b);
        }
      }
    };
    // a persistent block's next tile: its first Q_i, dO_i go in before K_j, V_j (which wait for
    // the tile before's last products)
    const bool kv_after_first = PERSISTENT && n > 0;
    if (!kv_after_first) load_kv();
    const int steps = producer_steps();
    for (int it = 0; it < steps; ++it) {
      const sm90::PipelineState<2> ps(base + it);
      const int s = ps.index();
      stages.producer_acquire(ps);
      int hq, q0;
      producer_step_tile(it, hq, q0);
      const size_t row = ((size_t)b * NH + hq) * p.lse_T + q0;
#pragma unroll
      for (int r = lane; r < Br; r += 32) {
        const bool ok = q0 + r < Tq;
        const float l = ok ? p.lse[row + r] : 0.f, d = ok ? p.D[row + r] : 0.f;
        asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(sL + (s * Br + r) * 4), "f"(l) : "memory");
        asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(sD + (s * Br + r) * 4), "f"(d) : "memory");
      }
      const uint32_t full = stages.full_bar(s);
      if (lane == 0) {
        stages.producer_expect(ps, 2 * K::QT_BYTES);
        if (blk.G > 1) {  // GQA: Q_i, dO_i the first out of L2, dQacc's lines the last
          const uint64_t evict_first = sm90::l2_policy_evict_first();
#pragma unroll
          for (int pn = 0; pn < PANELS; ++pn) {
            sm90::tma_load_4d_l2(sQ + s * K::QT_BYTES + pn * K::QT_PANEL, &tm_q, full, pn * 64,
                                 hq, q0, b, evict_first);
            sm90::tma_load_4d_l2(sdO + s * K::QT_BYTES + pn * K::QT_PANEL, &tm_do, full,
                                 pn * 64, hq, q0, b, evict_first);
          }
        } else {
#pragma unroll
          for (int pn = 0; pn < PANELS; ++pn) {
            sm90::tma_load_4d(sQ + s * K::QT_BYTES + pn * K::QT_PANEL, &tm_q, full, pn * 64,
                              hq, q0, b);
            sm90::tma_load_4d(sdO + s * K::QT_BYTES + pn * K::QT_PANEL, &tm_do, full, pn * 64,
                              hq, q0, b);
          }
        }
      } else {
        stages.producer_commit(ps);
      }
      if (kv_after_first && it == 0) load_kv();
    }
    if (kv_after_first && steps == 0) load_kv();  // (a causal tile has its diagonal step; no hang)
  }

  // ---- MASKED, doc warp (the producer warpgroup's third): per step, its rows' doc_start into
  // stage s of sDoc (0 past Tq and without documents), arriving on full[s] beside the loader
  // warp (in the loader warp, the producer's 24 registers spilled) ----
  __device__ __forceinline__ void load_doc_rows(int lane) const {
    if constexpr (MASKED) {
      const AttnProblemMask& mk = this->mk;
      const int* rows = mk.mask.doc_start ? mk.mask.doc_start + (size_t)b * mk.mask_T + mk.q_pos0
                                          : nullptr;  // this problem's rows of sequence b
      const int steps = producer_steps();
      for (int it = 0; it < steps; ++it) {
        const sm90::PipelineState<2> ps(it);
        stages.producer_acquire(ps);
        int hq, q0;
        producer_step_tile(it, hq, q0);
        for (int r = lane; r < Br; r += 32)
          flash::st_shared_u32(this->sDoc + (ps.index() * Br + r) * 4,
                               rows && q0 + r < Tq ? rows[q0 + r] : 0);
        stages.producer_commit(ps);
      }
    }
  }

  // ---- dQ writer warp: each step's staged dQ_i partial into dQacc (bulk store or reduce-add) ----
  // base: the block's steps before this K/V tile (the staging buffers alternate on).
  __device__ __forceinline__ void dq_writer(int* dq_sem, int lane, int base) const {
    int* sem_pending = nullptr;  // kFixed: the semaphore of the add not yet released
    const int steps = producer_steps();
    for (int it = 0; it < steps; ++it) {
      const int d = (base + it) % DQS;
      sm90::named_bar_sync(kBarDqFull0 + d, kDqBarThreads);
      if (lane == 0) {
        int hq, q0;
        producer_step_tile(it, hq, q0);
        const size_t tile = ((size_t)b * NH + hq) * n_qtiles + q0 / Br;
        float* dst = p.dq_accum + (((size_t)b * NH + hq) * p.dq_T + p.dq_row0 + q0) * HS;
        const uint32_t src = sdQ + d * K::DQ_BYTES, bytes = min(Br, Tq - q0) * HS * 4;
        // dq_sem given: dQacc was not zeroed, the tile's first partial stores (below)
        bool store = false;
        if constexpr (DET) {
          flash::fixed_order_before_add(sem_pending, dq_sem, tile, j);
          // block 0 adds to every Q tile, first in the fixed order (MASKED: the first block of a
          // Q tile is not block 0, and dQacc comes zeroed: every partial adds)
          store = !MASKED && j == 0;
        } else if (dq_sem != nullptr) {
          store = atomicAdd(dq_sem + tile, 1) == 0;  // the ticket: first comer stores
          if (!store) {  // the others add once the store is complete
            sm90::wait_flag_bits(dq_sem + tile, kDqStored);
            sm90::fence_proxy_async_global();
          }
        }
        if (store) sm90::bulk_store_f32(dst, src, bytes);
        else sm90::bulk_reduce_add_f32(dst, src, bytes);
        sm90::bulk_commit();
        if (!DET && store) {
          sm90::bulk_wait_all();
          sm90::fence_proxy_async_global();
          sm90::red_or_release_gpu(dq_sem + tile, kDqStored);
        } else {
          sm90::bulk_wait_read_all();  // the staging buffer may be overwritten
        }
      }
      __syncwarp();
      // every staging buffer is freed (the math warps take the last DQS frees at the block's
      // end: math_finish)
      if constexpr (K::V == BwdVariant::kDqLag) {
        sm90::named_bar_arrive(kBarDqEmptyWg0 + 2 * d + 0, kDqEmptyWgThreads);
        sm90::named_bar_arrive(kBarDqEmptyWg0 + 2 * d + 1, kDqEmptyWgThreads);
      } else {
        sm90::named_bar_arrive(kBarDqEmpty0 + d, kDqBarThreads);
      }
    }
    if (DET && lane == 0) {  // the fixed order: block j + 1 may add once this one's adds are done
      sm90::bulk_wait_all();
      flash::fixed_order_release_last(sem_pending, j);
    }
  }

  // MASKED: the mask of the step in stage s (Q tile from q0) for this thread's warpgroup (its
  // keys from key_wg, the thread's first accumulator key key_row); else unused.
  __device__ __forceinline__ BwdStepMask step_mask(int s, int q0, int key_wg, int key_row) const {
    if constexpr (MASKED) {
      const AttnProblemMask& mk = this->mk;
      return flash::bwd_step_mask(this->sDoc + s * Br * 4, mk.q_pos0 + q0, min(Br, Tq - q0),
                                  mk.k_pos0 + key_wg, mk.k_pos0 + key_row, mk.mask.window,
                                  blk.range.kind(q0 / Br) == TileKind::kFull);
    }
    else
      return BwdStepMask{};
  }

  // ---- math warpgroups: the step's products (flash_bwd_wgmma.cuh), dQ staging, dK_j, dV_j ----
  // n: the block's K/V tiles before this one; base: their steps (the stage ring and the dQ
  // staging buffers run on).
  __device__ __forceinline__ void math(int tid, int warp, int lane, int wg, float scale_log2,
                                       float scale, int n, int base) const {
    const int c = wg - 1;                 // math warpgroup: keys k0 + 64 c .. +63
    const int mtid = tid - 128;           // thread among the 256 math threads
    const int kw = warp - 4, wq = warp & 3, g = lane >> 2;
    const uint32_t aK = sK + c * 64 * 128, aV = sV + c * 64 * 128;  // A of S^T, dP^T
    // dQ: A = dS from dS^T (MN-major), B = K_j (MN-major); this warpgroup's query panel (row
    // split) or head-dim panel (column split).
    const uint32_t adS = sdS + (K::DQ_SPLIT_N ? 0 : c * K::DS_PANEL);
    const uint32_t aKt = sK + (K::DQ_SPLIT_N ? c * K::KV_PANEL : 0);
    const int key_wg = k0 + c * 64;           // this warpgroup's first key
    const int key_row = key_wg + wq * 16 + g; // key of accumulator elements e = 0, 1 (+8: 2, 3)

    float dk[NA], dv[NA];
#pragma unroll
    for (int n = 0; n < NA; ++n) dk[n] = dv[n] = 0.f;

    // Stage s read (Q_i, dO_i by wgmma, LSE_i, D_i by this warp's loads): lane 0 of each math
    // warp arrives on empty[s]; the other lanes' loads are ordered before it by the bar.sync and
    // the .sync.aligned wgmma waits in between. compute-sanitizer racecheck models an mbarrier
    // hand-off only for the threads that arrive (even after a __syncwarp: a probe showed it), so
    // it reports the loader's next LSE/D stores as WAR hazards; a build with
    // kEveryThreadReleases makes every math thread arrive (racecheck: 0 hazards), which costs
    // --deterministic 5-27% at HS 128 T 64K.
    auto release_stage = [&](const sm90::PipelineState<2>& ps) {
      if (kEveryThreadReleases || lane == 0) stages.consumer_release(ps);
    };
    sm90::mbar_wait(bar_kv, n & 1);
    // dQ of the block's step g -> staging buffer g % DQS, once the writer has added what was
    // there; then the writer may add it (kDqLag: each warpgroup waits on its own empty barrier).
    auto stage_dq = [&](int it, const float(&dq)[32]) {
      const int g = base + it, d = g % DQS;
      if (g >= DQS) {
        if constexpr (K::V == BwdVariant::kDqLag)
          sm90::named_bar_sync(kBarDqEmptyWg0 + 2 * d + c, kDqEmptyWgThreads);
        else
          sm90::named_bar_sync(kBarDqEmpty0 + d, kDqBarThreads);
      }
      flash::bwd_stage_dq<K>(dq, sdQ + d * K::DQ_BYTES, c, dq_sw);
      sm90::fence_proxy_async_smem();  // staging stores, before the copy engine reads them
      sm90::named_bar_arrive(kBarDqFull0 + d, kDqBarThreads);
    };
    if constexpr (K::V == BwdVariant::kSdpNext) {
      // Each step issues its S^T and dP^T while the step before's dK still runs, and ends with
      // its own dK in flight: the loop's back edge carries dK, whose accumulators only wgmma
      // touches (carrying S^T instead, issued at the end of the step before, made ptxas
      // serialize every wgmma: C7514).
      for (int it = 0; it < total; ++it) {
        const sm90::PipelineState<2> ps(base + it);
        const int s = ps.index();
        int hq, q0;
        step_tile(it, hq, q0);
        const uint32_t sdSb = sdS + s * K::DS_BYTES, sQb = sQ + s * K::QT_BYTES,
                       sdOb = sdO + s * K::QT_BYTES;
        stages.consumer_wait(ps);
        float st[K::NS], dpt[K::NS];
        flash::bwd_issue_fresh<K>(st, aK, sQb);
        flash::bwd_issue_fresh<K>(dpt, aV, sdOb);
        sm90::wgmma_wait<2>();  // the step before's dK (none in flight at it 0)
        if (it > 0) release_stage(sm90::PipelineState<2>(base + it - 1));  // the step before's
        uint32_t as[K::QK][4];
        // (the causal kernel passes no mask: a default BwdStepMask built here moved its code)
        auto step = [&](const auto&... msk) {
          flash::bwd_step_dkdv_pre<K, true, MASKED>(st, dpt, dk, dv, aK, aV, sQb, sdOb,
                                                    sL + s * Br * 4, sD + s * Br * 4, sdSb, q0,
                                                    key_wg, key_row, kw, causal, scale_log2, as,
                                                    /*issue_dk=*/false, flash::NoOp{}, msk...);
        };
        if constexpr (MASKED) step(step_mask(s, q0, key_wg, key_row));
        else step();
        sm90::fence_proxy_async_smem();  // dS^T stores, before the wgmma of dQ reads them
        sm90::named_bar_sync(kBarDs, K::MATH_THREADS);
        float dq[32];
        flash::bwd_issue_dq<K>(dq, adS + s * K::DS_BYTES, aKt);
        flash::bwd_issue_dk<K>(dk, as, sQb);
        sm90::wgmma_wait<1>();  // dQ (and dV); dK runs on into the next step
        reg_fence(dq);
        stage_dq(it, dq);
      }
      sm90::wgmma_wait<0>();  // the last dK
      if (total > 0) release_stage(sm90::PipelineState<2>(base + total - 1));
    } else {  // kDqFirst, kDqLag: each step waits for its own dK
      // kDqLag: no meeting. Step it issues dQ_{it-1} from the dS^T buffer of step it - 1, which
      // both warpgroups stored before they finished that step. Before storing dS^T_it (over
      // dS^T_{it-2}, which the other warpgroup's dQ_{it-2} read in its step it - 1), a warpgroup
      // waits until the other has finished step it - 1 (wait_other); at the end of each step it
      // says so (step_done). So one warpgroup's exponentials run while the other finishes its
      // products. Step 0 issues a dQ too (on dS^T buffer 1, dropped): a wgmma issued under a
      // branch that its wait does not share makes ptxas serialize every wgmma (C7518).
      constexpr bool LAG = K::V == BwdVariant::kDqLag;
      auto wait_other = [&](int it) {  // the other warpgroup has finished step it - 1
        if (LAG && it > 0)
          sm90::named_bar_sync(kBarStepDone0 + 2 * (1 - c) + ((it - 1) & 1), K::MATH_THREADS);
      };
      // A step's body; DIAG: its Q tile may hold queries before some of its keys (the causal
      // mask). With Br == Bc that is one Q tile a query head, the diagonal one: PEEL_DIAG's
      // order runs them as the first G steps (BwdBlock::tile_in), then the others without the
      // mask's compares.
      auto step_body = [&](int it, auto diag) {
        constexpr bool DIAG = decltype(diag)::value;
        const sm90::PipelineState<2> ps(base + it);
        const int s = ps.index();
        int hq, q0;
        step_tile(it, hq, q0);
        stages.consumer_wait(ps);
        const uint32_t sdSb = sdS + s * K::DS_BYTES, sQb = sQ + s * K::QT_BYTES;
        uint32_t as[K::QK][4];
        const bool active = flash::bwd_step_dkdv<K, MASKED>(
            dk, dv, aK, aV, sQb, sdO + s * K::QT_BYTES, sL + s * Br * 4, sD + s * Br * 4, sdSb,
            q0, key_wg, key_row, kw, DIAG && causal, scale_log2, as, /*issue_dk=*/false,
            step_mask(s, q0, key_wg, key_row), [&] { wait_other(it); });
        sm90::fence_proxy_async_smem();  // dS^T stores, before the wgmma of dQ reads them
        // ---- kDqFirst: both warpgroups' dS^T in smem; this warpgroup's half of dQ_i over all
        // keys. kDqLag: its half of dQ_{it-1} ----
        if constexpr (!LAG) sm90::named_bar_sync(kBarDs, K::MATH_THREADS);
        float dq[32];
        flash::bwd_issue_dq<K>(dq, adS + (LAG ? s ^ 1 : s) * K::DS_BYTES, aKt);
        // dK runs while dQ is staged
        if (active) {
          flash::bwd_issue_dk<K>(dk, as, sQb);
          sm90::wgmma_wait<1>();  // dQ (and dV)
        } else {
          sm90::wgmma_wait<0>();
        }
        reg_fence(dq);
        if (!LAG || it > 0) stage_dq(LAG ? it - 1 : it, dq);
        sm90::wgmma_wait<0>();  // dK
        release_stage(ps);
        if constexpr (LAG)  // step_done
          sm90::named_bar_arrive(kBarStepDone0 + 2 * c + (it & 1), K::MATH_THREADS);
      };
      if constexpr (!PEEL_DIAG) {
        for (int it = 0; it < total; ++it) step_body(it, std::true_type{});
      } else {
        int it = 0;
        for (; it < blk.G; ++it) step_body(it, std::true_type{});
        for (; it < total; ++it) step_body(it, std::false_type{});
      }
      // kDqLag: the last step's dQ, once the other warpgroup has stored its dS^T.
      if (LAG && total > 0) {
        wait_other(total);
        float dq[32];
        flash::bwd_issue_dq<K>(dq, adS + ((base + total - 1) & 1) * K::DS_BYTES, aKt);
        sm90::wgmma_wait<0>();
        reg_fence(dq);
        stage_dq(total - 1, dq);
      }
    }
    auto store_dk_dv = [&](uint32_t stage_k, uint32_t stage_v) {
      if constexpr (QUERY_HEADS)
        sum_dk_dv_heads(dk, dv, scale, mtid);
      else
        flash::bwd_store_dk_dv<HS>([&](int nt, int e) { return dk[4 * nt + e]; },
                                   [&](int nt, int e) { return dv[4 * nt + e]; }, scale, stage_k,
                                   stage_v, p, b, k0, kvh, mtid,
                                   [&] { sm90::named_bar_sync(kBarEpilogue, K::MATH_THREADS); });
    };
    if constexpr (PERSISTENT) {
      // every product of this K/V tile has been waited for: the loader may bring the next K_j,
      // V_j while dK, dV are staged in the dS^T buffers (free once both warpgroups pass the
      // epilogue's first barrier) and stored
      sm90::mbar_arrive(bar_kv_empty);
      store_dk_dv(sdS, sdS + Bc * HS * 2);
      // the next tile's dS^T stores go where the staging is read
      sm90::named_bar_sync(kBarEpilogue, K::MATH_THREADS);
    } else {
      store_dk_dv(sK, sV);
    }
  }
  // QUERY_HEADS: this query head's dK_j (times scale), dV_j (dk, dv: the math warps' m16n8
  // fragments, as flash::bwd_store_dk_dv takes them) summed with the kv head's other G - 1 in
  // the order g = 0 .. G - 1 (g: this head's place in its kv head's group): wait for this K/V
  // tile's turn to be g; g = 0 stores its fp32 part into p.dk_acc, p.dv_acc, the next ones add
  // theirs, the last writes the sum in bf16 into p.dk, p.dv; then the turn passes to g + 1. A
  // block waits only for one that came before it in the order (the pair before its own, same j),
  // which by then runs or has run; the sum is the same on every run.
  __device__ __forceinline__ void sum_dk_dv_heads(const float* dk, const float* dv, float scale,
                                                  int mtid) const {
    const int G = NH / p.NKV, g = blk.hq0 - kvh * G;
    int* turn = p.dkv_turn + ((size_t)b * p.NKV + kvh) * ((p.Tk + Bc - 1) / Bc) + j;
    if (mtid == 0) sm90::wait_flag_equals(turn, g);
    sm90::named_bar_sync(kBarEpilogue, K::MATH_THREADS);  // (and every warp's products are done)
    const int warp = mtid >> 5, lane = mtid & 31, r8 = lane >> 2, t4 = lane & 3;
    const size_t acc_row = (size_t)2 * p.NKV * HS, v_off = (size_t)p.NKV * HS;
#pragma unroll
    for (int nt = 0; nt < HS / 8; ++nt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int key = k0 + warp * 16 + r8 + r * 8;
        if (key >= p.Tk) continue;
        const int col = kvh * HS + nt * 8 + 2 * t4;
        float2* ak = reinterpret_cast<float2*>(p.dk_acc + ((size_t)b * p.Tk + key) * acc_row + col);
        float2* av = reinterpret_cast<float2*>(reinterpret_cast<float*>(ak) + v_off);
        float2 k2 = {dk[4 * nt + 2 * r] * scale, dk[4 * nt + 2 * r + 1] * scale},
               v2 = {dv[4 * nt + 2 * r], dv[4 * nt + 2 * r + 1]};
        if (g > 0) {  // the heads before this one (L2: written by other SMs)
          const float2 pk = __ldcg(ak), pv = __ldcg(av);
          k2 = {pk.x + k2.x, pk.y + k2.y};
          v2 = {pv.x + v2.x, pv.y + v2.y};
        }
        if (g < G - 1) {
          __stcg(ak, k2);
          __stcg(av, v2);
        } else {
          const size_t o = (size_t)b * p.dkv_bs + (size_t)key * p.dkv_ld + col;
          *reinterpret_cast<uint32_t*>(p.dk + o) = flash::pack_bf16(k2.x, k2.y);
          *reinterpret_cast<uint32_t*>(p.dv + o) = flash::pack_bf16(v2.x, v2.y);
        }
      }
    if (g < G - 1) {  // every math thread's stores, then the turn (release: they are visible)
      sm90::named_bar_sync(kBarEpilogue, K::MATH_THREADS);
      if (mtid == 0) {
        __threadfence();
        sm90::st_release_gpu(turn, g + 1);
      }
    }
  }
  // After the block's last K/V tile (steps: all its steps): take the dQ staging buffers' last
  // frees (the writer frees each buffer after every step; stage_dq waits for all but these).
  static __device__ __forceinline__ void math_finish(int wg, int steps) {
    const int c = wg - 1;
    for (int g = max(0, steps - DQS); g < steps; ++g) {
      if constexpr (K::V == BwdVariant::kDqLag)
        sm90::named_bar_sync(kBarDqEmptyWg0 + 2 * (g % DQS) + c, kDqEmptyWgThreads);
      else
        sm90::named_bar_sync(kBarDqEmpty0 + g % DQS, kDqBarThreads);
    }
  }
};

// The kernel: a producer warpgroup (loader warp, dQ writer warp) and two math warpgroups.
// MASKED: mk, the problem's mask (Bwd3Block).
template <class K, DqOrder ORDER, bool MASKED, bool PERSISTENT, bool QUERY_HEADS>
__global__ void __launch_bounds__(K::NTHREADS, 1)
    flash3_bwd_kernel(const __grid_constant__ CUtensorMap tm_q,
                      const __grid_constant__ CUtensorMap tm_k,
                      const __grid_constant__ CUtensorMap tm_v,
                      const __grid_constant__ CUtensorMap tm_do, const BwdCore p,
                      int* __restrict__ dq_sem, int* __restrict__ tile_counter, int pair_group,
                      int n_blocks, float scale_log2, float scale, const KernelMask<MASKED> mk) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, wg = warp >> 2;
  using Block = Bwd3Block<K, ORDER, MASKED, PERSISTENT, QUERY_HEADS>;
  const int pairs = Block::pairs(p), n_j = (p.Tk + K::Bc - 1) / K::Bc;
  int pair, j_tile;
  bwd_pair_group_block(blockIdx.x, pairs, n_j, pair_group, pair, j_tile);
  const uint32_t s0 = (smem_u32(smem_raw) + 1023u) & ~1023u;  // 1024-byte swizzle panels
  // every thread: a masked block finds its Q tile range with warp-wide ballots
  const Block first(p, mk, pair, j_tile, s0);
  const uint32_t slot_full = s0 + K::OFF_SLOT_FULL, slot_empty = s0 + K::OFF_SLOT_EMPTY,
                 slot = s0 + K::OFF_SLOT;
  if (tid == 0) {
    first.publish_q_range();
    // full: the loader warp's lanes (+ the TMA bytes); empty: lane 0 of each math warp, or
    // every math thread (release_stage); kv_empty: every math thread; a tile slot: the loader's
    // lane 0, then lane 0 of the writer and of each math warp (the racecheck build: every thread
    // of them, so that racecheck sees who read the slot)
    for (int s = 0; s < 2; ++s) {
      first.stages.init_stage(s, MASKED ? 64 : 32, kEveryThreadReleases ? K::MATH_THREADS : 8);
      if constexpr (Block::PERSISTENT) {
        sm90::mbar_init(slot_full + 8 * s, 1);
        sm90::mbar_init(slot_empty + 8 * s, kEveryThreadReleases ? 32 + K::MATH_THREADS : 1 + 8);
      }
    }
    sm90::mbar_init(first.bar_kv, 1);
    if constexpr (Block::PERSISTENT) sm90::mbar_init(first.bar_kv_empty, K::MATH_THREADS);
    sm90::mbar_init_fence();
  }
  __syncthreads();

  // PERSISTENT kernels (Bwd3Block): the loader warp claims K/V tiles of the order (blockIdx.x,
  // then gridDim.x + a ticket from tile_counter, or the static stride without one) and hands each
  // to the writer and math warps through two slots; a claim past n_blocks ends the block. The
  // other kernels take one tile a block. n counts a block's tiles, base their steps (the stage
  // ring and the dQ staging buffers run on across tiles).
  auto take_tiles = [&](auto&& body) {
    if constexpr (!Block::PERSISTENT) {
      body(first, 0, 0);
      return first.total;
    }
    int base = 0;
    for (int n = 0;; ++n) {
      const sm90::PipelineState<2> ts(n);
      sm90::mbar_wait(slot_full + 8 * ts.index(), ts.phase());
      const int L = flash::ld_shared_s32(slot + 4 * ts.index());
      __syncwarp();
      if (kEveryThreadReleases || lane == 0) sm90::mbar_arrive(slot_empty + 8 * ts.index());
      if (L >= n_blocks) break;
      bwd_pair_group_block(L, pairs, n_j, pair_group, pair, j_tile);
      const Block blk(p, mk, pair, j_tile, s0);
      body(blk, n, base);
      base += blk.total;
    }
    return base;
  };
  if (wg == 0) {
    sm90::setmaxnreg_dec<Block::PRODUCER_REGS>();
    if (warp == 0) {
      if (lane == 0) {
        sm90::tma_prefetch_map(&tm_q);
        sm90::tma_prefetch_map(&tm_do);
      }
      if constexpr (!Block::PERSISTENT) {
        first.load(tm_q, tm_k, tm_v, tm_do, lane, 0, 0);
      } else {
        int L = blockIdx.x, base = 0;
        for (int n = 0;; ++n) {
          const sm90::PipelineState<2> ts(n);
          if (lane == 0) {
            sm90::mbar_wait(slot_empty + 8 * ts.index(), ts.phase() ^ 1);
            flash::st_shared_u32(slot + 4 * ts.index(), L);
            sm90::mbar_arrive(slot_full + 8 * ts.index());
          }
          if (L >= n_blocks) break;
          bwd_pair_group_block(L, pairs, n_j, pair_group, pair, j_tile);
          const Block blk(p, mk, pair, j_tile, s0);
          blk.load(tm_q, tm_k, tm_v, tm_do, lane, n, base);
          base += blk.total;
          int next = 0;  // claimed once this tile's loads are issued
          if (lane == 0)
            next = tile_counter ? (int)gridDim.x + atomicAdd(tile_counter, 1) : L + (int)gridDim.x;
          L = __shfl_sync(0xffffffffu, next, 0);
        }
      }
    } else if (warp == 1) {
      take_tiles([&](const Block& blk, int, int base) { blk.dq_writer(dq_sem, lane, base); });
      if (lane == 0) sm90::bulk_wait_all();  // the adds are done before the block and its smem go
    } else if (MASKED && warp == 2) {
      first.load_doc_rows(lane);
    }
  } else {
    sm90::setmaxnreg_inc<Block::MATH_REGS>();
    const int steps = take_tiles([&](const Block& blk, int n, int base) {
      blk.math(tid, warp, lane, wg, scale_log2, scale, n, base);
    });
    Block::math_finish(wg, steps);
  }
}

namespace {

template <class K, DqOrder ORDER, bool MASKED, bool PERSISTENT, bool QUERY_HEADS>
void launch_bwd_as(const BwdProblem& p, int* dq_sem, int* tile_counter, cudaStream_t stream) {
  using Block = Bwd3Block<K, ORDER, MASKED, PERSISTENT, QUERY_HEADS>;
  constexpr int HS = K::HS, SMEM = Block::SMEM;
  static_assert(SMEM <= 227 * 1024, "shared memory per block");
  auto kernel = flash3_bwd_kernel<K, ORDER, MASKED, PERSISTENT, QUERY_HEADS>;
  allow_dynamic_smem(reinterpret_cast<const void*>(kernel), SMEM);
  if (MASKED) flash::check_problem_mask(p);
  else CHECK(!p.causal || p.Tq == p.Tk, "internal: flash3 backward: causal needs Tq == Tk");
  CHECK(QUERY_HEADS ? p.dk != nullptr && p.dk_acc != nullptr && p.dkv_turn != nullptr
                    : (p.dk != nullptr) != (p.dk_acc != nullptr),
        "internal: flash3 backward: one dK output (query-head blocks: dk, dk_acc, dkv_turn)");
  CHECK(p.query_head_blocks == QUERY_HEADS, "internal: flash3 backward: query-head blocks");
  CHECK(aligned16(p.q) && aligned16(p.k) && aligned16(p.v) && aligned16(p.dout) &&
            p.q_ld % 8 == 0 && p.kv_ld % 8 == 0 && p.do_ld % 8 == 0 && p.q_bs % 8 == 0 &&
            p.kv_bs % 8 == 0 && p.do_bs % 8 == 0,
        "flash3 backward: q, k, v, dout must be 16-byte aligned with strides of 8 elements");
  // A box = one 64-column panel of one head (sm90::make_rows_map).
  const CUtensorMap tq = sm90::make_rows_map(p.q, p.B, p.Tq, p.NH, HS, p.q_ld, p.q_bs, K::Br);
  const CUtensorMap tdo =
      sm90::make_rows_map(p.dout, p.B, p.Tq, p.NH, HS, p.do_ld, p.do_bs, K::Br);
  const CUtensorMap tk = sm90::make_rows_map(p.k, p.B, p.Tk, p.NKV, HS, p.kv_ld, p.kv_bs, K::Bc);
  const CUtensorMap tv = sm90::make_rows_map(p.v, p.B, p.Tk, p.NKV, HS, p.kv_ld, p.kv_bs, K::Bc);
  const float scale = 1.f / sqrtf((float)HS);
  const int n_j = (int)ceil_div(p.Tk, K::Bc);
  CHECK((long long)p.B * (QUERY_HEADS ? p.NH : p.NKV) * n_j < (1ll << 31),
        "flash3 backward: B x heads x T / %d too large", K::Bc);
  const int pairs = Block::pairs(p);
  // The fixed dQ order chains block j to block j - 1 of its pair: one pair's blocks of a wave
  // would wait one step more each (groups that fit one wave: HS 64 T 16K 453 -> 306 TFLOP/s on
  // an H100), so it keeps every pair in one group, where a wave holds a few blocks of each.
  const int group =
      ORDER == DqOrder::kFixed ? pairs : bwd_pair_group(pairs, n_j, cuda_num_sms());
  KernelMask<MASKED> mk;
  if constexpr (MASKED) mk = p;
  // PERSISTENT kernels (kBwdPersistent): one block per SM, each claiming K/V tiles of the
  // order from the counter after its first, blockIdx.x. The fixed order keeps the static stride
  // (blockIdx.x + k gridDim.x: a block that waits in the order for an earlier tile must not keep
  // that tile from being claimed; its order, longest tiles first over all pairs, is balanced by
  // it). A ring pair has no counter: one tile a block, as the other kernels.
  const int n_blocks = pairs * n_j;
  int* counter = PERSISTENT && ORDER == DqOrder::kArrival ? tile_counter : nullptr;
  const bool persistent = PERSISTENT && (ORDER == DqOrder::kFixed || counter != nullptr);
  const int grid = persistent ? std::min(n_blocks, cuda_num_sms()) : n_blocks;
  if (counter != nullptr) CUDA_CHECK(cudaMemsetAsync(counter, 0, sizeof(int), stream));
  kernel<<<(unsigned)grid, K::NTHREADS, SMEM, stream>>>(tq, tk, tv, tdo, p, dq_sem, counter, group,
                                                        n_blocks, scale * kLog2e, scale, mk);
  CUDA_CHECK_LAUNCH();
}

// The query-head blocks where the problem asks for them (GQA in the arrival order).
template <class K, DqOrder ORDER, bool MASKED, bool PERSISTENT>
void launch_bwd(const BwdProblem& p, int* dq_sem, int* tile_counter, cudaStream_t stream) {
  if constexpr (ORDER == DqOrder::kArrival) {
    if (p.query_head_blocks) {
      launch_bwd_as<K, ORDER, MASKED, PERSISTENT, true>(p, dq_sem, tile_counter, stream);
      return;
    }
  }
  launch_bwd_as<K, ORDER, MASKED, PERSISTENT, false>(p, dq_sem, tile_counter, stream);
}

template <int HS, BwdVariant V>
using Bwd3TileFor = Bwd3Tile<HS, flash_tiles(HS).bwd_Br, V>;

// The order by --deterministic; persistent blocks where kBwdPersistent says (the causal HS 64
// kernels). kDqFirst runs only below kBwdDqLag's T, always persistent (a ring pair's one tile a
// block); the dQ-lag kernels only in the arrival order with a tile counter (--deterministic's
// static stride read x1.000 / x0.986 at T 4K / 8K; a ring pair has no counter).
template <class K, bool MASKED>
void launch_bwd_tile(const BwdProblem& p, int* dq_sem, int* tile_counter, bool deterministic,
                     cudaStream_t stream) {
  auto go = [&](auto persistent) {
    constexpr bool P = decltype(persistent)::value;
    if (deterministic) launch_bwd<K, DqOrder::kFixed, MASKED, P>(p, dq_sem, tile_counter, stream);
    else launch_bwd<K, DqOrder::kArrival, MASKED, P>(p, dq_sem, tile_counter, stream);
  };
  constexpr bool CAN = !MASKED && K::HS == 64;
  if constexpr (CAN && K::V == BwdVariant::kDqFirst) {
    CHECK(kBwdPersistent(K::HS, p.Tq), "internal: flash3 backward: kDqFirst at T %d", p.Tq);
    go(std::true_type{});
  } else if constexpr (CAN) {
    if (!deterministic && tile_counter != nullptr && kBwdPersistent(K::HS, p.Tq))
      launch_bwd<K, DqOrder::kArrival, MASKED, true>(p, dq_sem, tile_counter, stream);
    else
      go(std::false_type{});
  } else {
    go(std::false_type{});
  }
}

template <int HS, bool MASKED>
void launch_bwd_hs(const BwdProblem& p, int* dq_sem, int* tile_counter, bool deterministic,
                   cudaStream_t stream) {
  constexpr BwdVariant V = kBwdSdpNext(HS) ? BwdVariant::kSdpNext : BwdVariant::kDqFirst;
  if constexpr (V == BwdVariant::kDqFirst) {
    if (kBwdDqLag(HS, p.Tq)) {
      using K = Bwd3TileFor<HS, BwdVariant::kDqLag>;
      launch_bwd_tile<K, MASKED>(p, dq_sem, tile_counter, deterministic, stream);
      return;
    }
  }
  launch_bwd_tile<Bwd3TileFor<HS, V>, MASKED>(p, dq_sem, tile_counter, deterministic, stream);
}
template <int HS>
void launch_bwd_hs(const BwdProblem& p, int* dq_sem, int* tile_counter, bool deterministic,
                   cudaStream_t stream) {
  if (p.mask.is_causal()) launch_bwd_hs<HS, false>(p, dq_sem, tile_counter, deterministic, stream);
  else launch_bwd_hs<HS, true>(p, dq_sem, tile_counter, deterministic, stream);
}

// dq_sem (zeroed): the fixed order's semaphores (deterministic) or the dQ tickets, dQacc not
// zeroed; null (the ring's problems): every partial adds to the zeroed accumulator.
// tile_counter: the persistent blocks' K/V tile claims (launch_bwd zeroes it); null: a ring
// pair's blocks, one K/V tile each.
void launch_bwd_any(const BwdProblem& p, int* dq_sem, int* tile_counter, bool deterministic,
                    cudaStream_t stream) {
  CHECK(dq_sem != nullptr || !deterministic, "internal: flash3 backward: fixed order, no semaphores");
  if (p.HS == 64) launch_bwd_hs<64>(p, dq_sem, tile_counter, deterministic, stream);
  else if (p.HS == 128) launch_bwd_hs<128>(p, dq_sem, tile_counter, deterministic, stream);
  else THROW_ERROR("flash3 attention backward: head size %d is not supported (64 or 128)", p.HS);
}

}  // namespace

void backward_bf16(__nv_bfloat16* dqkv, void* scratch, const __nv_bfloat16* dout,
                   const __nv_bfloat16* qkv, const __nv_bfloat16* out, const float* lse,
                   const AttnShape& s, bool deterministic, const AttnMask& mask,
                   cudaStream_t stream, BwdHeads heads) {
  // The dQ tickets (or the fixed order's semaphores) zeroed; dQacc not: the first partial of
  // each dQ tile stores (but with a mask in the fixed order, where every partial adds).
  const bool masked_fixed = deterministic && !mask.is_causal();
  flash::backward_begin(scratch, dout, out, s, stream, /*zero_semaphores=*/true,
                        /*zero_dq_accum=*/masked_fixed);
  if (masked_fixed) flash::fixed_order_start(flash::dq_semaphores(scratch, s), mask, s, stream);
  BwdProblem p = flash::whole_sequence_problem(dqkv, scratch, dout, qkv, lse, s, mask);
  // GQA (kBwdQueryHeadBlocks): blocks per query head, their dK, dV summed in turn through the
  // accumulator behind the turns (flash3_tiles.h bwd_dkv_acc_offset), the turns zeroed here.
  const bool query_heads =
      heads == BwdHeads::kByRule
          ? kBwdQueryHeadBlocks(s.NH, s.NKV, s.T, s.HS, cuda_l2_bytes(), cuda_num_sms(),
                                deterministic)
          : heads == BwdHeads::kQueryHeads;
  CHECK(!query_heads || (s.NH != s.NKV && !deterministic),
        "internal: flash3 backward: query-head blocks need GQA and the arrival order");
  if (query_heads) {
    char* base = static_cast<char*>(scratch);
    p.query_head_blocks = true;
    p.dkv_turn = reinterpret_cast<int*>(base + bwd_dkv_turn_offset(s));
    p.dk_acc = reinterpret_cast<float*>(base + bwd_dkv_acc_offset(s));
    p.dv_acc = p.dk_acc + (size_t)s.NKV * s.HS;
    CUDA_CHECK(cudaMemsetAsync(p.dkv_turn, 0, bwd_dkv_turns(s) * sizeof(int), stream));
  }
  int* tile_counter = reinterpret_cast<int*>(static_cast<char*>(scratch) + bwd_counter_offset(s));
  launch_bwd_any(p, flash::dq_semaphores(scratch, s), tile_counter, deterministic, stream);
  flash::backward_end(dqkv, scratch, s, stream);
}

void backward_problem(const BwdProblem& p, cudaStream_t stream) {
  launch_bwd_any(p, nullptr, nullptr, /*deterministic=*/false, stream);
}

}  // namespace flash3
