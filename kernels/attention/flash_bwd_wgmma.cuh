// flash_bwd_wgmma.cuh — the backward's mainloop on Hopper warpgroup MMAs (wgmma, sm_90a):
// flash_bwd_wg_kernel, one block per (K/V tile j of 128 keys, kv head, batch), each product one
// warpgroup MMA. It runs both head sizes (HS 64: Br 128, HS 128: Br 64) for the "flash" and
// "flash3" backends. The schedule, scratch and limits: flash_bwd.cu; the tile loads, the dQ
// hand-off and the dK/dV store: flash_bwd_shared.cuh. Included by flash_bwd.cu and by flash3_bwd.cu
// (flash3's warp-specialised kernel runs the same step: bwd_step_dkdv, bwd_issue_dq, bwd_stage_dq).
//
// How the dQ partials of a Q tile reach dQacc (DqOrder):
//   kArrival  each block hands its fp32 dQ_i partial to the copy engine (cp.reduce.async.bulk
//             add in L2) as soon as it is ready: fastest, but the order of the adds, and so the
//             last bits of dQ, vary from run to run.
//   kFixed    (--deterministic) the partials of Q tile i are added in the order of the K/V tile
//             j = 0, 1, ...: dQacc_i's semaphore (an int in the scratch, zeroed by the D kernel)
//             counts the blocks that have added. Block j's thread 0 waits until it reads j
//             (ld.acquire), issues its bulk add, and one step later, just before its next add
//             (so that the add has had a whole step to complete), waits for it to complete and
//             stores j + 1 (st.release). Deadlock freedom: block j only waits for block j - 1 of
//             the same (b, kv head), which has the lower linear block index (in both grids), so
//             it was dispatched first and is running or done; block 0 never waits. Its steps go
//             from the LAST Q tile down to the diagonal (the group's query heads inside), so
//             block j and block j - 1 meet every dQ tile at the same step index and block j
//             trails by about one step. Diagonal-first order would make block j start at tile
//             j Bc / Br, which block j - 1 reaches Bc / Br steps later: every block of a wave
//             would wait for the one below it.
// Cost of kFixed: 11-15% of the backward on an H100 (flash's kernel, HS 64/128, T 4K-64K; the
// step order alone costs nothing): the blocks of a wave run in lock-step one step apart, and
// every stall of one block passes down the chain. So it is a flag, not the default (the
// measurements and the orders tried: docs/notes/flash.md).
#pragma once
#include "kernels/attention/flash_bwd_shared.cuh"
#include "kernels/attention/flash_common.cuh"
#include "kernels/attention/flash_tiles.h"
#include "kernels/attention/problem_mask.cuh"
#include "kernels/attention/sm90/copy.cuh"
#include "kernels/attention/sm90/sync.cuh"
#include "kernels/attention/sm90/wgmma.cuh"

namespace flash {

// ---- 2. the main kernel on warpgroup MMAs (wgmma, sm_90a) ----
// The schedule of flash_bwd.cu's header; 2 warpgroups of 4 warps. Warpgroup wg owns keys
// 64 wg .. +63 of the K/V tile (warp w owns keys 16 w .. +15: the wgmma accumulator rows of its
// warp), so dK_j and dV_j stay in registers. K_j, V_j are loaded once; the steps (query head,
// Q tile) are double-buffered (cp.async: the next step's Q_i, dO_i, LSE_i, D_i load while this
// one computes; two barriers per step). Each product is one wgmma per 16-deep k-step, which
// reads its B operand from shared memory once per warpgroup (mma.sync: once per warp):
//   S^T  = K_wg Q_i^T    A = K_wg (K-major, smem)   B = Q_i  (K-major)   64 x Br, k = HS
//   dP^T = V_wg dO_i^T   A = V_wg                   B = dO_i             64 x Br, k = HS
//   dV  += P^T dO_i      A = P^T (registers)        B = dO_i (MN-major)  64 x HS, k = Br
//   dK  += dS^T Q_i      A = dS^T (registers)       B = Q_i  (MN-major)  64 x HS, k = Br
//   dQ_i = dS K_j        A = dS (dS^T in smem, MN-major)  B = K_j (MN-major), k = Bc; the Br x HS
//                        tile split over the two warpgroups by columns (Br 64) or rows (Br 128)
// K, V, Q, dO and dS^T live in shared memory as 64-column panels with the 128-byte swizzle
// (load_panels_async), which every descriptor above reads. Causal skipping is per warpgroup:
// a step whose queries all precede the warpgroup's 64 keys skips its four products (dS^T = 0).
// dS^T = P^T o (dP^T - D) uses the bf16 P^T that dV's product reads (as a bf16 framework would;
// the GPU tests' error ratios stay at 0.3-0.5 of their tolerance).
// Measured on an H200 (causal, 16384 tokens, T 1K-16K): HS 128 (Br 64) 248-443 TFLOP/s backward,
// HS 64 (Br 128) 216-397, against 199-283 and 185-294 for the mma.sync kernels these replaced;
// HS 128 at Br 128 would need 64 more accumulator registers per thread (docs/notes/flash.md).
template <int HS_, int Br_>
struct BwdTileWG {
  static constexpr bool WGMMA = true;
  static constexpr int HS = HS_, Br = Br_, Bc = 128, NWARPS = 8, NTHREADS = 256;
  static constexpr bool DESC_AT = false;          // operand descriptors per k-step (OperandDesc)
  static constexpr bool DS_STMATRIX = false;      // dS^T stored by st.shared.u32 (bwd_step_dkdv)
  static constexpr int KH = HS / 16;              // k-steps over the head dim (S^T, dP^T)
  static constexpr int QK = Br / 16;              // k-steps over the queries (dV, dK)
  static constexpr int NS = Br / 2;               // fp32 per thread of S^T, dP^T (64 x Br)
  static constexpr int NA = HS / 2;               // fp32 per thread of dK, dV (64 x HS)
  static constexpr bool DQ_SPLIT_N = (Br == 64);  // dQ_i columns (else rows) split over the WGs
  static constexpr int DQ_N = DQ_SPLIT_N ? HS / 2 : HS;  // n of each warpgroup's dQ product
  static constexpr int KV_BYTES = Bc * HS * 2, QT_BYTES = Br * HS * 2, DS_BYTES = Bc * Br * 2;
  static constexpr int KV_PANEL = Bc * 128, QT_PANEL = Br * 128, DS_PANEL = Bc * 128;
  // smem (1024-aligned): K_j, V_j | Q_i x2 | dO_i x2 | dS^T x2 | LSE_i x2 | D_i x2 | dQ_i staging
  static constexpr int OFF_V = KV_BYTES, OFF_Q = 2 * KV_BYTES, OFF_DO = OFF_Q + 2 * QT_BYTES,
                       OFF_DS = OFF_DO + 2 * QT_BYTES, OFF_L = OFF_DS + 2 * DS_BYTES,
                       OFF_D = OFF_L + 2 * Br * 4, OFF_DQ = OFF_D + 2 * Br * 4;
  static constexpr int SMEM = OFF_DQ + Br * HS * 4 + 1024;  // + slack to align the base
  static_assert(HS == 64 || HS == 128, "head size 64 or 128");
  static_assert(Br == 64 || Br == 128, "S^T is one wgmma of n = Br");
  static_assert(DQ_N == 64, "dQ_i: one m64n64 product per warpgroup");
  static_assert(QT_BYTES % 1024 == 0 && DS_BYTES % 1024 == 0, "panels on 1024-byte boundaries");
  static_assert((Bc * HS / 8) % NTHREADS == 0 && (Br * HS / 8) % NTHREADS == 0, "tile loads");
  static_assert(SMEM <= 227 * 1024, "shared memory per block");
};

// How the dQ partials of a Q tile are summed into dQacc (the top of this file).
enum class DqOrder { kArrival, kFixed };

// A backward block: (batch b, kv head kvh) = blockIdx.x, K/V tile j = blockIdx.y (first key
// k0; flash's 2-D grid), or given (flash3's 1-D grid in pair groups), G query heads per kv head;
// and its steps: step it -> (query head hq, first query q0). QUERY_HEADS (flash3's GQA backward,
// p.query_head_blocks): a pair is (batch, query head) instead, G = 1, the one query head hq0
// of kv head kvh (a compile-time choice: as a runtime one it moved ptxas's register allocation
// in every kernel and spilled 8-36 bytes in five of flash3's that spilled none).
// kArrival: head by head, each from the diagonal tile up (the longest work first). kFixed: Q
// tiles from the last down to the diagonal, the group's heads inside (the top of this file says
// why). MASKED: the Q tiles of the mask's range (problem_mask.cuh, found by each warp: every lane
// of the block constructs it), maybe none (a ring pair).
// DIAG_FIRST (flash3's causal kernels that peel their diagonal steps): in the arrival order,
// each head's first Q tile first, then the others head by head.
template <int Bc, int Br, DqOrder ORDER, bool MASKED = false, bool DIAG_FIRST = false,
          bool QUERY_HEADS = false>
struct BwdBlock {
  int b, kvh, j, k0, G, i_begin, n_qtiles, n_i, total;
  [[maybe_unused]] int hq0;  // QUERY_HEADS: the block's query head
  [[maybe_unused]] TileRange range;  // MASKED: the Q tiles that this K/V tile meets
  __device__ __forceinline__ explicit BwdBlock(const BwdCore& p, const KernelMask<MASKED>& mk = {}) {
    init(p, blockIdx.x, blockIdx.y, mk);
  }
  // Pair `pair` (= b NKV + kv head, or QUERY_HEADS b NH + query head) and K/V tile j_ given
  // (flash3's 1-D grid in pair groups: sm90/scheduler.cuh bwd_pair_group_block).
  __device__ __forceinline__ BwdBlock(const BwdCore& p, int pair, int j_,
                                      const KernelMask<MASKED>& mk = {}) {
    init(p, pair, j_, mk);
  }
  __device__ __forceinline__ void init(const BwdCore& p, int pair, int j_,
                                       const KernelMask<MASKED>& mk) {
    if constexpr (QUERY_HEADS) {
      b = pair / p.NH;
      hq0 = pair % p.NH;
      kvh = hq0 / (p.NH / p.NKV);
      G = 1;
    } else {
      b = pair / p.NKV;
      kvh = pair % p.NKV;
      G = p.NH / p.NKV;
    }
    j = j_;
    k0 = j * Bc;
    i_begin = p.causal ? k0 / Br : 0;  // causal: Q tiles from the diagonal on
    n_qtiles = (p.Tq + Br - 1) / Br;
    n_i = n_qtiles - i_begin;
    if constexpr (MASKED) {
      range = ProblemMask(mk, b, p.Tq, p.Tk).q_tiles_warp(k0, Bc, Br);
      i_begin = range.begin;
      n_i = range.end - range.begin;
    }
    total = G * n_i;
  }
  __device__ __forceinline__ int first_head() const { return QUERY_HEADS ? hq0 : kvh * G; }
  __device__ __forceinline__ void tile(int it, int& hq, int& q0) const {
    tile_in(it, i_begin, n_i, MASKED ? range.end : n_qtiles, hq, q0);
  }
  // The same over the Q tiles first .. end - 1 (n = end - first of them) given (flash3's producer
  // warps read them from shared memory rather than hold them).
  __device__ __forceinline__ void tile_in(int it, int first, int n, int end, int& hq,
                                          int& q0) const {
    if constexpr (ORDER == DqOrder::kFixed) {
      hq = first_head() + it % G;
      q0 = (end - 1 - it / G) * Br;
    } else if constexpr (!DIAG_FIRST) {
      hq = first_head() + it / n;
      q0 = (first + it % n) * Br;
    } else {
      const int r = it - G;
      hq = first_head() + (r < 0 ? it : r / (n - 1));
      q0 = (first + (r < 0 ? 0 : 1 + r % (n - 1))) * Br;
    }
  }
};

// kFixed, on the thread that adds block j's dQ partials: before the add to Q tile `tile` (its
// semaphore dq_sem[tile]), release the previous add (now complete) to block j + 1, then wait
// until blocks 0 .. j-1 have added theirs; after the block's last add, fixed_order_release_last.
__device__ __forceinline__ void fixed_order_before_add(int*& sem_pending, int* dq_sem, size_t tile,
                                                       int j) {
  if (sem_pending != nullptr) {
    sm90::bulk_wait_all();
    sm90::fence_proxy_async_global();
    sm90::st_release_gpu(sem_pending, j + 1);
  }
  sem_pending = dq_sem + tile;
  sm90::wait_flag_equals(sem_pending, j);
  sm90::fence_proxy_async_global();
}
__device__ __forceinline__ void fixed_order_release_last(int* sem_pending, int j) {
  if (sem_pending != nullptr) {
    sm90::bulk_wait_all();
    sm90::fence_proxy_async_global();
    sm90::st_release_gpu(sem_pending, j + 1);
  }
}

// The shared-memory descriptor of one wgmma operand across a k-loop: at(bytes) describes the
// operand's start + bytes. K::DESC_AT (flash3's tiles): built once, advanced by a constant per
// k-step (sm90::gmma_desc_at): flash3's backward +0.3..+3.2% on an H100, 514 -> 434 M
// instructions at HS 128 T 4K. Else each k-step builds its own (flash's kernel, where the stepped
// form measured -7% at HS 128 T 4K and +3% at 16K).
template <class K>
struct OperandDesc {
  uint64_t base;
  uint32_t addr, lbo;
  __device__ __forceinline__ OperandDesc(uint32_t a, uint32_t l)
      : base(sm90::gmma_desc(a, l, 1024)), addr(a), lbo(l) {}
  __device__ __forceinline__ uint64_t at(uint32_t bytes) const {
    if constexpr (K::DESC_AT) return sm90::gmma_desc_at(base, bytes);
    else return sm90::gmma_desc(addr + bytes, lbo, 1024);
  }
};

// acc += A B^T over the head dim, both operands K-major 64-column panels (aA: 64 rows of K_j
// or V_j, aB: Br rows of Q_i or dO_i): S^T or dP^T. Issued and committed.
template <class K>
__device__ __forceinline__ void bwd_issue_over_hs(float (&acc)[K::NS], uint32_t aA, uint32_t aB) {
  const OperandDesc<K> dA(aA, 16), dB(aB, 16);
#pragma unroll
  for (int kk = 0; kk < K::KH; ++kk) {
    const uint32_t oa = (kk / 4) * K::KV_PANEL + (kk % 4) * 32;
    const uint32_t ob = (kk / 4) * K::QT_PANEL + (kk % 4) * 32;
    sm90::wgmma_ss<0, 0>(acc, dA.at(oa), dB.at(ob));
  }
  sm90::wgmma_commit();
}

// acc = A B^T over the head dim (S^T or dP^T, as bwd_issue_over_hs) with acc zeroed first by
// immediates (zero_acc: another wgmma may be in flight), issued and committed.
template <class K>
__device__ __forceinline__ void bwd_issue_fresh(float (&acc)[K::NS], uint32_t aA, uint32_t aB) {
  sm90::zero_acc(acc);
  sm90::wgmma_fence();
  bwd_issue_over_hs<K>(acc, aA, aB);
}

// dK += dS^T Q_i (A = dS^T from registers, B = Q_i MN-major), issued and committed.
template <class K>
__device__ __forceinline__ void bwd_issue_dk(float (&dk)[K::NA], uint32_t (&as)[K::QK][4],
                                             uint32_t sQb) {
  sm90::reg_fence(as);
  sm90::wgmma_fence();
  const OperandDesc<K> dQ(sQb, K::QT_PANEL);
#pragma unroll
  for (int kq = 0; kq < K::QK; ++kq) sm90::wgmma_rs<1>(dk, as[kq], dQ.at(kq * 2048));
  sm90::wgmma_commit();
}

// The mask of one step for one warpgroup (MASKED kernels): the Q tile's rows in global positions
// q_g0 .. q_g0 + rows - 1 with their doc_start in shared memory (the step's loads: 0 past Tq and
// without documents), the warpgroup's 64 keys from key_g0, this thread's first accumulator key
// key_g (key_row's position); mask.h's rule: row t sees key u iff
// doc_start(t) <= u <= t and t - u < W (W > 0).
struct BwdStepMask {
  uint32_t ds;   // doc_start of the tile's rows (Br ints)
  int q_g0, key_g, window;
  bool active;   // some row of the tile sees some key of the warpgroup
  bool partial;  // not a FULL tile (mask.h): masked element by element
};
__device__ __forceinline__ BwdStepMask bwd_step_mask(uint32_t ds, int q_g0, int rows, int key_g0,
                                                     int key_g, int window, bool full) {
  BwdStepMask m{ds, q_g0, key_g, window, false, !full};
  // The first row that could see the warpgroup's first key, and whether it sees its last.
  const int qa = max(q_g0, key_g0);
  if (qa <= q_g0 + rows - 1) {
    const int lo = max(ld_shared_s32(ds + (qa - q_g0) * 4), window > 0 ? qa - window + 1 : 0);
    m.active = lo <= key_g0 + 63;
  }
  return m;
}

// One step's products of one warpgroup (the schedule of flash_bwd.cu's header), shared by this
// file's kernel and flash3's warp-specialised one (flash3_bwd.cu). The warpgroup owns keys
// key_wg .. +63 (this thread's accumulator rows: key_row, key_row + 8); kw = the thread's warp
// among the block's 8 key warps (dS^T rows 16 kw ..). Inputs in shared memory: aK, aV = this
// warpgroup's rows of K_j, V_j; sQb, sdOb = Q_i, dO_i (query rows q0 ..); Lb, Db = LSE_i, D_i.
//   S^T  = K_wg Q_i^T;  dP^T = V_wg dO_i^T              (two groups: P^T while dP^T runs)
//   P^T  = exp2(S^T scale log2e - LSE log2e) (0 where key > query);  dV += P^T dO_i
//   dS^T = P^T o (dP^T - D) -> sdSb (bf16; zeros when no query of the tile sees these keys)
//   dK  += dS^T Q_i: issued and committed, not waited for; or, with issue_dk = false, left to
//         the caller (bwd_issue_dk; its A fragments are returned in as)
// Returns false when no query of the tile sees these keys (then dK is not issued).
// The caller fences (fence_proxy_async_smem) and meets the other warpgroup before a wgmma reads
// sdSb, and waits for dK before Q_i's buffer is reused.
// PRE_ISSUED (flash3's kSdpNext): the caller has issued S^T, then dP^T, into st, dpt
// (bwd_issue_fresh) and waited for every older group. Every step then computes (a step no query
// of which sees these keys gets P^T = 0 from the mask, so dS^T = 0 and dV, dK add zeros): had
// the products been issued outside the branch that reads them, ptxas would serialize every wgmma
// of the kernel (C7518).
// MASKED: the mask of the step (bwd_step_mask) in place of `causal`.
// before_store(): runs just before dS^T is stored (flash3's backward waits there until the other
// warpgroup has finished its step before, whose dQ read this buffer).
struct NoOp {
  __device__ __forceinline__ void operator()() const {}
};
template <class K, bool PRE_ISSUED, bool MASKED = false, class BeforeStore = NoOp>
__device__ __forceinline__ bool bwd_step_dkdv_pre(float (&st)[K::NS], float (&dpt)[K::NS],
                                                  float (&dk)[K::NA], float (&dv)[K::NA],
                                                  uint32_t aK, uint32_t aV, uint32_t sQb,
                                                  uint32_t sdOb, uint32_t Lb, uint32_t Db,
                                                  uint32_t sdSb, int q0, int key_wg, int key_row,
                                                  int kw, bool causal, float scale_log2,
                                                  uint32_t (&as)[K::QK][4], bool issue_dk,
                                                  const BeforeStore& before_store,
                                                  const BwdStepMask& msk = {}) {
  constexpr int Br = K::Br, QK = K::QK, NS = K::NS;
  const int lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
  // Some query of the tile sees some key of this warpgroup (warpgroup-uniform).
  const bool active = PRE_ISSUED || (MASKED ? msk.active : !causal || key_wg <= q0 + Br - 1);
  const bool needs_mask = MASKED ? msk.partial : causal && key_wg + 63 > q0;
  uint32_t ap[QK][4];
  if (active) {
    if constexpr (!PRE_ISSUED) {
#pragma unroll
      for (int n = 0; n < NS; ++n) st[n] = dpt[n] = 0.f;
      // S^T = K_wg Q_i^T, then dP^T = V_wg dO_i^T (two groups: P is computed while dP runs)
      sm90::reg_fence(st);
      sm90::reg_fence(dpt);
      sm90::wgmma_fence();
      bwd_issue_over_hs<K>(st, aK, sQb);
      bwd_issue_over_hs<K>(dpt, aV, sdOb);
    }
    sm90::wgmma_wait<1>();
    sm90::reg_fence(st);
    // P^T = exp2(S^T scale log2e - LSE log2e) (0 where key > query), packed to bf16 as the A
    // fragments of dV += P^T dO_i, which is issued at once and runs while dS^T is computed
#pragma unroll
    for (int qt = 0; qt < Br / 8; ++qt) {
      const int ql = qt * 8 + 2 * t4;  // tile-local query of elements e = 0, 1 (e % 2)
      const float2 L = ld_shared_f2(Lb + ql * 4);
      const float l0 = L.x * kLog2e, l1 = L.y * kLog2e;
      [[maybe_unused]] int2 ds;  // MASKED: the two queries' doc_start
      if constexpr (MASKED) {
        if (needs_mask) ds = ld_shared_s2(msk.ds + ql * 4);
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float p = fast_exp2(fmaf(st[4 * qt + e], scale_log2, -((e & 1) ? l1 : l0)));
        if constexpr (MASKED) {
          const int u = msk.key_g + (e >> 1) * 8, t = msk.q_g0 + ql + (e & 1);
          if (needs_mask && ((e & 1 ? ds.y : ds.x) > u || u > t ||
                             (msk.window > 0 && t - u >= msk.window)))
            p = 0.f;
        } else {
          if (needs_mask && key_row + (e >> 1) * 8 > q0 + ql + (e & 1)) p = 0.f;
        }
        st[4 * qt + e] = p;
      }
    }
#pragma unroll
    for (int kq = 0; kq < QK; ++kq) {
      const int a = 8 * kq, c = 8 * kq + 4;  // n-tiles 2 kq and 2 kq + 1
      ap[kq][0] = pack_bf16(st[a + 0], st[a + 1]);
      ap[kq][1] = pack_bf16(st[a + 2], st[a + 3]);
      ap[kq][2] = pack_bf16(st[c + 0], st[c + 1]);
      ap[kq][3] = pack_bf16(st[c + 2], st[c + 3]);
    }
    sm90::reg_fence(ap);
    sm90::wgmma_fence();
    const OperandDesc<K> ddO(sdOb, K::QT_PANEL);
#pragma unroll
    for (int kq = 0; kq < QK; ++kq) sm90::wgmma_rs<1>(dv, ap[kq], ddO.at(kq * 2048));
    sm90::wgmma_commit();
    sm90::wgmma_wait<1>();  // dP^T (dV may still run)
    sm90::reg_fence(dpt);
    // dS^T = P^T o (dP^T - D), with the bf16 P^T of dV (as a bf16 framework would)
#pragma unroll
    for (int kq = 0; kq < QK; ++kq)
#pragma unroll
      for (int h = 0; h < 2; ++h) {  // n-tile 2 kq + h: queries 16 kq + 8 h + 2 t, +1
        const float2 Dq = ld_shared_f2(Db + (16 * kq + 8 * h + 2 * t4) * 4);
        const int n = 8 * kq + 4 * h;
#pragma unroll
        for (int r = 0; r < 2; ++r) {  // rows g, g + 8
          const float2 pp = unpack_bf16(ap[kq][2 * h + r]);
          as[kq][2 * h + r] = pack_bf16(pp.x * (dpt[n + 2 * r] - Dq.x),
                                        pp.y * (dpt[n + 2 * r + 1] - Dq.y));
        }
      }
  } else {
#pragma unroll
    for (int kq = 0; kq < QK; ++kq)
#pragma unroll
      for (int e = 0; e < 4; ++e) as[kq][e] = 0u;
  }
  before_store();
  // dS^T (bf16) -> smem: rows = this warp's keys, 8-query chunk qt = 2 kq + (e / 2) of panel
  // qt / 8 (as[kq][e]: row g + 8 (e % 2), queries 16 kq + 8 (e / 2) + 2 t). K::DS_STMATRIX
  // (flash3's tiles): one stmatrix.x4 per kq (as[kq][e] is matrix e's fragment; lane l addresses
  // row l % 8 of matrix l / 8), else 4 st.shared.u32.
  if constexpr (K::DS_STMATRIX) {
    const int m = lane >> 3, row = kw * 16 + (m & 1) * 8 + (lane & 7);
#pragma unroll
    for (int kq = 0; kq < QK; ++kq) {
      const int qt = 2 * kq + (m >> 1);
      sm90::stmatrix_x4(sdSb + (qt >> 3) * K::DS_PANEL + row * 128 + (((qt & 7) ^ (row & 7)) << 4),
                  as[kq][0], as[kq][1], as[kq][2], as[kq][3]);
    }
  } else {
#pragma unroll
    for (int kq = 0; kq < QK; ++kq)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = kw * 16 + g + (e & 1) * 8;
        const int qt = 2 * kq + (e >> 1);
        const uint32_t addr = sdSb + (qt >> 3) * K::DS_PANEL + row * 128 +
                              ((((qt & 7) ^ (row & 7))) << 4) + t4 * 4;
        asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(addr), "r"(as[kq][e]) : "memory");
      }
  }
  if (active && issue_dk) bwd_issue_dk<K>(dk, as, sQb);
  return active;
}
// The step with its own S^T and dP^T (flash's kernel, flash3's kDkFirst and kDqFirst).
template <class K, bool MASKED = false, class BeforeStore = NoOp>
__device__ __forceinline__ bool bwd_step_dkdv(float (&dk)[K::NA], float (&dv)[K::NA], uint32_t aK,
                                              uint32_t aV, uint32_t sQb, uint32_t sdOb,
                                              uint32_t Lb, uint32_t Db, uint32_t sdSb, int q0,
                                              int key_wg, int key_row, int kw, bool causal,
                                              float scale_log2, uint32_t (&as)[K::QK][4],
                                              bool issue_dk = true, const BwdStepMask& msk = {},
                                              const BeforeStore& before_store = {}) {
  float st[K::NS], dpt[K::NS];
  return bwd_step_dkdv_pre<K, false, MASKED>(st, dpt, dk, dv, aK, aV, sQb, sdOb, Lb, Db, sdSb, q0,
                                             key_wg, key_row, kw, causal, scale_log2, as,
                                             issue_dk, before_store, msk);
}

// dQ_i's part of one warpgroup, issued and committed (the caller waits): dq = dS_ij K_j over
// all Bc keys, 64 x 64 (adS, aKt: this warpgroup's query panel of dS^T and head-dim panel of K_j,
// or the reverse; the kernel says which).
template <class K>
__device__ __forceinline__ void bwd_issue_dq(float (&dq)[32], uint32_t adS, uint32_t aKt) {
  sm90::reg_fence(dq);
  sm90::wgmma_fence();
  const OperandDesc<K> ddS(adS, K::DS_PANEL), dK(aKt, K::KV_PANEL);
#pragma unroll
  for (int ks = 0; ks < K::Bc / 16; ++ks)
    sm90::wgmma_ss<1, 1>(dq, ddS.at(ks * 2048), dK.at(ks * 2048), ks > 0 ? 1 : 0);
  sm90::wgmma_commit();
}

// Warpgroup wg's dQ part -> the fp32 staging tile sdQ (Br x HS) in dQacc's layout: 8-float
// segment s of row r at s ^ ((dq_row0 + r) % 8), dq_sw = dq_row0 % 8.
template <class K>
__device__ __forceinline__ void bwd_stage_dq(const float (&dq)[32], uint32_t sdQ, int wg,
                                             int dq_sw) {
  const int lane = threadIdx.x & 31, wq = (threadIdx.x >> 5) & 3, g = lane >> 2, t4 = lane & 3;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = (K::DQ_SPLIT_N ? 0 : wg * 64) + wq * 16 + g + r * 8;
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      const int seg = (K::DQ_SPLIT_N ? wg * 8 : 0) + n;
      const uint32_t addr =
          sdQ + (row * K::HS + ((seg ^ ((row + dq_sw) & 7)) << 3) + 2 * t4) * 4;
      asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(addr), "f"(dq[4 * n + 2 * r]),
                   "f"(dq[4 * n + 2 * r + 1])
                   : "memory");
    }
  }
}

// p: the problem (flash.cuh BwdProblem less its mask; the whole-sequence case is
// backward_bf16's). dq_sem (B, NH, ceil(Tq / Br)): kFixed's semaphores (unused, may be null, for
// kArrival). MASKED: mk, the problem's mask (problem_mask.cuh), in place of p.causal; each
// step's rows' doc_start in shared memory after the dQ staging tile (sDoc, two buffers).
template <class K, DqOrder ORDER, bool MASKED = false>
__global__ void __launch_bounds__(K::NTHREADS, 1)
    flash_bwd_wg_kernel(const BwdCore p, int* __restrict__ dq_sem, float scale_log2, float scale,
                        const KernelMask<MASKED> mk) {
  constexpr int HS = K::HS, Br = K::Br, Bc = K::Bc, NA = K::NA, NTHREADS = K::NTHREADS;
  constexpr bool DET = ORDER == DqOrder::kFixed;
  extern __shared__ __align__(1024) unsigned char smem_raw[];

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2;
  const int wg = warp >> 2, wq = warp & 3;  // warpgroup, warp within it
  const int NH = p.NH;
  const bool causal = p.causal;
  const BwdBlock<Bc, Br, ORDER, MASKED> blk(p, mk);
  const int b = blk.b, kvh = blk.kvh, j = blk.j, k0 = blk.k0;
  const int total = blk.total, n_qtiles = blk.n_qtiles;
  auto step_tile = [&](int it, int& hq, int& q0) { blk.tile(it, hq, q0); };
  // dQacc's swizzle follows its own row index dq_row0 + q0 + r; q0 % 8 == 0.
  const int dq_sw = p.dq_row0 & 7;

  const uint32_t s_raw = smem_u32(smem_raw);
  const uint32_t s0 = (s_raw + 1023u) & ~1023u;  // the 128-byte swizzle needs 1024-byte panels
  const uint32_t sK = s0, sV = s0 + K::OFF_V, sQ = s0 + K::OFF_Q, sdO = s0 + K::OFF_DO,
                 sdS = s0 + K::OFF_DS, sL = s0 + K::OFF_L, sD = s0 + K::OFF_D, sdQ = s0 + K::OFF_DQ;
  [[maybe_unused]] const uint32_t sDoc = sdQ + Br * HS * 4;

  bwd_load_kv<Bc, HS, NTHREADS>(sK, sV, p, b, k0, kvh, tid);
  auto prefetch = [&](int it, int buf) {
    int hq, q0;
    step_tile(it, hq, q0);
    bwd_load_step<Br, HS, NTHREADS, MASKED>(sQ + buf * K::QT_BYTES, sdO + buf * K::QT_BYTES,
                                            sL + buf * Br * 4, sD + buf * Br * 4, p, b, hq, q0,
                                            tid, sDoc + buf * Br * 4, mk);
  };
  int* sem_pending = nullptr;  // kFixed, thread 0: the semaphore of the add not yet released
  if (!MASKED || total > 0) prefetch(0, 0);  // MASKED: a ring pair's K/V tile may see no query
  cp_async_commit();  // group: K_j, V_j and step 0

  // Descriptors (SBO = 1024: 8 rows of 128 bytes; LBO = the panel stride of MN-major operands),
  // built where they are used from 32-bit addresses (fewer live registers than 64-bit ones).
  const uint32_t aK = sK + wg * 64 * 128, aV = sV + wg * 64 * 128;  // A of S^T, dP^T (K-major)
  // dQ: A = dS from dS^T (MN-major: rows = keys = k), B = K_j (MN-major); this warpgroup's
  // query panel (row split) or head-dim panel (column split).
  const uint32_t adS = sdS + (K::DQ_SPLIT_N ? 0 : wg * K::DS_PANEL);
  const uint32_t aKt = sK + (K::DQ_SPLIT_N ? wg * K::KV_PANEL : 0);

  float dk[NA], dv[NA];
#pragma unroll
  for (int n = 0; n < NA; ++n) dk[n] = dv[n] = 0.f;

  const int key_wg = k0 + wg * 64;            // this warpgroup's first key
  const int key_row = key_wg + wq * 16 + g;   // key of accumulator elements e = 0, 1 (+8: 2, 3)

  // Pipeline: step it + 1 loads while step it computes; two barriers per step.
  if (total > 1) {
    prefetch(1, 1);
    cp_async_commit();
    cp_async_wait<1>();
  } else {
    cp_async_wait<0>();
  }
  sm90::fence_proxy_async_smem();  // cp.async writes, before wgmma (async proxy) reads
  __syncthreads();

  for (int it = 0; it < total; ++it) {
    const int buf = it & 1;
    const uint32_t sdSb = sdS + buf * K::DS_BYTES;
    int hq, q0;
    step_tile(it, hq, q0);
    const uint32_t qoff = buf * K::QT_BYTES;
    const uint32_t Lb = sL + buf * Br * 4, Db = sD + buf * Br * 4;
    uint32_t as[K::QK][4];
    [[maybe_unused]] BwdStepMask msk;
    if constexpr (MASKED)
      msk = bwd_step_mask(sDoc + buf * Br * 4, mk.q_pos0 + q0, min(Br, p.Tq - q0),
                          mk.k_pos0 + key_wg, mk.k_pos0 + key_row, mk.mask.window,
                          blk.range.kind(q0 / Br) == TileKind::kFull);
    if (bwd_step_dkdv<K, MASKED>(dk, dv, aK, aV, sQ + qoff, sdO + qoff, Lb, Db, sdSb, q0, key_wg,
                                 key_row, warp, causal, scale_log2, as, true, msk))
      sm90::wgmma_wait<0>();  // dK
    cp_async_wait<0>();        // step it+1's tiles (the only group in flight)
    sm90::fence_proxy_async_smem();  // those tiles and this step's dS^T, before wgmma reads
    if (tid == 0) sm90::bulk_wait_read_all();  // the last dQ reduction has read its staging tile
    __syncthreads();
    if (it + 2 < total) {
      prefetch(it + 2, buf);
      cp_async_commit();
    }

    // ---- dQacc_i += dS_ij K_j : (Br x Bc) (Bc x HS), this warpgroup's 64 x 64 part ----
    {
      float dq[32];
      bwd_issue_dq<K>(dq, adS + buf * K::DS_BYTES, aKt);
      sm90::wgmma_wait<0>();
      sm90::reg_fence(dq);
      bwd_stage_dq<K>(dq, sdQ, wg, dq_sw);
      bwd_add_dq_tile<HS, Br>(p, sdQ, b, hq, q0, tid, [&] {
        if constexpr (DET)  // the last step's add was issued a step ago
          fixed_order_before_add(sem_pending, dq_sem,
                                 ((size_t)b * NH + hq) * n_qtiles + q0 / Br, j);
      });
    }
  }
  if constexpr (DET) {
    if (tid == 0) fixed_order_release_last(sem_pending, j);
  }
  bwd_store_dk_dv<HS>([&](int nt, int e) { return dk[4 * nt + e]; },
                      [&](int nt, int e) { return dv[4 * nt + e]; }, scale, sK, sV, p, b, k0,
                      kvh, tid, [&] {
                        if (tid == 0) sm90::bulk_wait_all();  // the last dQ reduce-add has finished
                        __syncthreads();
                      });
}

// The sizes live in flash_tiles.h (Br; Bc = 128 is this kernel's two warpgroups of 64 keys).
template <int HS>
using BwdTileFor = BwdTileWG<HS, flash_tiles(HS).bwd_Br>;
static_assert(flash_tiles(64).bwd_Bc == 128 && flash_tiles(128).bwd_Bc == 128 &&
                  flash_tiles(64).bwd_skip_keys == 64 && flash_tiles(128).bwd_skip_keys == 64 &&
                  flash_tiles(64).bwd_skip_rows == flash_tiles(64).bwd_Br &&
                  flash_tiles(128).bwd_skip_rows == flash_tiles(128).bwd_Br,
              "two warpgroups of 64 keys, skipping per warpgroup and Q tile");

}  // namespace flash
