// flash3.cu — the "flash3" attention backend: the FlashAttention-3 forward schedule on sm_90a
// (Shah, Bikshandi, Zhang, Thakkar, Ramani, Dao 2024), and the backend class. The backward is
// flash3_bwd.cu. Tile sizes: flash3_tiles.h; limits, saved/scratch bytes, cost: its spec
// kSpec_flash3 (backends.cpp).
//
// Computes, for every (batch b, query head h, query t), causal, scale = 1/sqrt(HS):
//   out[b,t,h,:] = sum_{s<=t} softmax_s(scale q_t . k_s) v_s
//   lse[b,h,t]   = log sum_{s<=t} exp(scale q_t . k_s)            (fp32, natural log)
// reading Q, K, V in place from qkv (B, T, NH + 2*NKV, HS) through one TMA tensor map over all
// its heads (sm90::make_rows_map); query head h uses kv head h / (NH/NKV). The same kernel runs
// one ring pair of context parallelism (forward_problem, attention.cuh AttnFwdProblem: a map per
// Q, K, V when K/V came from another rank): the diagonal pair (causal) or a full pair (all Tk
// keys; the ragged last K/V tile masks keys >= Tk), its (O_blk, LSE_blk) written or merged
// exactly into the ring's fp32 running (O, LSE) (RING).
//
// Algorithm (paper notation; Br = 64 x NWG query rows per work tile, NWG consumer warpgroups:
// 3 at HS 64 (Br 192), 2 at HS 128 (Br 128); Bc = 128 keys per K/V tile). A persistent grid over
// the work tiles (i, b, h), longest first (sm90/scheduler.cuh), 1 + NWG warpgroups per block:
//   producer (fwd_load; setmaxnreg 24, one thread):
//     for each work tile: wait Q empty; TMA Q_i (completes on Q full, with the tile's index)
//       for j = Tc_i - 1 down to 0 (tiles right of the diagonal are never loaded), stage s of
//       the ring (sm90/pipeline.cuh): wait K empty[s]; TMA K_j; wait V empty[s]; TMA V_j
//   consumers (Fwd3Consumer; setmaxnreg 160 for 3, 240 for 2; warpgroup c owns rows 64 c ..):
//     for each work tile: wait Q full; m_i = -inf, l_i = 0, O_i = 0
//       mainloop: S = Q_c K_{Tc-1}^T (wgmma, both operands in smem); mask; softmax -> P
//         for each next j (the paper's Algorithm 2): issue S = Q_c K_j^T and O_i += P V_{j+1}
//           (P from registers); wait S; release K_j; mask (diagonal tiles only); online
//           softmax (online_softmax.cuh) while P V runs; wait P V; release V_{j+1}; O_i *= alpha
//         O_i += P V_0
//       HS 128 (mainloop_lazy, FlashAttention-4's lazy rescaling): after the first
//         tile, P_j = exp2(S_j - m_i) against the running max, with no pass for S_j's row max,
//         into a second P buffer; l_i += rowsum(P_j) and no rescale of O_i unless some P_j of
//         the warp exceeds 2^8 (the largest of its bf16 halves) or a row is still at m_i = -inf:
//         then the warp redoes the tile with the exact online-softmax step
//       epilogue (fwd_epilogue.cuh): O_i / l_i -> bf16 via smem, 16-byte stores of rows < T;
//         LSE_i (or the ring's merge)
//     At HS 64 the consumer warpgroups take turns, round the ring, to issue their GEMMs (named
//     barriers), so that each softmax runs under the other warpgroups' GEMMs; at HS 128 (the
//     lazy max's short softmax) the two issue freely.
// Only tiles that cross the diagonal are masked (with Br 192 the first two of a row; a
// warpgroup whose rows all precede a tile's keys computes it masked whole: P = 0).
// Masks (mask.h: documents, a sliding window; the MASKED kernels, the causal ones untouched):
// query t sees keys lo(t)..t. The producer finds each work tile's K/V tile range (mask.h
// kv_tiles_for_rows: two loads of lo; a tile the mask empties is never loaded, a ring pair's
// tile may have none) and hands it to the consumers in shared memory with the tile's index;
// each consumer thread reads lo of its two rows once per work tile and masks only the tiles
// outside the range's FULL ones (two compares an element). So a mask costs the tiles it leaves
// plus the masking of the tiles at the edges of the range.
//
// Limits: bf16; HS 64 or 128; sm_90a (wgmma, setmaxnreg); qkv and out 16-byte aligned; any
// T >= 1 up to 4M. A ring pair: rows 16-byte aligned; the static tile order (the ring passes no
// scratch for the counter; at its lengths every block runs hundreds of tiles).
//
// Tuning notes (H100 80GB HBM3, causal bf16, 16384 tokens per batch; the history and the removed
// variants: docs/notes/flash3.md):
//   - 3 consumer warpgroups at HS 64: +8..+19% forward over 2 (T 1K-64K); at HS 128 the
//     consumers' 240 registers (O 64 + S 64 + 2 x P 32 per thread) do not fit the 160 that 3 leave.
//     4 fit only with 64-key tiles (112 registers each): x0.92-0.95 at T 4K-64K (H200), 27% more
//     instructions (each tile's max, rescale and waits per 64 keys) for more warps to issue.
//     P stays in registers: staged in shared memory for an SS wgmma it read x0.89-0.91 (H200;
//     +11% instructions, shared-memory pipe 39 -> 62% busy), and with 4 warpgroups on 128-key
//     tiles (128 registers each, the whole file: a consumer thread issuing the loads) x0.80-0.88.
//   - turns between the consumer warpgroups: +5..+11% at HS 64 with 3 warpgroups. At HS 128,
//     with the lazy max, none: ncu T 16K -1.8% time (tensor pipe 88.6 -> 90.0% busy, barrier
//     stalls 0.58 -> 0.31 per instruction), timed forward +1.3..+2.8% at T 16K and 32K.
//   - the atomic-counter scheduler: +6..+12% over the static stride; head-major order once the
//     K/V of all heads outgrow L2: +2.5..+10% at HS 128 (flash3_tiles.h kv_outgrows_l2).
//   - stages: HS 128 has 2 K/V stages (Q 32 KB + 2 x 64 KB + O staging 32 KB = 192 KB of 227);
//     HS 64 has 4 (Q 24 KB + 4 x 32 KB + O 24 KB = 176 KB). A third at HS 128, in the O staging's
//     place (O stored from the registers), read no faster: ncu T 16K 1.62 ms either way. The
//     causal kernels spill nothing, the masked HS 128 ones 40-48 bytes; producer 24 registers.
//   - the lazy max at HS 128: against the exact step, ncu T 16K -2.4% time (tensor pipe 76.5 ->
//     78.7% busy) with S_j's fp32 row max taken in the exponentials' pass; then the rise tested
//     on P' instead (the largest bf16 half: 16 3-way VHMNMX a thread and tile, no FMNMX over S_j,
//     no quad reduction): -9% time, -12% instructions, tensor pipe 80.7 -> 88.5%; timed forward
//     x1.05..1.07 at T 4K/16K, x1.04 at 32K (655 TFLOP/s at 16K, 667 at 64K). The masked
//     kernels too: T 32K, HS 128, documents of 4K and a 4K window x1.07, 1K documents x1.00-1.04
//     (with the fp32 max in the pass they had been 1-3% slower than the exact step). At HS 64
//     the second P buffer does not fit 3 warpgroups' registers, and an in-place form cut 17.7%
//     of the instructions and no time (docs/notes/flash3.md); the HS 64 kernels keep a mainloop
//     of their own: sharing one moved their code and cost 2-2.6%.
//   - wgmma descriptors built once per product and stepped (HS 128): 8% fewer instructions,
//     ncu T 16K 2.6% less time (tensor pipe 78.7 -> 80.7% busy), timed +1.9..+3.5% at T 4K-64K;
//     the masked kernels, T 32K: documents of 1K / 4K and a 4K window x1.04 forward.
//     At HS 64 the same form cut 4.6% of the instructions and took 2.9% longer: built per k-step.
//   - what bounds it (ncu, T 16K; bench/results/attention-ceilings): tensor pipe, MUFU and issue
//     slots 59/61/56% busy at HS 64 (each ~500 cycles per K/V tile and scheduler), 90/44/37% at
//     HS 128: no unit's rate limits, but how much of the softmax runs under the products.
//
// Test:  ./build/test_gpu --gtest_filter='*flash3*:Flash3*:Hopper*'  (ring pairs: '*RingAttention*flash3*')
// Bench: ./build/flashgpt bench-attention --backends flash,flash3
//        python3 scripts/bench_attention.py --backends flash,flash3
#include <cfloat>

#include "kernels/attention/flash.cuh"
#include "kernels/attention/flash3.cuh"
#include "kernels/attention/flash3_tiles.h"
#include "kernels/attention/flash_common.cuh"
#include "kernels/attention/fwd_epilogue.cuh"
#include "kernels/attention/online_softmax.cuh"
#include "kernels/attention/problem_mask.cuh"
#include "kernels/attention/sm90/copy.cuh"
#include "kernels/attention/sm90/pipeline.cuh"
#include "kernels/attention/sm90/scheduler.cuh"
#include "kernels/attention/sm90/sync.cuh"
#include "kernels/attention/sm90/wgmma.cuh"

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "flash3.cu uses wgmma and setmaxnreg: build for sm_90a (GPU_ARCH=90a, the default)"
#endif

namespace flash3 {

using sm90::gmma_desc;
using sm90::gmma_desc_at;
using flash::KernelMask;
using flash::kLog2e;
using flash::ProblemMask;
using flash::pack_bf16;
using sm90::reg_fence;
using flash::smem_u32;
using sm90::wgmma_commit;
using sm90::wgmma_fence;
using sm90::wgmma_wait;

// Compile-time traits of the forward kernel (numbers from flash3_tiles.h).
template <int HS_, bool DYNAMIC_>
struct Fwd3Tile {
  static constexpr int NWG = kFwdConsumerWGs(HS_);  // consumer warpgroups, 64 query rows each
  static constexpr int HS = HS_, Br = 64 * NWG, Bc = kFwdBc;
  // K/V stages: as many as fit beside Q and the O staging (at most 4)
  static constexpr int STAGE_FIT = (227 * 1024 - 2 * Br * HS * 2 - 2048) / (2 * Bc * HS * 2);
  static constexpr int STAGES = STAGE_FIT > 4 ? 4 : STAGE_FIT;
  static constexpr bool DYNAMIC = DYNAMIC_;    // work tiles handed out by an atomic counter
  static constexpr int NTHREADS = 128 * (1 + NWG);  // producer warpgroup + the consumers
  // setmaxnreg: the producer's registers go to the consumers (65536 per SM, 1 block). Every
  // thread starts at the launch cap (65536 / NTHREADS, a multiple of 8), and setmaxnreg.inc
  // takes only registers that the block's setmaxnreg.dec released (more waits forever).
  static constexpr int LAUNCH_REGS = (65536 / NTHREADS) & ~7, PRODUCER_REGS = 24,
                       CONSUMER_REGS = LAUNCH_REGS + (((LAUNCH_REGS - PRODUCER_REGS) / NWG) & ~7);
  static_assert(STAGES >= 2, "K/V ring");
  // TMA box rows: one box shape for Q, K and V (one tensor map): a tile when Br = Bc, else
  // 64-row boxes (Br / 64 of them for Q_i, Bc / 64 for K_j and V_j).
  static constexpr int BOX = Br == Bc ? Br : 64;
  static constexpr int PANELS = HS / 64;          // 64-column (128-byte) panels per row
  static constexpr int NS = Bc / 2;               // fp32 per thread of S (64 x Bc per warpgroup)
  static constexpr int NO = HS / 2;               // fp32 per thread of O (64 x HS)
  static constexpr int KQ = HS / 16;              // k-steps of S = Q K^T
  static constexpr int KP = Bc / 16;              // k-steps of O += P V
  static constexpr int Q_PANEL = Br * 128, KV_PANEL = Bc * 128;  // bytes per panel
  static constexpr int Q_BYTES = Br * HS * 2, KV_BYTES = Bc * HS * 2, O_BYTES = Br * HS * 2;
  // smem (1024-aligned): Q | K x STAGES | V x STAGES | O staging | mbarriers
  static constexpr int OFF_K = Q_BYTES, OFF_V = OFF_K + STAGES * KV_BYTES,
                       OFF_O = OFF_V + STAGES * KV_BYTES, OFF_BAR = OFF_O + O_BYTES;
  // mbarriers (8 bytes each): Q full, Q empty, K full x STAGES, K empty x STAGES, V full x
  // STAGES, V empty x STAGES
  static constexpr int OFF_Q_FULL = OFF_BAR, OFF_Q_EMPTY = OFF_BAR + 8, OFF_K_FULL = OFF_BAR + 16,
                       OFF_K_EMPTY = OFF_K_FULL + 8 * STAGES, OFF_V_FULL = OFF_K_EMPTY + 8 * STAGES,
                       OFF_V_EMPTY = OFF_V_FULL + 8 * STAGES;
  static constexpr int NBARS = 2 + 4 * STAGES;
  static constexpr int OFF_SLOT = OFF_BAR + NBARS * 8;  // 2 ints: the work tile of each Q phase
  static constexpr int SMEM = OFF_SLOT + 8 + 1024;      // + slack to align the base
  // The masked kernels' (flash3_fwd_kernel MASKED) K/V tile range of each Q phase (Fwd3Range),
  // after the slots: SMEM + RANGE_BYTES.
  static constexpr int OFF_RANGE = OFF_SLOT + 8, RANGE_BYTES = 2 * 4 * 4;
  static constexpr int CONSUMER_WARPS = 4 * NWG;
  // Arrivals that release a stage: lane 0 of each consumer warp (every consumer thread in the
  // racecheck build: flash3.cuh kEveryThreadReleases).
  static constexpr int RELEASE_ARRIVALS =
      kEveryThreadReleases ? 32 * CONSUMER_WARPS : CONSUMER_WARPS;
  static_assert(HS == 64 || HS == 128, "head size 64 or 128");
  static_assert(Bc == 128, "S = Q K^T is one m64n128 wgmma per warpgroup per k-step");
  static_assert(NWG == 2 || (NWG == 3 && HS == 64), "2 consumer warpgroups, or 3 at HS 64 (registers)");
  static_assert(128 * (PRODUCER_REGS + NWG * CONSUMER_REGS) <= 65536, "register file");
  static_assert(NWG * (CONSUMER_REGS - LAUNCH_REGS) <= LAUNCH_REGS - PRODUCER_REGS,
                "setmaxnreg.inc beyond what the producer released");
  static_assert(Q_BYTES % 1024 == 0 && KV_BYTES % 1024 == 0, "panels on 1024-byte boundaries");
  static_assert(SMEM <= 227 * 1024, "shared memory per block");
};

// Named barrier ids (0 is __syncthreads): per consumer warpgroup (up to 3) one for the epilogue
// (1-3) and one for its turn (4-6).
constexpr int kBarEpilogue0 = 1, kBarTurn0 = 4;

// Shared memory (Fwd3Tile's offsets from the 1024-aligned base): Q_i | K_j x STAGES | V_j x
// STAGES | O staging | mbarriers | the work-tile slots.
template <class K>
struct Fwd3Smem {
  uint32_t q, k, v, o;                        // tiles: 64-column panels, 128-byte swizzle
  sm90::StageBarriers<1> q_bars;              // Q_i: one stage, a phase per work tile
  sm90::StageBarriers<K::STAGES> k_bars, v_bars;
  __device__ __forceinline__ explicit Fwd3Smem(uint32_t s0)
      : q(s0), k(s0 + K::OFF_K), v(s0 + K::OFF_V), o(s0 + K::OFF_O),
        q_bars{s0 + K::OFF_Q_FULL, s0 + K::OFF_Q_EMPTY},
        k_bars{s0 + K::OFF_K_FULL, s0 + K::OFF_K_EMPTY},
        v_bars{s0 + K::OFF_V_FULL, s0 + K::OFF_V_EMPTY} {}
  __device__ __forceinline__ uint32_t k_stage(uint32_t st) const { return k + st * K::KV_BYTES; }
  __device__ __forceinline__ uint32_t v_stage(uint32_t st) const { return v + st * K::KV_BYTES; }
};

// P (fp32 accumulator layout of S) -> bf16 A fragments of O += P V: k-step kq covers keys
// 16 kq .. +15, the accumulator's 8-column tiles 2 kq and 2 kq + 1.
template <int NS>
__device__ __forceinline__ void pack_p(uint32_t (&p)[NS / 8][4], const float (&s)[NS]) {
#pragma unroll
  for (int kq = 0; kq < NS / 8; ++kq) {
    p[kq][0] = pack_bf16(s[8 * kq + 0], s[8 * kq + 1]);
    p[kq][1] = pack_bf16(s[8 * kq + 2], s[8 * kq + 3]);
    p[kq][2] = pack_bf16(s[8 * kq + 4], s[8 * kq + 5]);
    p[kq][3] = pack_bf16(s[8 * kq + 6], s[8 * kq + 7]);
  }
}

// What the kernel writes and how its rows line up (AttnFwdProblem less the inputs, which come
// in through the tensor maps). causal: key s visible to query t iff s <= t (Tq == Tk); else all
// Tk keys (a ring pair). Output: bf16 `out`, or (RING) the ring's fp32 running O `o_run`,
// overwritten or merged through the LSE.
struct Fwd3Args {
  __nv_bfloat16* out;
  float* o_run;
  size_t o_ld, o_bs;  // row t, head h of batch b at out/o_run + b*o_bs + t*o_ld + h*HS
  float* lse;         // (B, NH, lse_T)
  size_t lse_T;
  int* tile_counter;  // DYNAMIC only
  int k_head0, v_head0;  // the first K and V head in tm_k, tm_v (Q's is 0)
  int B, Tq, Tk, NH, NKV;
  float scale_log2, scale;
  int head_major, causal, merge;
};

// A work tile's K/V tiles under a mask (MASKED): j_end - n_kv .. j_end - 1, visited right to
// left, those in [full_begin, full_end) FULL (mask.h kv_tiles_for_rows; n_kv may be 0 in a ring
// pair). The producer finds it and hands it to the consumers beside the tile's index.
struct Fwd3Range {
  int j_end, n_kv, full_begin, full_end;
};

// ---- producer: one thread issues every TMA load ----
// Per work tile: Q_i once (its stage freed when the consumers' last S of the tile is done), then
// K_j, V_j for j = n_kv - 1 down to 0 into the ring of stages. The tile's index goes to the
// consumers in tile_slot[phase] with Q_i's full phase (n_work: no more work).
// MASKED: the K/V tiles of the mask's range (Fwd3Range, in range_slot[phase]); no Q_i load
// when it is empty.
template <class K, bool MASKED>
__device__ __forceinline__ void fwd_load(const Fwd3Smem<K>& sm, volatile int* tile_slot,
                                         const FwdScheduler<K::Br, K::Bc>& sched,
                                         const CUtensorMap& tm_q, const CUtensorMap& tm_k,
                                         const CUtensorMap& tm_v, const Fwd3Args& a,
                                         const KernelMask<MASKED>& mk) {
  constexpr int Br = K::Br, Bc = K::Bc, PANELS = K::PANELS;
  sm90::tma_prefetch_map(&tm_q);
  sm90::tma_prefetch_map(&tm_k);
  sm90::tma_prefetch_map(&tm_v);
  sm90::PipelineState<K::STAGES> kv;
  sm90::PipelineState<1> qs;
  for (int w = sched.first();; qs.advance()) {
    // MASKED: the work tile's K/V range, found before the wait for Q_i's stage, so that its two
    // loads of lo overlap the wait
    [[maybe_unused]] TileRange r{};
    if constexpr (MASKED) {
      if (w < sched.n_work) {
        const FwdWork t = sched.work(w);
        r = ProblemMask(mk, t.b, a.Tq, a.Tk).kv_tiles(t.q0, t.q0 + Br - 1, Bc);
      }
    }
    sm.q_bars.producer_acquire(qs);
    tile_slot[qs.phase()] = min(w, sched.n_work);
    if (w >= sched.n_work) {
      sm.q_bars.producer_commit(qs);  // tells the consumers to stop
      break;
    }
    FwdWork t = sched.work(w);
    [[maybe_unused]] int j_end;
    if constexpr (MASKED) {
      volatile int* slot = tile_slot + (K::OFF_RANGE - K::OFF_SLOT) / 4 + 4 * qs.phase();
      slot[0] = j_end = r.end;
      slot[1] = t.n_kv = r.end - r.begin;
      slot[2] = r.full_begin;
      slot[3] = r.full_end;
      if (t.n_kv == 0) {  // no K/V tile: the consumers need no Q_i either
        sm.q_bars.producer_commit(qs);
        w = sched.template next<K::DYNAMIC>(w, a.tile_counter);
        continue;
      }
    }
    sm.q_bars.producer_expect(qs, K::Q_BYTES);
    sm90::tma_load_rows<Br, PANELS, K::BOX>(sm.q, &tm_q, sm.q_bars.full_bar(0), t.h, t.q0, t.b);
    for (int jj = 0; jj < t.n_kv; ++jj, kv.advance()) {
      const int j = (MASKED ? j_end : t.n_kv) - 1 - jj;
      sm.k_bars.producer_acquire(kv);
      sm.k_bars.producer_expect(kv, K::KV_BYTES);
      sm90::tma_load_rows<Bc, PANELS, K::BOX>(sm.k_stage(kv.index()), &tm_k,
                                              sm.k_bars.full_bar(kv.index()), a.k_head0 + t.kvh,
                                              j * Bc, t.b);
      sm.v_bars.producer_acquire(kv);
      sm.v_bars.producer_expect(kv, K::KV_BYTES);
      sm90::tma_load_rows<Bc, PANELS, K::BOX>(sm.v_stage(kv.index()), &tm_v,
                                              sm.v_bars.full_bar(kv.index()), a.v_head0 + t.kvh,
                                              j * Bc, t.b);
    }
    w = sched.template next<K::DYNAMIC>(w, a.tile_counter);
  }
}

// MASKED: a work tile's K/V tiles (Fwd3Range) and the keys lo[r] .. hi[r] (local key indices,
// problem_mask.cuh) of this consumer thread's two rows.
struct Fwd3RowMask {
  Fwd3Range r;
  int lo[2], hi[2];
};

// ---- a consumer warpgroup: query rows 64 c .. 64 c + 63 of each work tile ----
template <class K, bool RING, bool MASKED>
struct Fwd3Consumer {
  static constexpr int NS = K::NS, NO = K::NO, KQ = K::KQ, KP = K::KP;
  // The exponentials against each row's running max, with no pass for the tile's row max first
  // (softmax_lazy, mainloop_lazy): the HS 128 kernels, causal and masked. At HS 64 the second P
  // buffer does not fit (see the tuning notes).
  static constexpr bool LAZY_MAX = K::HS == 128;
  // The operands' wgmma descriptors: built once per product and stepped by each k-step's offset
  // (gmma_desc_at) in the HS 128 kernels, built per k-step at HS 64 (the tuning notes).
  static constexpr bool STEPPED_DESC = K::HS == 128;
  // Turns (turn_begin / turn_end) at HS 64 only; the HS 128 warpgroups issue freely (the tuning
  // notes).
  static constexpr bool TURNS = !LAZY_MAX;
  const Fwd3Smem<K>& sm;
  int c, wq, g, t4, ctid;
  uint32_t aQ;                       // this warpgroup's rows in each Q panel
  int bar_turn_mine, bar_turn_next;  // turns go round: c waits for c - 1's, hands over to c + 1

  __device__ __forceinline__ Fwd3Consumer(const Fwd3Smem<K>& sm_, int wg, int warp, int lane, int tid)
      : sm(sm_), c(wg - 1), wq(warp & 3), g(lane >> 2), t4(lane & 3), ctid(tid - 128 * wg),
        aQ(sm_.q + c * 64 * 128), bar_turn_mine(kBarTurn0 + c),
        bar_turn_next(kBarTurn0 + (c + 1) % K::NWG) {}

  // TURNS: the consumer warpgroups take turns, round the ring, to issue their GEMMs, so that
  // one's softmax runs under the others' GEMMs.
  __device__ __forceinline__ void turn_begin() const {
    if constexpr (TURNS) sm90::named_bar_sync(bar_turn_mine, 256);
  }
  __device__ __forceinline__ void turn_end() const {
    if constexpr (TURNS) sm90::named_bar_arrive(bar_turn_next, 256);
  }
  // Lane 0 of each consumer warp releases a stage (K::RELEASE_ARRIVALS arrivals); the other
  // lanes' reads of it (wgmma operands, the work-tile slot) precede it through the warp's
  // .sync.aligned wgmma and waits.
  template <int STAGES, class Use>
  __device__ __forceinline__ void release(const sm90::StageBarriers<STAGES>& bars, const Use& s,
                                          int lane) const {
    if (kEveryThreadReleases || lane == 0) bars.consumer_release(s);
  }
  // S = Q_c K^T from K stage st (k-steps over the head dim; the first overwrites S).
  __device__ __forceinline__ void issue_s(float (&s)[NS], uint32_t st) const {
    reg_fence(s);
    wgmma_fence();
    if constexpr (STEPPED_DESC) {
      const uint64_t dq = gmma_desc(aQ, 16, 1024);
      const uint64_t dk = gmma_desc(sm.k + st * K::KV_BYTES, 16, 1024);
#pragma unroll
      for (int kk = 0; kk < KQ; ++kk) {
        const uint32_t off_q = (kk / 4) * K::Q_PANEL + (kk % 4) * 32;
        const uint32_t off_k = (kk / 4) * K::KV_PANEL + (kk % 4) * 32;
        sm90::wgmma_ss<0, 0>(s, gmma_desc_at(dq, off_q), gmma_desc_at(dk, off_k), kk > 0 ? 1 : 0);
      }
    } else {
#pragma unroll
      for (int kk = 0; kk < KQ; ++kk) {
        const uint32_t off_q = (kk / 4) * K::Q_PANEL + (kk % 4) * 32;
        const uint32_t off_k = st * K::KV_BYTES + (kk / 4) * K::KV_PANEL + (kk % 4) * 32;
        sm90::wgmma_ss<0, 0>(s, gmma_desc(aQ + off_q, 16, 1024),
                             gmma_desc(sm.k + off_k, 16, 1024), kk > 0 ? 1 : 0);
      }
    }
    wgmma_commit();
  }
  // O += P V from V stage st (V is MN-major: rows = keys = the k dimension).
  __device__ __forceinline__ void issue_pv(float (&o)[NO], uint32_t (&p)[KP][4], uint32_t st) const {
    reg_fence(o);
    reg_fence(p);
    wgmma_fence();
    if constexpr (STEPPED_DESC) {
      const uint64_t dv = gmma_desc(sm.v_stage(st), K::KV_PANEL, 1024);
#pragma unroll
      for (int kq = 0; kq < KP; ++kq) sm90::wgmma_rs<1>(o, p[kq], gmma_desc_at(dv, kq * 2048));
    } else {
#pragma unroll
      for (int kq = 0; kq < KP; ++kq)
        sm90::wgmma_rs<1>(o, p[kq], gmma_desc(sm.v_stage(st) + kq * 2048, K::KV_PANEL, 1024));
    }
    wgmma_commit();
  }
  // S[r, key] = -inf where key > query (causal: diagonal tiles only), or where key >= Tk (a full
  // pair: its ragged last tile only; TMA reads those keys as zeros, not -inf).
  __device__ __forceinline__ void mask(float (&s)[NS], int j, int q0, int row0, bool causal,
                                       int Tk) const {
    constexpr int Bc = K::Bc;
    if (causal ? j * Bc + Bc - 1 > q0 + c * 64 : j * Bc + Bc > Tk) {
#pragma unroll
      for (int n = 0; n < NS / 4; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = j * Bc + n * 8 + 2 * t4 + (e & 1);
          if (causal ? key > row0 + (e >> 1) * 8 : key >= Tk) s[4 * n + e] = -INFINITY;
        }
    }
  }
  // MASKED: the work tile's K/V range (from the producer's range_slot) and this thread's rows.
  __device__ __forceinline__ Fwd3RowMask row_mask(const volatile int* range_slot, const FwdWork& t,
                                                  const AttnProblemMask& mk, int Tq, int Tk) const {
    Fwd3RowMask rm;
    rm.r = Fwd3Range{range_slot[0], range_slot[1], range_slot[2], range_slot[3]};
    const ProblemMask pm(mk, t.b, Tq, Tk);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = t.q0 + c * 64 + wq * 16 + g + 8 * r;
      rm.lo[r] = pm.lo_key(row);
      rm.hi[r] = min(row + pm.q_pos0 - pm.k_pos0, Tk - 1);
    }
    return rm;
  }
  // MASKED: S[r, key] = -inf outside the row's keys lo .. hi, in tiles that are not FULL.
  __device__ __forceinline__ void mask_rows(float (&s)[NS], int j, const Fwd3RowMask& rm) const {
    if (j >= rm.r.full_begin && j < rm.r.full_end) return;
#pragma unroll
    for (int n = 0; n < NS / 4; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = j * K::Bc + n * 8 + 2 * t4 + (e & 1);
        if (key < rm.lo[e >> 1] || key > rm.hi[e >> 1]) s[4 * n + e] = -INFINITY;
      }
  }
  // The online softmax (online_softmax.cuh) of this thread's two rows; alpha rescales O_i.
  __device__ __forceinline__ void softmax(float (&s)[NS], float (&m_i)[2], float (&l_i)[2],
                                          float (&alpha)[2], float scale_log2) const {
#pragma unroll
    for (int r = 0; r < 2; ++r)
      alpha[r] = flash::online_softmax_row<NS / 4>(
          [&](int n, int e) -> float& { return s[4 * n + e]; }, r, m_i[r], l_i[r], scale_log2);
  }

  // O_i *= alpha, row by row (after its P V).
  __device__ __forceinline__ void rescale_o(float (&o)[NO], const float (&alpha)[2]) const {
#pragma unroll
    for (int n = 0; n < NO / 4; ++n) {
      o[4 * n + 0] *= alpha[0];
      o[4 * n + 1] *= alpha[0];
      o[4 * n + 2] *= alpha[1];
      o[4 * n + 3] *= alpha[1];
    }
  }
  // LAZY_MAX: the exponentials of S_j against each row's running max m_i from the earlier tiles,
  // with no pass for S_j's row max first, into P' (bf16, the next P V's A) with their row sums
  // rs; S_j is left as it is. P' may exceed 1 where S_j holds a larger score. Returns false when
  // every row of the warp may keep its m_i: no P' above 2^kLazyRise (then no row's max rose by
  // more than kLazyRise log2 units: l_i += rs, and O_i needs no rescale), and no row still at
  // m_i = -inf (it exponentiated against 0). Otherwise the caller redoes the tile with the exact
  // online softmax from S_j. The test is on P' itself, the largest of its bf16 halves (3 halves
  // an instruction, and no quad reduction: the decision is the warp's), not on S_j's fp32 max
  // (2 FMNMX a pair, then the quad's).
  static constexpr int kLazyRise = 8;
  static constexpr uint32_t kLazyLimitBf16 = (127u + kLazyRise) << 7;  // 2^kLazyRise in bf16
  __device__ __forceinline__ bool softmax_lazy(const float (&s)[NS], uint32_t (&p)[KP][4],
                                               const float (&m_i)[2], float (&rs)[2],
                                               float scale_log2) const {
    bool move = false;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float ref = m_i[r] == -INFINITY ? 0.f : m_i[r] * scale_log2;
      float sum = 0.f;
#pragma unroll
      for (int n = 0; n < NS / 4; ++n) {  // 8-column tile n: pack_p's p[n / 2][2 (n % 2) + r]
        const float p0 = flash::fast_exp2(fmaf(s[4 * n + 2 * r], scale_log2, -ref));
        const float p1 = flash::fast_exp2(fmaf(s[4 * n + 2 * r + 1], scale_log2, -ref));
        p[n / 2][2 * (n % 2) + r] = flash::pack_bf16(p0, p1);
        sum += p0 + p1;
      }
      rs[r] = sum;
      move |= m_i[r] == -INFINITY;
    }
    uint32_t p_max = 0u;  // bf16x2; P' >= +0
#pragma unroll
    for (int w = 0; w < 4 * KP; ++w) p_max = flash::max_bf16x2(p_max, p[w / 4][w % 4]);
    move |= (p_max & 0xffffu) > kLazyLimitBf16 || (p_max >> 16) > kLazyLimitBf16;
    return __any_sync(0xffffffffu, move);
  }

  // A work tile's K/V tiles and this thread's rows.
  struct TileKV {
    int q0, n_kv;
    int j_end;  // one past the first (rightmost) K/V tile
    int row0;   // this thread's rows: row0, row0 + 8
  };
  __device__ __forceinline__ TileKV tile_kv(const FwdWork& t, const Fwd3RowMask& rm) const {
    const int n_kv = MASKED ? rm.r.n_kv : t.n_kv;
    return {t.q0, n_kv, MASKED ? rm.r.j_end : n_kv, t.q0 + c * 64 + wq * 16 + g};
  }

  // K/V tile j = j_end - 1 - jj after the first: S_j issued with P V_{j+1} (P_{j+1} from p_in),
  // S_j waited for, K_j's stage (and after the last S, Q_i's) released, S_j masked.
  __device__ __forceinline__ void tile_start(float (&o)[NO], float (&s)[NS],
                                             uint32_t (&p_in)[KP][4],
                                             const sm90::PipelineState<K::STAGES>& kv,
                                             sm90::StageSlot prev, const sm90::PipelineState<1>& qs,
                                             int jj, const TileKV& r, bool causal, int Tk, int lane,
                                             const Fwd3RowMask& rm) const {
    const int j = r.j_end - 1 - jj;
    sm.k_bars.consumer_wait(kv);
    sm.v_bars.consumer_wait(prev);
    turn_begin();
    issue_s(s, kv.index());
    issue_pv(o, p_in, prev.index());
    turn_end();
    wgmma_wait<1>();  // S_j
    reg_fence(s);
    release(sm.k_bars, kv, lane);
    if (jj == r.n_kv - 1) release(sm.q_bars, qs, lane);
    if constexpr (MASKED) mask_rows(s, j, rm);
    else mask(s, j, r.q0, r.row0, causal, Tk);
  }
  // P V_{j+1} (or the last P V) complete, its V stage released.
  __device__ __forceinline__ void pv_done(float (&o)[NO], sm90::StageSlot prev, int lane) const {
    wgmma_wait<0>();
    reg_fence(o);
    release(sm.v_bars, prev, lane);
  }
  // The last P V, of P_0 (in p_last).
  __device__ __forceinline__ void last_pv(float (&o)[NO], uint32_t (&p_last)[KP][4],
                                          sm90::StageSlot prev, int lane) const {
    sm.v_bars.consumer_wait(prev);
    turn_begin();
    issue_pv(o, p_last, prev.index());
    turn_end();
    pv_done(o, prev, lane);
  }

  // A work tile's start: O_i = 0, then its first (diagonal) K/V tile: S, softmax, P; prev = its
  // stage (V_j's, released after the next P V), kv advanced. False when the mask leaves it no
  // K/V tile (MASKED; Q_i's phase released at once).
  __device__ __forceinline__ bool first_tile(float (&o)[NO], float (&s)[NS], float (&m_i)[2],
                                             float (&l_i)[2], float (&alpha)[2], uint32_t (&p)[KP][4],
                                             sm90::PipelineState<K::STAGES>& kv,
                                             sm90::StageSlot& prev,
                                             const sm90::PipelineState<1>& qs, const TileKV& r,
                                             bool causal, int Tk, float scale_log2, int lane,
                                             const Fwd3RowMask& rm) const {
    const int n_kv = r.n_kv;
#pragma unroll
    for (int n = 0; n < NO; ++n) o[n] = 0.f;
    if constexpr (MASKED) {
      if (n_kv == 0) {  // the producer loaded no Q_i: release its phase at once
        release(sm.q_bars, qs, lane);
        return false;
      }
    }
    sm.k_bars.consumer_wait(kv);
    turn_begin();
    issue_s(s, kv.index());
    turn_end();
    wgmma_wait<0>();
    reg_fence(s);
    release(sm.k_bars, kv, lane);
    if (n_kv == 1) release(sm.q_bars, qs, lane);
    if constexpr (MASKED) mask_rows(s, r.j_end - 1, rm);
    else mask(s, n_kv - 1, r.q0, r.row0, causal, Tk);
    softmax(s, m_i, l_i, alpha, scale_log2);
    pack_p(p, s);
    prev = kv.slot();
    kv.advance();
    return true;
  }

  // ---- mainloop: O_i, m_i, l_i of one work tile (the paper's Algorithm 2: S_j is issued with
  // P V_{j+1}, the softmax of S_j runs while P V_{j+1} does) ----
  // MASKED: over the K/V tiles of rm.r (none: O_i = 0, m_i = -inf), masked by mask_rows.
  __device__ __forceinline__ void mainloop(float (&o)[NO], float (&s)[NS], float (&m_i)[2], float (&l_i)[2], float (&alpha)[2], uint32_t (&p)[KP][4],
                                           const FwdWork& t, sm90::PipelineState<K::STAGES>& kv,
                                           const sm90::PipelineState<1>& qs, bool causal, int Tk,
                                           float scale_log2, int lane,
                                           const Fwd3RowMask& rm) const {
    const TileKV r = tile_kv(t, rm);
    const int n_kv = r.n_kv;
    sm90::StageSlot prev;  // V_{j+1}'s stage, released after the next P V
    if (!first_tile(o, s, m_i, l_i, alpha, p, kv, prev, qs, r, causal, Tk, scale_log2, lane, rm))
      return;
    // ---- the other tiles, right to left: S_j overlaps P V_{j+1}, softmax overlaps P V ----
    for (int jj = 1; jj < n_kv; ++jj, kv.advance()) {
      tile_start(o, s, p, kv, prev, qs, jj, r, causal, Tk, lane, rm);
      softmax(s, m_i, l_i, alpha, scale_log2);
      pv_done(o, prev, lane);
      rescale_o(o, alpha);
      pack_p(p, s);
      prev = kv.slot();
    }
    last_pv(o, p, prev, lane);
  }

  // ---- mainloop with LAZY_MAX (HS 128): mainloop's schedule, the tiles after the first made by
  // softmax_lazy into a second P buffer (P_j while P V_{j+1} still reads the other), the exact
  // online-softmax step from S_j where a row's max rose. A loop of its own, sharing mainloop's
  // pieces (tile_start, pv_done, last_pv): one loop for both moved the HS 64 kernels' code
  // (2-2.6% slower in the same run). ----
  __device__ __forceinline__ void mainloop_lazy(float (&o)[NO], float (&s)[NS], float (&m_i)[2], float (&l_i)[2], float (&alpha)[2], uint32_t (&p)[KP][4],
                                           const FwdWork& t, sm90::PipelineState<K::STAGES>& kv,
                                           const sm90::PipelineState<1>& qs, bool causal, int Tk,
                                           float scale_log2, int lane,
                                           const Fwd3RowMask& rm) const {
    const TileKV r = tile_kv(t, rm);
    const int n_kv = r.n_kv;
    sm90::StageSlot prev;  // V_{j+1}'s stage, released after the next P V
    if (!first_tile(o, s, m_i, l_i, alpha, p, kv, prev, qs, r, causal, Tk, scale_log2, lane, rm))
      return;
    // ---- the other tiles, right to left: S_j overlaps P V_{j+1}, softmax overlaps P V ----
    auto tile = [&](int jj, uint32_t (&p_in)[KP][4], uint32_t (&p_out)[KP][4]) {
      tile_start(o, s, p_in, kv, prev, qs, jj, r, causal, Tk, lane, rm);
      float rs[2];
      const bool move = softmax_lazy(s, p_out, m_i, rs, scale_log2);
      if (move) {
        softmax(s, m_i, l_i, alpha, scale_log2);
        pack_p(p_out, s);
      } else {
        l_i[0] += rs[0];
        l_i[1] += rs[1];
      }
      pv_done(o, prev, lane);
      if (move) rescale_o(o, alpha);
      prev = kv.slot();
      kv.advance();
    };
    // P alternates between p and p2, two tiles a turn of the loop. (Copying one into the other
    // instead, once after an odd count, let ptxas merge the two and serialize every wgmma:
    // C7513.)
    uint32_t p2[KP][4];
    int jj = 1;
    for (; jj + 1 < n_kv; jj += 2) {
      tile(jj, p, p2);
      tile(jj + 1, p2, p);
    }
    if (jj < n_kv) {
      tile(jj, p, p2);
      last_pv(o, p2, prev, lane);
    } else {
      last_pv(o, p, prev, lane);
    }
  }

  // ---- epilogue (fwd_epilogue.cuh): O_i / l_i, LSE_i ----
  __device__ __forceinline__ void epilogue(const float (&o)[NO], const float (&m_i)[2],
                                           const float (&l_i)[2], const FwdWork& t,
                                           const Fwd3Args& a, int Tq) const {
    constexpr int HS = K::HS, Br = K::Br;
    const int b = t.b, h = t.h, q0 = t.q0;
    float* lse_bh = a.lse + ((size_t)b * a.NH + h) * a.lse_T;
    auto frag = [&](int n, int e) { return o[4 * n + e]; };
    if constexpr (RING) {
      // the ring's running (O, LSE), overwritten or merged (fwd_epilogue.cuh's merge). Each
      // row's LSE is read by the 4 threads of its quad and written by one: a __syncwarp that every
      // lane reaches splits the reads from the write. fp32 straight from the registers (8-byte
      // stores; the merge reads the old rows anyway).
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float l = flash::quad_sum(l_i[r]);
        const float inv = flash::inv_row_sum(l);
        const int row = q0 + c * 64 + wq * 16 + g + 8 * r;
        const bool ok = row >= 0 && row < Tq;
        const flash::RingMerge w = flash::ring_merge_weights(
            flash::row_lse(l, m_i[r], a.scale), lse_bh + (ok ? row : 0), a.merge && ok);
        __syncwarp();
        if (ok) {
          if (t4 == 0) lse_bh[row] = w.lse;
          float* orow = a.o_run + (size_t)b * a.o_bs + (size_t)row * a.o_ld + (size_t)h * HS;
#pragma unroll
          for (int n = 0; n < NO / 4; ++n)  // 8-column tile n
            flash::ring_merge_o2(orow + n * 8 + 2 * t4, o[4 * n + 2 * r], o[4 * n + 2 * r + 1],
                                 inv, w, a.merge);
        }
      }
    } else {
      // bf16 O_i staged in this warpgroup's rows of sO (64-column panels), then 16-byte stores
      const int bar_epi = kBarEpilogue0 + c;
      sm90::named_bar_sync(bar_epi, 128);  // the last tile's reads of sO are done
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int rl = c * 64 + wq * 16 + g + 8 * r;  // tile-local row
        flash::epilogue_stage_row<NO / 4>(
            frag, r, l_i[r], m_i[r], a.scale,
            [&](auto lse) {
              if (t4 == 0 && q0 + rl >= 0 && q0 + rl < Tq) lse_bh[q0 + rl] = lse();
            },
            // 8-column tile n: panel n / 8, chunk n % 8
            [&](int n) {
              return sm.o + (n >> 3) * K::Q_PANEL + rl * 128 + (((n & 7) ^ (rl & 7)) << 4);
            },
            t4);
      }
      sm90::named_bar_sync(bar_epi, 128);
      __nv_bfloat16* gO = a.out + (size_t)b * a.o_bs + (size_t)h * HS;  // row 0
      flash::epilogue_store_rows<64, HS / 8, 128>(
          ctid, c * 64, [&](int rl, int ch) { return sm.o + flash::pswz<Br>(rl, ch); },
          [&](int rl) { return gO + (size_t)(q0 + rl) * a.o_ld; },
          [&](int rl) { return !(q0 + rl < 0 || q0 + rl >= Tq); });
    }
  }
};

// The kernel: a producer warpgroup (fwd_load) and K::NWG consumer warpgroups (Fwd3Consumer)
// over the work tiles of the scheduler (sm90/scheduler.cuh), a ring of K/V stages between them.
// MASKED: the problem's mask mk (problem_mask.cuh) in place of causal; the producer hands each
// work tile's K/V range to the consumers in smem after the tile slots (K::OFF_RANGE).
template <class K, bool RING, bool MASKED>
__global__ void __launch_bounds__(K::NTHREADS, 1)
    flash3_fwd_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                      const __grid_constant__ CUtensorMap tm_v, const Fwd3Args a,
                      const KernelMask<MASKED> mk) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t s0 = (smem_u32(smem_raw) + 1023u) & ~1023u;  // 128-byte swizzle: 1024-B panels
  const Fwd3Smem<K> sm(s0);
  // The work tile of each Q_full phase, written by the producer before it arrives (n_work = no
  // more work); read by the consumers after their wait.
  volatile int* tile_slot = reinterpret_cast<volatile int*>(smem_raw + (s0 + K::OFF_SLOT - smem_u32(smem_raw)));
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, wg = warp >> 2;
  const bool causal = RING ? a.causal != 0 : true;  // the whole-sequence forward is causal
  const FwdScheduler<K::Br, K::Bc> sched(a.B, a.NH, a.NKV, a.Tq, a.Tk, a.head_major, causal);

  if (tid == 0) {
    sm.q_bars.init_stage(0, 1, K::RELEASE_ARRIVALS);
    for (int st = 0; st < K::STAGES; ++st) {
      sm90::mbar_init(sm.k_bars.full_bar(st), 1);
      sm90::mbar_init(sm.v_bars.full_bar(st), 1);
      sm90::mbar_init(sm.k_bars.empty_bar(st), K::RELEASE_ARRIVALS);
      sm90::mbar_init(sm.v_bars.empty_bar(st), K::RELEASE_ARRIVALS);
    }
    sm90::mbar_init_fence();
  }
  __syncthreads();

  if (wg == 0) {
    sm90::setmaxnreg_dec<K::PRODUCER_REGS>();
    if (warp == 0 && lane == 0) fwd_load<K, MASKED>(sm, tile_slot, sched, tm_q, tm_k, tm_v, a, mk);
  } else {
    sm90::setmaxnreg_inc<K::CONSUMER_REGS>();
    using Consumer = Fwd3Consumer<K, RING, MASKED>;
    const Consumer cons(sm, wg, warp, lane, tid);
    // warpgroup 0 issues first
    if (Consumer::TURNS && cons.c == K::NWG - 1) sm90::named_bar_arrive(kBarTurn0, 256);
    sm90::PipelineState<K::STAGES> kv;
    for (sm90::PipelineState<1> qs;; qs.advance()) {
      sm.q_bars.consumer_wait(qs);
      const int w = tile_slot[qs.phase()];
      if (w >= sched.n_work) break;
      const FwdWork t = sched.work(w);
      [[maybe_unused]] Fwd3RowMask rm;
      if constexpr (MASKED)
        rm = cons.row_mask(tile_slot + (K::OFF_RANGE - K::OFF_SLOT) / 4 + 4 * qs.phase(), t, mk,
                           a.Tq, a.Tk);
      float o[K::NO], s[K::NS], m_i[2] = {-INFINITY, -INFINITY}, l_i[2] = {0.f, 0.f}, alpha[2];
      uint32_t p[K::KP][4];
      if constexpr (Consumer::LAZY_MAX)
        cons.mainloop_lazy(o, s, m_i, l_i, alpha, p, t, kv, qs, causal, a.Tk, a.scale_log2, lane, rm);
      else
        cons.mainloop(o, s, m_i, l_i, alpha, p, t, kv, qs, causal, a.Tk, a.scale_log2, lane, rm);
      cons.epilogue(o, m_i, l_i, t, a, a.Tq);
    }
    // the last warpgroup's last turn_end
    if (Consumer::TURNS && cons.c == 0) sm90::named_bar_sync(kBarTurn0, 256);
  }
}

namespace {

// Head-major work order for this shape: when the K and V of all (sequence, kv head) pairs
// outgrow the L2 cache (flash3_tiles.h kv_outgrows_l2).
bool use_head_major(const AttnFwdProblem& p) {
  return kv_outgrows_l2(p.B, p.NKV, p.Tk, p.HS, cuda_l2_bytes());
}

// tile_counter: the dynamic scheduler's counter (K::DYNAMIC), else unused.
template <class K, bool RING, bool MASKED>
void launch_fwd(const AttnFwdProblem& p, int* tile_counter, cudaStream_t stream) {
  constexpr int smem = K::SMEM + (MASKED ? K::RANGE_BYTES : 0);
  static_assert(smem <= 227 * 1024, "shared memory per block");
  allow_dynamic_smem(reinterpret_cast<const void*>(flash3_fwd_kernel<K, RING, MASKED>), smem);
  // Q, K and V as the heads of one qkv (the whole sequence; the ring's own chunks): one map over
  // all NH + 2 NKV heads, K and V at head offsets. Encoding a map is host time on every launch
  // (~10 us, measured: three maps cost the 4K forward 2-4% in bench-attention), so the common
  // case encodes one. Else (K/V from another rank's block) a map per tensor.
  const bool one_qkv = p.Tq == p.Tk && p.k == p.q + (size_t)p.NH * p.HS &&
                       p.v == p.k + (size_t)p.NKV * p.HS && p.kv_ld == p.q_ld && p.kv_bs == p.q_bs;
  CUtensorMap tm_q, tm_k, tm_v;
  if (one_qkv) {
    tm_q = tm_k = tm_v =
        sm90::make_rows_map(p.q, p.B, p.Tq, p.NH + 2 * p.NKV, p.HS, p.q_ld, p.q_bs, K::BOX);
  } else {
    tm_q = sm90::make_rows_map(p.q, p.B, p.Tq, p.NH, p.HS, p.q_ld, p.q_bs, K::BOX);
    tm_k = sm90::make_rows_map(p.k, p.B, p.Tk, p.NKV, p.HS, p.kv_ld, p.kv_bs, K::BOX);
    tm_v = sm90::make_rows_map(p.v, p.B, p.Tk, p.NKV, p.HS, p.kv_ld, p.kv_bs, K::BOX);
  }
  const int n_work = ceil_div(p.Tq, K::Br) * p.B * p.NH;
  const int grid = std::min(n_work, cuda_num_sms());
  const float scale = 1.f / sqrtf((float)p.HS);
  const Fwd3Args a{p.out, p.o_run, p.o_ld, p.o_bs, p.lse, p.lse_T, tile_counter,
                   /*k_head0=*/one_qkv ? p.NH : 0, /*v_head0=*/one_qkv ? p.NH + p.NKV : 0,
                   p.B, p.Tq, p.Tk, p.NH, p.NKV, scale * kLog2e, scale,
                   /*head_major=*/use_head_major(p) ? 1 : 0, p.causal ? 1 : 0, p.merge ? 1 : 0};
  if (K::DYNAMIC) CUDA_CHECK(cudaMemsetAsync(tile_counter, 0, sizeof(int), stream));
  KernelMask<MASKED> mk;
  if constexpr (MASKED) mk = p;
  flash3_fwd_kernel<K, RING, MASKED><<<grid, K::NTHREADS, smem, stream>>>(tm_q, tm_k, tm_v, a, mk);
  CUDA_CHECK_LAUNCH();
}

template <int HS, bool MASKED>
void launch_fwd_hs(const AttnFwdProblem& p, int* tile_counter, cudaStream_t stream) {
  if (p.o_run)
    // A ring pair: no scratch comes with it, so no counter: the static stride, which at the
    // ring's lengths (hundreds of tiles per block) is as balanced as the counter.
    launch_fwd<Fwd3Tile<HS, false>, true, MASKED>(p, nullptr, stream);
  else
    launch_fwd<Fwd3Tile<HS, true>, false, MASKED>(p, tile_counter, stream);
}
template <int HS>
void launch_fwd_hs(const AttnFwdProblem& p, int* tile_counter, cudaStream_t stream) {
  if (p.mask.is_causal()) launch_fwd_hs<HS, false>(p, tile_counter, stream);
  else launch_fwd_hs<HS, true>(p, tile_counter, stream);
}

void launch_problem(const AttnFwdProblem& p, int* tile_counter, cudaStream_t stream) {
  CHECK((p.out != nullptr) != (p.o_run != nullptr), "internal: flash3 forward: one output");
  if (p.mask.is_causal()) {
    CHECK(!p.causal || p.Tq == p.Tk, "internal: flash3 forward: causal needs Tq == Tk");
    CHECK(p.causal || p.o_run, "internal: flash3 forward: a full (non-causal) problem is a ring pair");
  } else {
    flash::check_problem_mask(p);
  }
  CHECK(aligned16(p.q) && aligned16(p.k) && aligned16(p.v) &&
            (p.out ? aligned16(p.out) : aligned16(p.o_run)),
        "flash3 attention: Q, K, V and the output must be 16-byte aligned");
  switch (p.HS) {
    case 64:
      launch_fwd_hs<64>(p, tile_counter, stream);
      break;
    case 128:
      launch_fwd_hs<128>(p, tile_counter, stream);
      break;
    default:
      THROW_ERROR("flash3 attention forward: head size %d is not supported (64 or 128)", p.HS);
  }
}

}  // namespace

void forward_bf16(__nv_bfloat16* out, float* lse, void* scratch, const __nv_bfloat16* qkv,
                  const AttnShape& s, const AttnMask& mask, cudaStream_t stream) {
  int* tile_counter = static_cast<int*>(scratch);  // the work-tile counter: the scratch's first int
  launch_problem(flash::whole_sequence_forward_problem(out, lse, qkv, s, mask), tile_counter,
                 stream);
}

void forward_problem(const AttnFwdProblem& p, cudaStream_t stream) {
  CHECK(p.o_run, "internal: flash3 forward_problem is the ring's (fp32 running O)");
  launch_problem(p, nullptr, stream);
}

}  // namespace flash3

// ---------------------------------------------------------------------------------------------
// The backend class: its spec is kSpec_flash3 (backends.cpp, from flash3_tiles.h); the forward
// is above, the backward flash3_bwd.cu; a ring pair runs the same two kernels (forward_problem,
// backward_problem), the ring's scratch and conversions are flash's (FlashFamilyBackend).
namespace {

class Flash3Attention final : public FlashFamilyBackend {
 public:
  Flash3Attention() : FlashFamilyBackend(attention_spec("flash3")) {}
#if !defined(ENABLE_FP32)
  void ring_forward(const AttnFwdProblem& p, cudaStream_t st) const override {
    flash3::forward_problem(p, st);
  }
  void ring_backward(const AttnBwdProblem& p, cudaStream_t st) const override {
    flash3::backward_problem(p, st);
  }
#endif

 protected:
  void forward_bf16(const Bf16ForwardArgs& a, cudaStream_t st) const override {
    flash3::forward_bf16(a.out, a.lse, a.scratch, a.qkv, a.shape, a.mask, st);
  }
  void backward_bf16(const Bf16BackwardArgs& a, cudaStream_t st) const override {
    flash3::backward_bf16(a.dqkv, a.scratch, a.dout, a.qkv, a.out, a.lse, a.shape,
                          a.deterministic, a.mask, st);
  }
};

}  // namespace

std::unique_ptr<AttentionBackend> make_flash3_attention() {
  return std::make_unique<Flash3Attention>();
}
