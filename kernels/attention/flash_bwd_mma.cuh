// flash_bwd_mma.cuh — the backward's mainloop on mma.sync (m16n8k16 bf16, fp32 accumulate):
// flash_bwd_kernel, one thread block per (K/V tile j, kv head, batch), 8 warps of 16 keys each.
// Used at HS 64. The schedule, scratch, determinism and limits: flash_bwd.cu; the steps a
// mainloop shares with the wgmma one (tile loads, dQ tile hand-off, dK/dV store):
// flash_bwd_shared.cuh.
// Included by flash_bwd.cu only.
#pragma once
#include "kernels/attention/flash_bwd_shared.cuh"
#include "kernels/attention/flash_common.cuh"
#include "kernels/attention/flash_tiles.h"

namespace flash {

template <int HS_, int Br_, int NWARPS_, int CQ_, bool KV_IN_REGS_, int DQ_WM_>
struct BwdTile {
  static constexpr bool WGMMA = false;
  static constexpr int HS = HS_, Br = Br_, NWARPS = NWARPS_, CQ = CQ_;
  static constexpr int NTHREADS = 32 * NWARPS;
  static constexpr int Bc = 16 * NWARPS;           // each warp owns 16 keys
  static constexpr bool KV_IN_REGS = KV_IN_REGS_;  // keep the warp's K/V A fragments in regs
  static constexpr int KH = HS / 16;               // k-steps over the head dim
  static constexpr int NCQ = Br / CQ;              // query chunks per Q tile
  static constexpr int QT = CQ / 8;                // 8-query n-tiles of S^T per chunk
  static constexpr int QK = CQ / 16;               // 16-query k-steps of dV, dK per chunk
  static constexpr int NH8 = HS / 8;               // n-tiles of dK, dV
  static constexpr int DQ_WM = DQ_WM_, DQ_WN = NWARPS / DQ_WM;  // warp grid of dQ_i (Br x HS)
  static constexpr int DQ_M = Br / DQ_WM, DQ_N = HS / DQ_WN;
  static constexpr int DQ_MT = DQ_M / 16, DQ_NT = DQ_N / 8;
  static constexpr int KV_BYTES = Bc * HS * 2, QT_BYTES = Br * HS * 2, DS_BYTES = Bc * Br * 2;
  // smem: K_j, V_j | Q_i x2 | dO_i x2 | dS^T x2 | LSE_i x2 | D_i x2 | dQ_i staging (fp32)
  static constexpr int OFF_V = KV_BYTES, OFF_Q = 2 * KV_BYTES, OFF_DO = OFF_Q + 2 * QT_BYTES,
                       OFF_DS = OFF_DO + 2 * QT_BYTES, OFF_L = OFF_DS + 2 * DS_BYTES,
                       OFF_D = OFF_L + 2 * Br * 4, OFF_DQ = OFF_D + 2 * Br * 4;
  static constexpr int SMEM = OFF_DQ + Br * HS * 4;
  static_assert(HS == 64 || HS == 128, "head size 64 or 128");
  static_assert(Br % 64 == 0, "dS^T rows are swizzled in >= 8 chunks");
  static_assert(Br % CQ == 0 && CQ % 16 == 0, "query chunks of 16s");
  static_assert(NWARPS % DQ_WM == 0 && DQ_M % 16 == 0 && DQ_N % 16 == 0, "dQ warp grid");
  static_assert(Br <= NTHREADS, "one thread per LSE/D row");
  static_assert((Bc * HS / 8) % NTHREADS == 0 && (Br * HS / 8) % NTHREADS == 0, "tile loads");
  static_assert(SMEM <= 227 * 1024, "shared memory per block");
};

// Tile choices, measured on an H200 (causal, 16384 tokens per batch; backward TFLOP/s =
// 2.5 x 2 B NH T^2 HS / time, dot and dQ-convert kernels included):
//   HS 64:  Br 128, Bc 128 (8 warps), CQ 32, K/V fragments in registers, dQ warp grid 4 x 2:
//           287-294 TFLOP/s at T 16384. CQ 64 spills (84 B), 3% slower; K/V re-read from smem
//           10% slower; Br 64 7% slower; 4 warps and Bc 64 2-4% slower.
//   HS 128 (now flash_bwd_wg_kernel, below): best here was Br 64, Bc 128 (8 warps), CQ 32,
//           K/V re-read from smem, dQ warp grid 2 x 4: 282-286 TFLOP/s at T 16384. K/V in
//           registers spills 200+ B (4-8% slower); CQ 64 is even to 3% slower; dQ grid 4 x 2
//           3-6% slower; Br 128 6% slower (and no longer fits with double-buffered dS^T).
// The dQ reduction through the copy engine (cp.reduce.async.bulk) instead of fp32 red.global
// atomics from registers: about 255 -> 285 TFLOP/s (HS 128), 262 -> 290 (HS 64) at T 16384.
// What bounds this design (Nsight Compute, HS 128): the shared-memory pipe at ~75% busy, with
// 8 warps per SM (255 registers each); each warp owns only 16 keys, so every product reads
// its B operand from smem at 1 byte per 16 FLOP. flash_bwd_wg_kernel (B read once per
// warpgroup) removes that bound.
// The sizes live in flash_tiles.h (the backend's spec computes its cost from them): Br, Bc =
// 16 x warps, CQ = the causal skipping rows (a warp skips by its 16 keys).
constexpr FlashTiles kBwdTiles64 = flash_tiles(64);
static_assert(kBwdTiles64.bwd_skip_keys == 16, "a warp of the mma.sync backward owns 16 keys");
using BwdTile64 = BwdTile<64, kBwdTiles64.bwd_Br, kBwdTiles64.bwd_Bc / 16, kBwdTiles64.bwd_skip_rows,
                          true, 4>;


// ---- 2. the main kernel ----
template <class K>
__global__ void __launch_bounds__(K::NTHREADS, 1)
    flash_bwd_kernel(__nv_bfloat16* __restrict__ dqkv, float* __restrict__ dq_accum,
                     const __nv_bfloat16* __restrict__ dout, const __nv_bfloat16* __restrict__ qkv,
                     const float* __restrict__ lse, const float* __restrict__ Dvec, int T, int NH,
                     int NKV, float scale_log2, float scale) {
  constexpr int HS = K::HS, Br = K::Br, Bc = K::Bc, CQ = K::CQ, KH = K::KH, QT = K::QT, QK = K::QK,
                NH8 = K::NH8, NTHREADS = K::NTHREADS;
  constexpr int ROWB = HS * 2;  // bytes per K/V/Q/dO smem row
  constexpr int DSB = Br * 2;   // bytes per dS^T smem row
  extern __shared__ __align__(128) unsigned char smem[];

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t4 = lane & 3;
  const int b = blockIdx.x / NKV, kvh = blockIdx.x % NKV;
  const int j = blockIdx.y;
  const int G = NH / NKV;
  const int k0 = j * Bc;
  const size_t ld = (size_t)(NH + 2 * NKV) * HS, ldo = (size_t)NH * HS;

  const uint32_t s0 = smem_u32(smem);
  const uint32_t sK = s0, sV = s0 + K::OFF_V, sQ = s0 + K::OFF_Q, sdO = s0 + K::OFF_DO,
                 sdS = s0 + K::OFF_DS, sL = s0 + K::OFF_L, sD = s0 + K::OFF_D, sdQ = s0 + K::OFF_DQ;
  const float* fL = reinterpret_cast<const float*>(smem + K::OFF_L);
  const float* fD = reinterpret_cast<const float*>(smem + K::OFF_D);

  bwd_load_kv<Bc, HS, NTHREADS, false>(sK, sV, qkv, b, k0, kvh, T, NH, NKV, ld, tid);
  const int i_begin = k0 / Br;
  const int n_i = (T + Br - 1) / Br - i_begin;
  const int total = G * n_i;
  auto prefetch = [&](int it, int buf) {  // step it: query head hq, Q tile i_begin + it % n_i
    bwd_load_step<Br, HS, NTHREADS, false>(sQ + buf * K::QT_BYTES, sdO + buf * K::QT_BYTES,
                                        sL + buf * Br * 4, sD + buf * Br * 4, qkv, dout, lse,
                                        Dvec, b, kvh * G + it / n_i, (i_begin + it % n_i) * Br, T,
                                        NH, ld, ldo, tid);
  };
  prefetch(0, 0);
  cp_async_commit();  // group: K_j, V_j and step 0

  // Per-lane ldmatrix offsets (see flash_fwd.cu): chunk 2k + c of a matrix row at
  // off[k % 4] + (k / 4) * 128.
  //   pattern A: matrices (rows 0-7 | 8-15) x (chunk +0 | +1): A fragments (row-major), and
  //              B fragments read transposed (rows = the k dimension).
  //   pattern B: matrices (rows 0-7, +0) (rows 0-7, +1) (rows 8-15, +0) (rows 8-15, +1):
  //              B fragments read as stored (rows = the n dimension), and the transposed
  //              A fragments of dS from dS^T.
  const int sw = lane & 7;
  const int pa_row = (lane & 7) + ((lane >> 3) & 1) * 8, pa_chk = lane >> 4;
  const int pb_row = (lane & 7) + (lane >> 4) * 8, pb_chk = (lane >> 3) & 1;
  uint32_t pa[4], pb[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    pa[k] = pa_row * ROWB + (((2 * k + pa_chk) ^ sw) << 4);
    pb[k] = pb_row * ROWB + (((2 * k + pb_chk) ^ sw) << 4);
  }
  // dQ_i = dS K_j: warp (wm, wn) owns rows wm*DQ_M.. and columns wn*DQ_N..
  const int wm = warp / K::DQ_WN, wn = warp % K::DQ_WN;
  uint32_t dq_a[K::DQ_MT], dq_b[K::DQ_NT / 2];
#pragma unroll
  for (int mt = 0; mt < K::DQ_MT; ++mt)
    dq_a[mt] = sdS + pb_row * DSB + (((2 * (wm * K::DQ_MT + mt) + pb_chk) ^ sw) << 4);
#pragma unroll
  for (int np = 0; np < K::DQ_NT / 2; ++np)
    dq_b[np] = sK + pa_row * ROWB + (((2 * (wn * (K::DQ_NT / 2) + np) + pa_chk) ^ sw) << 4);

  float dk[NH8][4], dv[NH8][4];
#pragma unroll
  for (int n = 0; n < NH8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[n][e] = dv[n][e] = 0.f;
  uint32_t kf[K::KV_IN_REGS ? KH : 1][4], vf[K::KV_IN_REGS ? KH : 1][4];

  const int key_lo = k0 + warp * 16;  // this warp's first key
  const uint32_t sKw = sK + warp * 16 * ROWB, sVw = sV + warp * 16 * ROWB;

  // Pipeline, two barriers per (h, i) step. The first publishes the step's dS^T and the next
  // step's Q/dO/LSE/D (loaded a whole step ahead), frees this step's Q/dO buffer for the step
  // after next, and (thread 0 having waited for it) frees the dQ staging tile. The second, after
  // the dQ product, publishes the staged dQ tile to thread 0, which hands it to the copy engine.
  // dS^T is double-buffered, so the next step's dS^T stores need no barrier after the dQ reads.
  // Measured alternatives (H200, causal, 16384 tokens, T 1024..16384): only warp 0 waiting for
  // the staged tile (named barrier, bar.arrive elsewhere) was 2-3% faster, but racecheck cannot
  // follow bar.arrive and reports hazards; issuing each reduction one step later from a
  // double-buffered staging tile, with one barrier per step, was 8-13% slower.
  if (total > 1) {
    prefetch(1, 1);
    cp_async_commit();
    cp_async_wait<1>();
  } else {
    cp_async_wait<0>();
  }
  __syncthreads();
  if constexpr (K::KV_IN_REGS) {
#pragma unroll
    for (int kk = 0; kk < KH; ++kk) {
      const uint32_t o = pa[kk & 3] + (kk >> 2) * 128;
      ldmatrix_x4(kf[kk][0], kf[kk][1], kf[kk][2], kf[kk][3], sKw + o);
      ldmatrix_x4(vf[kk][0], vf[kk][1], vf[kk][2], vf[kk][3], sVw + o);
    }
  }

  for (int it = 0; it < total; ++it) {
    const int buf = it & 1;
    const uint32_t sdSb = sdS + buf * K::DS_BYTES;
    const int hq = kvh * G + it / n_i;
    const int q0 = (i_begin + it % n_i) * Br;
    const bool needs_mask = tile_needs_mask(q0, k0, Bc);
    const uint32_t sQb = sQ + buf * K::QT_BYTES, sdOb = sdO + buf * K::QT_BYTES;
    const float* Lb = fL + buf * Br;
    const float* Db = fD + buf * Br;

#pragma unroll
    for (int c = 0; c < K::NCQ; ++c) {
      const int cq0 = c * CQ;  // first query of the chunk, tile-local
      float st[QT][4], dpt[QT][4];
      if (key_lo > q0 + cq0 + CQ - 1) {
        // every query of the chunk precedes the warp's keys: P = dS = 0, nothing to add
#pragma unroll
        for (int qt = 0; qt < QT; ++qt)
#pragma unroll
          for (int e = 0; e < 4; ++e) dpt[qt][e] = 0.f;
      } else {
#pragma unroll
        for (int qt = 0; qt < QT; ++qt)
#pragma unroll
          for (int e = 0; e < 4; ++e) st[qt][e] = dpt[qt][e] = 0.f;
            // S^T = K_w Q_c^T and dP^T = V_w dO_c^T
#pragma unroll
        for (int kk = 0; kk < KH; ++kk) {
          uint32_t ak[4], av[4];
          const uint32_t oa = pa[kk & 3] + (kk >> 2) * 128;
          if constexpr (K::KV_IN_REGS) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              ak[e] = kf[kk][e];
              av[e] = vf[kk][e];
            }
          } else {
            ldmatrix_x4(ak[0], ak[1], ak[2], ak[3], sKw + oa);
            ldmatrix_x4(av[0], av[1], av[2], av[3], sVw + oa);
          }
          const uint32_t ob = pb[kk & 3] + (kk >> 2) * 128 + cq0 * ROWB;
#pragma unroll
          for (int qp = 0; qp < QT / 2; ++qp) {
            uint32_t b0, b1, b2, b3;
            ldmatrix_x4(b0, b1, b2, b3, sQb + ob + qp * 16 * ROWB);
            mma_bf16(st[2 * qp], ak, b0, b1);
            mma_bf16(st[2 * qp + 1], ak, b2, b3);
            ldmatrix_x4(b0, b1, b2, b3, sdOb + ob + qp * 16 * ROWB);
            mma_bf16(dpt[2 * qp], av, b0, b1);
            mma_bf16(dpt[2 * qp + 1], av, b2, b3);
          }
        }
        // P^T = exp2(S^T scale log2e - LSE log2e), dS^T = P^T o (dP^T - D)
#pragma unroll
        for (int qt = 0; qt < QT; ++qt) {
          const int ql = cq0 + qt * 8 + 2 * t4;  // tile-local query of elements e = 0, 2
          const float2 L = *reinterpret_cast<const float2*>(Lb + ql);
          const float2 Dq = *reinterpret_cast<const float2*>(Db + ql);
          const float l0 = L.x * kLog2e, l1 = L.y * kLog2e;
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            float p = fast_exp2(fmaf(st[qt][e], scale_log2, -((e & 1) ? l1 : l0)));
            if (needs_mask) {
              const int key = key_lo + g + (e >> 1) * 8;
              if (key > q0 + ql + (e & 1)) p = 0.f;
            }
            st[qt][e] = p;
            dpt[qt][e] = p * (dpt[qt][e] - ((e & 1) ? Dq.y : Dq.x));
          }
        }
        // dV += P^T dO_c, dK += dS^T Q_c (A from registers, B = dO_c, Q_c read transposed)
#pragma unroll
        for (int kq = 0; kq < QK; ++kq) {
          uint32_t ap[4], as[4];
          ap[0] = pack_bf16(st[2 * kq][0], st[2 * kq][1]);
          ap[1] = pack_bf16(st[2 * kq][2], st[2 * kq][3]);
          ap[2] = pack_bf16(st[2 * kq + 1][0], st[2 * kq + 1][1]);
          ap[3] = pack_bf16(st[2 * kq + 1][2], st[2 * kq + 1][3]);
          as[0] = pack_bf16(dpt[2 * kq][0], dpt[2 * kq][1]);
          as[1] = pack_bf16(dpt[2 * kq][2], dpt[2 * kq][3]);
          as[2] = pack_bf16(dpt[2 * kq + 1][0], dpt[2 * kq + 1][1]);
          as[3] = pack_bf16(dpt[2 * kq + 1][2], dpt[2 * kq + 1][3]);
          const uint32_t rowo = (cq0 + kq * 16) * ROWB;
#pragma unroll
          for (int np = 0; np < NH8 / 2; ++np) {
            const uint32_t o = pa[np & 3] + (np >> 2) * 128 + rowo;
            uint32_t b0, b1, b2, b3;
            ldmatrix_x4_trans(b0, b1, b2, b3, sdOb + o);
            mma_bf16(dv[2 * np], ap, b0, b1);
            mma_bf16(dv[2 * np + 1], ap, b2, b3);
            ldmatrix_x4_trans(b0, b1, b2, b3, sQb + o);
            mma_bf16(dk[2 * np], as, b0, b1);
            mma_bf16(dk[2 * np + 1], as, b2, b3);
          }
        }
      }
      // dS^T (bf16) -> smem rows of this warp's keys, columns of the chunk's queries
#pragma unroll
      for (int qt = 0; qt < QT; ++qt)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int row = warp * 16 + g + r * 8;
          const uint32_t addr = sdSb + row * DSB + ((((cq0 / 8) + qt) ^ (row & 7)) << 4) + t4 * 4;
          const uint32_t v = pack_bf16(dpt[qt][2 * r], dpt[qt][2 * r + 1]);
          asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
        }
    }
    cp_async_wait<0>();                  // step it+1's tiles (the only group in flight)
    if (tid == 0) bulk_wait_read_all();  // the last dQ reduction has read its staging tile
    __syncthreads();
    if (it + 2 < total) {
      prefetch(it + 2, buf);
      cp_async_commit();
    }

    // ---- dQacc_i += dS_ij K_j : (Br x Bc) (Bc x HS) ----
    {
      float dq[K::DQ_MT][K::DQ_NT][4];
#pragma unroll
      for (int mt = 0; mt < K::DQ_MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < K::DQ_NT; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) dq[mt][nt][e] = 0.f;
#pragma unroll
      for (int ks = 0; ks < Bc / 16; ++ks) {
        uint32_t a[K::DQ_MT][4];
#pragma unroll
        for (int mt = 0; mt < K::DQ_MT; ++mt)
          ldmatrix_x4_trans(a[mt][0], a[mt][1], a[mt][2], a[mt][3],
                            dq_a[mt] + buf * K::DS_BYTES + ks * 16 * DSB);
#pragma unroll
        for (int np = 0; np < K::DQ_NT / 2; ++np) {
          uint32_t b0, b1, b2, b3;
          ldmatrix_x4_trans(b0, b1, b2, b3, dq_b[np] + ks * 16 * ROWB);
#pragma unroll
          for (int mt = 0; mt < K::DQ_MT; ++mt) {
            mma_bf16(dq[mt][2 * np], a[mt], b0, b1);
            mma_bf16(dq[mt][2 * np + 1], a[mt], b2, b3);
          }
        }
      }
      // Stage the dQ partial (fp32) in smem, then one bulk reduce-add into dQacc (done by
      // the copy engine in L2). Staging layout = dQacc's: within each row, 8-float segment
      // s sits at s ^ (row % 8), which makes these fragment stores conflict-free.
#pragma unroll
      for (int mt = 0; mt < K::DQ_MT; ++mt)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int row = wm * K::DQ_M + mt * 16 + g + r * 8;
#pragma unroll
          for (int nt = 0; nt < K::DQ_NT; ++nt) {
            const int seg = (wn * K::DQ_N) / 8 + nt;
            const uint32_t addr = sdQ + (row * HS + ((seg ^ (row & 7)) << 3) + 2 * t4) * 4;
            asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(addr), "f"(dq[mt][nt][2 * r]),
                         "f"(dq[mt][nt][2 * r + 1])
                         : "memory");
          }
        }
      bwd_add_dq_tile<HS, Br>(dq_accum, sdQ, b, hq, q0, T, NH, tid);
    }
  }
  bwd_store_dk_dv<HS>([&](int nt, int e) { return dk[nt][e]; },
                      [&](int nt, int e) { return dv[nt][e]; }, scale, sK, sV, dqkv, b, k0, kvh,
                      T, NH, NKV, tid);
}

}  // namespace flash
