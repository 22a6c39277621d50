// flash_fwd.cu — FlashAttention-2 forward, causal or masked, on tensor cores (mma.sync bf16, fp32
// acc).
//
// Computes, for every (batch b, query head h, query t):
//   out[b,t,h,:] = sum_{s<=t} softmax_s(scale q_t . k_s) v_s      scale = 1/sqrt(HS)
//   lse[b,h,t]   = log sum_{s<=t} exp(scale q_t . k_s)            (fp32, natural log)
// reading q, k, v in place from qkv (B, T, NH + 2*NKV, HS); query head h uses kv head
// h / (NH/NKV). Nothing T x T is ever stored.
//
// Algorithm (FA2 schedule; paper notation). One thread block per (Q tile i of Br rows, h, b);
// Tr = ceil(T/Br), Tc_i = ceil(min((i+1) Br, T) / Bc) (K/V tiles right of the diagonal are
// never loaded). Each warp owns Br/NWARPS query rows; its m_i, l_i and O_i live in registers.
//   load Q_i -> smem (cp.async, rows >= T zero-filled)
//   m_i = -inf, l_i = 0, O_i = 0
//   for j = Tc_i-1 down to 0:                      (diagonal tiles first; K_j, V_j double-
//     S_ij = Q_i K_j^T                              buffered: tile j-1 loads while j computes)
//     if j is on the diagonal: S_ij[r,c] = -inf where key c > query r   (only there)
//     m_new = max(m_i, rowmax(S_ij))
//     P_ij  = exp2(S_ij * scale*log2e - m_new * scale*log2e)   (one FFMA + one MUFU.EX2)
//     l_i   = exp2((m_i - m_new) scale log2e) l_i + rowsum(P_ij)
//     O_i   = exp2((m_i - m_new) scale log2e) O_i + P_ij V_j      (P_ij stays in registers)
//     m_i   = m_new
//   O_i /= l_i -> bf16 (staged through smem, 16-byte coalesced stores); LSE_i = m_i scale + log l_i
// The grid runs Q tiles in reverse order (blockIdx.y = 0 is the last, longest tile) so the
// longest causal rows start first and the short ones fill the tail.
// Masks (mask.h: documents, a sliding window; the MASKED kernels, the causal ones untouched):
// query t sees keys lo(t)..t. The j loop runs over the Q tile's K/V tile range (mask.h
// kv_tiles_for_rows: a tile the mask empties is never loaded), each row's lo in shared memory;
// a warp masks a tile element by element (two compares each) only where its rows do not all see
// all of its keys, and skips a tile none of its rows sees. So a document mask or window costs
// the tiles it leaves, plus the masking of the tiles at the edges of each row's range.
//
// Limits: bf16 only (the FP32 build reports flash unsupported); HS 64 or 128;
// qkv and out 16-byte aligned (cudaMalloc'd buffers are); any T >= 1 (ragged last tiles are
// zero-filled loads and predicated stores); B * NH < 2^31, ceil(T/Br) < 65536.
//
// Test:  make build/test_gpu && ./build/test_gpu --gtest_filter='Flash*'
// Bench: ./build/flashgpt bench-attention --backends flash
//        python3 scripts/bench_attention.py   (against PyTorch SDPA in the same run)
#include <cfloat>
#include <climits>

#include "kernels/attention/flash.cuh"
#include "kernels/attention/flash_common.cuh"
#include "kernels/attention/flash_tiles.h"
#include "kernels/attention/fwd_epilogue.cuh"
#include "kernels/attention/online_softmax.cuh"
#include "kernels/attention/problem_mask.cuh"

namespace flash {

// Compile-time tile configuration of the forward kernel.
template <int HS_, int Br_, int Bc_, int NWARPS_, bool Q_IN_REGS_>
struct FwdTile {
  static constexpr int HS = HS_, Br = Br_, Bc = Bc_, NWARPS = NWARPS_;
  static constexpr int NTHREADS = 32 * NWARPS;
  static constexpr bool Q_IN_REGS = Q_IN_REGS_;  // keep Q_i's A fragments in registers
  static constexpr int WM = Br / NWARPS;         // query rows per warp
  static constexpr int MT = WM / 16;             // 16-row m-tiles per warp
  static constexpr int NS = Bc / 8;              // 8-key n-tiles of S_ij
  static constexpr int NO = HS / 8;              // 8-column n-tiles of O_i
  static constexpr int KQ = HS / 16;             // k-steps of Q K^T
  static constexpr int KP = Bc / 16;             // k-steps of P V
  static constexpr int Q_BYTES = Br * HS * 2, KV_BYTES = Bc * HS * 2;
  static constexpr int SMEM = Q_BYTES + 4 * KV_BYTES;  // Q + double-buffered K and V
  static_assert(HS == 64 || HS == 128, "head size 64 or 128");
  static_assert(Br % (16 * NWARPS) == 0, "each warp owns whole 16-row m-tiles");
  static_assert(Bc % 16 == 0 && Bc >= 16, "K/V tile rows come in 16s");
  static_assert((Br * HS / 8) % NTHREADS == 0 && (Bc * HS / 8) % NTHREADS == 0,
                "tile loads split evenly over the threads");
  static_assert(SMEM <= 227 * 1024, "shared memory per block");
};

// Tile choices, measured on an H200 (causal, 16384 tokens per batch = B x T, 12 heads at HS 64
// and 16 at HS 128; TFLOP/s = 2 B NH T^2 HS / time):
//   HS 64:  Br 128, Bc 64, 4 warps (32 rows each), Q_i's fragments kept in registers:
//           335-344 TFLOP/s at T 16384, 308-310 at 4096. Bc 128 spills (64 B) and is 8%
//           slower, Bc 32 is 19% slower, Br 64 is 8% slower; Q re-read from smem is even at
//           T 16384 and 3-5% slower at T <= 4096.
//   HS 128: Br 128, Bc 32, 4 warps, Q_i re-read from smem (in registers it needs 64 more
//           registers on top of O_i's 128): 337-349 TFLOP/s at T 16384, 303-320 at 4096.
//           Bc 64 spills (104 B): 1-9% slower; Br 64 is 7-10% slower.
// 32 rows per warp (two m-tiles) halves the shared-memory traffic of K and V per FLOP against
// 16 rows per warp; at 16 rows per warp the K/V reads alone would need ~160 B/clk/SM at the
// mma.sync peak, over the 128 B/clk that shared memory delivers.
// The sizes live in flash_tiles.h (the backend's spec computes its cost from them).
using FwdTile64 = FwdTile<64, flash_tiles(64).fwd_Br, flash_tiles(64).fwd_Bc, 4, true>;
using FwdTile128 = FwdTile<128, flash_tiles(128).fwd_Br, flash_tiles(128).fwd_Bc, 4, false>;

// CAUSAL: FwdProblem::causal, at compile time (a runtime flag cost the whole-sequence forward
// 2-4%, measured on an H100 against the kernel before the problem form, same run).
// F32_RUN: the ring's epilogue (FwdProblem::o_run: overwrite or merge the running fp32 O and
// LSE); else bf16 O and the LSE written.
// MASKED: FwdProblem::mask (documents, a window) in place of CAUSAL: the K/V tiles of the Q
// tile's range (problem_mask.cuh), only those outside its FULL range masked, a warp that sees
// none of a tile's keys skips it; the causal kernels (MASKED = false) are unchanged.
template <class K, bool CAUSAL, bool F32_RUN, bool MASKED>
__global__ void __launch_bounds__(K::NTHREADS, 2)
    flash_fwd_kernel(const FwdCore p, float scale_log2, float scale, const KernelMask<MASKED> mk) {
  constexpr int HS = K::HS, Br = K::Br, Bc = K::Bc, WM = K::WM, MT = K::MT, NS = K::NS, NO = K::NO,
                KQ = K::KQ, KP = K::KP, NTHREADS = K::NTHREADS;
  constexpr int ROWB = HS * 2;  // bytes per smem row
  extern __shared__ __align__(128) unsigned char smem[];

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t4 = lane & 3;
  const int NH = p.NH, Tq = p.Tq, Tk = p.Tk;
  constexpr bool causal = CAUSAL;
  const int b = blockIdx.x / NH, h = blockIdx.x % NH;
  const int i_tile = gridDim.y - 1 - blockIdx.y;  // longest (last) Q tiles first
  const int kvh = h / (NH / p.NKV);
  const size_t ld = p.q_ld, kld = p.kv_ld;  // elements between consecutive tokens
  const int q0 = i_tile * Br;

  const __nv_bfloat16* gQ = p.q + (size_t)b * p.q_bs + (size_t)q0 * ld + (size_t)h * HS;
  const __nv_bfloat16* gK = p.k + (size_t)b * p.kv_bs + (size_t)kvh * HS;
  const __nv_bfloat16* gV = p.v + (size_t)b * p.kv_bs + (size_t)kvh * HS;

  const uint32_t sQ = smem_u32(smem);
  const uint32_t sK = sQ + K::Q_BYTES;       // sK + buf * KV_BYTES
  const uint32_t sV = sK + 2 * K::KV_BYTES;  // sV + buf * KV_BYTES
  // MASKED: the K/V tiles of the mask's range (maybe none: a ring pair), and the first key of
  // each row in shared memory after the K/V buffers (sLo, local key indices, INT_MAX past Tq:
  // problem_mask.cuh); row q0 + x's last key is min(x + hi_base, Tk - 1). (The rows' keys kept
  // in registers, or the range's FULL tiles, spill at HS 64 or 128.)
  [[maybe_unused]] TileRange range{};
  [[maybe_unused]] int hi_base;
  [[maybe_unused]] const uint32_t sLo = sQ + K::SMEM;
  if constexpr (MASKED) {
    const ProblemMask pm(mk, b, Tq, Tk);
    range = pm.kv_tiles(q0, q0 + Br - 1, Bc);
    for (int r = tid; r < Br; r += NTHREADS) st_shared_u32(sLo + r * 4, pm.lo_key(q0 + r));
    hi_base = q0 + pm.q_pos0 - pm.k_pos0;  // (sLo is read after the loop's first barrier)
  }
  // Causal: only the tiles up to the diagonal (Tq == Tk); else every key tile.
  const int n_tiles =
      MASKED ? range.end - range.begin : ((causal ? min(q0 + Br, Tq) : Tk) + Bc - 1) / Bc;
  const int j_end = MASKED ? range.end : n_tiles;  // one past the first (rightmost) tile

  if (!MASKED || n_tiles > 0) {
    load_tile_async<Br, HS, NTHREADS>(sQ, gQ, ld, Tq - q0, tid);
    {
      const int k0 = (j_end - 1) * Bc;
      load_tile_async<Bc, HS, NTHREADS>(sK, gK + (size_t)k0 * kld, kld, Tk - k0, tid);
      load_tile_async<Bc, HS, NTHREADS>(sV, gV + (size_t)k0 * kld, kld, Tk - k0, tid);
    }
    cp_async_commit();
  }

  // Per-lane ldmatrix address parts. Every 8x8 matrix starts on a row that is a multiple of
  // 8, so its swizzle term (row % 8) is lane % 8. Chunk 2k + c (c = 0/1 by lane) of a row then
  // sits at byte ((2k + c) ^ (lane % 8)) * 16 = off[k % 4] + (k / 4) * 128: four per-lane
  // offsets plus compile-time immediates per operand.
  const int sw = lane & 7;
  // A (Q rows): matrices (rows 0-7 | 8-15) x (chunk +0 | +1) -> a0 a1 a2 a3
  const int qa_row = warp * WM + (lane & 7) + ((lane >> 3) & 1) * 8, qa_chk = lane >> 4;
  // B (K rows, non-trans): matrices (keys 0-7, chunk +0) (keys 0-7, +1) (keys 8-15, +0) (8-15, +1)
  const int kb_row = (lane & 7) + (lane >> 4) * 8, kb_chk = (lane >> 3) & 1;
  // B (V rows, trans): matrices (keys 0-7, chunk +0) (keys 8-15, +0) (keys 0-7, +1) (8-15, +1)
  const int vb_row = (lane & 7) + ((lane >> 3) & 1) * 8, vb_chk = lane >> 4;
  uint32_t q_off[4], k_off[4], v_off[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    q_off[k] = sQ + qa_row * ROWB + (((2 * k + qa_chk) ^ sw) << 4);
    k_off[k] = kb_row * ROWB + (((2 * k + kb_chk) ^ sw) << 4);
    v_off[k] = vb_row * ROWB + (((2 * k + vb_chk) ^ sw) << 4);
  }

  float o[MT][NO][4];
  float m_i[MT][2], l_i[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int nt = 0; nt < NO; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[mt][nt][e] = 0.f;
    m_i[mt][0] = m_i[mt][1] = -INFINITY;
    l_i[mt][0] = l_i[mt][1] = 0.f;
  }
  uint32_t qf[K::Q_IN_REGS ? MT : 1][K::Q_IN_REGS ? KQ : 1][4];

  for (int it = 0; it < n_tiles; ++it) {
    const int j = j_end - 1 - it;
    const int buf = it & 1;
    if (it + 1 < n_tiles) {
      const int k0 = (j - 1) * Bc;
      const uint32_t nb = (buf ^ 1) * K::KV_BYTES;
      load_tile_async<Bc, HS, NTHREADS>(sK + nb, gK + (size_t)k0 * kld, kld, Tk - k0, tid);
      load_tile_async<Bc, HS, NTHREADS>(sV + nb, gV + (size_t)k0 * kld, kld, Tk - k0, tid);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();

    if constexpr (K::Q_IN_REGS) {
      if (it == 0) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int kk = 0; kk < KQ; ++kk)
            ldmatrix_x4(qf[mt][kk][0], qf[mt][kk][1], qf[mt][kk][2], qf[mt][kk][3],
                        q_off[kk & 3] + (kk >> 2) * 128 + mt * 16 * ROWB);
      }
    }

    // A warp whose query rows all precede this tile's first key (diagonal tiles only) has
    // nothing to add: every score would be masked. MASKED: a warp whose rows see none of the
    // tile's keys skips it, and one whose rows all see all of them (lo of its last row, hi of
    // its first: both monotone) computes it unmasked.
    [[maybe_unused]] bool warp_full;
    if constexpr (MASKED) {
      const int w0 = warp * WM, k0 = j * Bc;
      warp_full = ld_shared_s32(sLo + (w0 + WM - 1) * 4) <= k0 && k0 + Bc - 1 <= hi_base + w0 &&
                  k0 + Bc <= Tk;
    }
    const bool warp_skip =
        MASKED ? j * Bc > hi_base + warp * WM + WM - 1 ||
                     ld_shared_s32(sLo + warp * WM * 4) > j * Bc + Bc - 1
               : causal && j * Bc > q0 + warp * WM + WM - 1;
    if (!warp_skip) {
      // ---- S_ij = Q_i K_j^T ----
      const uint32_t sKb = sK + buf * K::KV_BYTES, sVb = sV + buf * K::KV_BYTES;
      float s[MT][NS][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NS; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.f;
#pragma unroll
      for (int kk = 0; kk < KQ; ++kk) {
        uint32_t a[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          if constexpr (K::Q_IN_REGS) {
#pragma unroll
            for (int e = 0; e < 4; ++e) a[mt][e] = qf[mt][kk][e];
          } else {
            ldmatrix_x4(a[mt][0], a[mt][1], a[mt][2], a[mt][3],
                        q_off[kk & 3] + (kk >> 2) * 128 + mt * 16 * ROWB);
          }
        }
#pragma unroll
        for (int np = 0; np < NS / 2; ++np) {
          uint32_t b0, b1, b2, b3;
          ldmatrix_x4(b0, b1, b2, b3, sKb + k_off[kk & 3] + (kk >> 2) * 128 + np * 16 * ROWB);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma_bf16(s[mt][2 * np], a[mt], b0, b1);
            mma_bf16(s[mt][2 * np + 1], a[mt], b2, b3);
          }
        }
      }

      // ---- MASKED: the mask, where the warp's rows do not see the whole tile ----
      if constexpr (MASKED) {
        if (!warp_full) {
#pragma unroll
          for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
              const int row = warp * WM + mt * 16 + g + r * 8;
              const int lo = ld_shared_s32(sLo + row * 4), hi = min(hi_base + row, Tk - 1);
#pragma unroll
              for (int nt = 0; nt < NS; ++nt)
#pragma unroll
                for (int c = 0; c < 2; ++c) {
                  const int key = j * Bc + nt * 8 + 2 * t4 + c;
                  if (key < lo || key > hi) s[mt][nt][2 * r + c] = -INFINITY;
                }
            }
        }
      } else if (causal ? tile_needs_mask(q0, j * Bc, Bc) : j * Bc + Bc > Tk) {
        // ---- causal mask, diagonal tiles only (not causal: keys past Tk, last tile only) ----
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int nt = 0; nt < NS; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int row = q0 + warp * WM + mt * 16 + g + (e >> 1) * 8;
              const int key = j * Bc + nt * 8 + 2 * t4 + (e & 1);
              if (causal ? key > row : key >= Tk) s[mt][nt][e] = -INFINITY;
            }
      }

      // ---- online softmax: m_i, l_i, rescale O_i, P_ij = exp2(...) in place of S_ij ----
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const float alpha = online_softmax_row<NS>(
              [&](int n, int e) -> float& { return s[mt][n][e]; }, r, m_i[mt][r], l_i[mt][r],
              scale_log2);
#pragma unroll
          for (int nt = 0; nt < NO; ++nt) {
            o[mt][nt][2 * r] *= alpha;
            o[mt][nt][2 * r + 1] *= alpha;
          }
        }

        // ---- O_i += P_ij V_j (P_ij from registers as the A operand) ----
#pragma unroll
      for (int kc = 0; kc < KP; ++kc) {
        uint32_t a[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          a[mt][0] = pack_bf16(s[mt][2 * kc][0], s[mt][2 * kc][1]);
          a[mt][1] = pack_bf16(s[mt][2 * kc][2], s[mt][2 * kc][3]);
          a[mt][2] = pack_bf16(s[mt][2 * kc + 1][0], s[mt][2 * kc + 1][1]);
          a[mt][3] = pack_bf16(s[mt][2 * kc + 1][2], s[mt][2 * kc + 1][3]);
        }
#pragma unroll
        for (int np = 0; np < NO / 2; ++np) {
          uint32_t b0, b1, b2, b3;
          ldmatrix_x4_trans(b0, b1, b2, b3, sVb + v_off[np & 3] + (np >> 2) * 128 + kc * 16 * ROWB);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma_bf16(o[mt][2 * np], a[mt], b0, b1);
            mma_bf16(o[mt][2 * np + 1], a[mt], b2, b3);
          }
        }
      }
    }
    __syncthreads();  // every warp is done with buffer `buf` before it is refilled
  }

  // ---- epilogue (fwd_epilogue.cuh): O_i / l_i, LSE_i ----
  float* lse_bh = p.lse + ((size_t)b * NH + h) * p.lse_T;
  if constexpr (F32_RUN) {
    // the ring's running (O, LSE), overwritten or merged (fwd_epilogue.cuh's merge). Each row's
    // LSE is read by the 4 threads of its quad and written by one: a __syncwarp that every lane
    // reaches splits the reads from the write.
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float l = quad_sum(l_i[mt][r]);
        const float inv = inv_row_sum(l);
        const int row = q0 + warp * WM + mt * 16 + g + r * 8;
        const bool ok = row < Tq;
        const RingMerge w =
            ring_merge_weights(row_lse(l, m_i[mt][r], scale), lse_bh + row, p.merge && ok);
        __syncwarp();
        if (ok) {
          if (t4 == 0) lse_bh[row] = w.lse;
          float* orow = p.o_run + (size_t)b * p.o_bs + (size_t)row * p.o_ld + (size_t)h * HS;
#pragma unroll
          for (int nt = 0; nt < NO; ++nt)
            ring_merge_o2(orow + nt * 8 + 2 * t4, o[mt][nt][2 * r], o[mt][nt][2 * r + 1], inv, w,
                          p.merge);
        }
      }
  } else {
    // bf16 O_i staged in this warp's own rows of the Q tile (swizzled rows of HS bf16):
    // epilogue_stage_row's steps, written out (through the helper the LSE store's address
    // arithmetic is ordered differently and the SASS is no longer the measured kernel's)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float l = quad_sum(l_i[mt][r]);
        const float inv = inv_row_sum(l);
        const int row_local = warp * WM + mt * 16 + g + r * 8;
        const int row = q0 + row_local;
        if (t4 == 0 && row < Tq) lse_bh[row] = row_lse(l, m_i[mt][r], scale);
#pragma unroll
        for (int nt = 0; nt < NO; ++nt) {
          const uint32_t v = pack_bf16(o[mt][nt][2 * r] * inv, o[mt][nt][2 * r + 1] * inv);
          st_shared_u32(sQ + row_local * ROWB + ((nt ^ (row_local & 7)) << 4) + t4 * 4, v);
        }
      }
    __syncwarp();
    __nv_bfloat16* gO = p.out + (size_t)b * p.o_bs + (size_t)q0 * p.o_ld + (size_t)h * HS;
    epilogue_store_rows<WM, HS / 8, 32>(
        lane, warp * WM, [&](int row, int ch) { return sQ + swz<HS>(row, ch); },
        [&](int row) { return gO + (size_t)row * p.o_ld; }, [&](int row) { return q0 + row < Tq; });
  }
}

template <class K, bool CAUSAL, bool F32_RUN, bool MASKED = false>
static void launch_fwd(const FwdProblem& p, cudaStream_t stream) {
  constexpr int smem = K::SMEM + (MASKED ? K::Br * 4 : 0);  // MASKED: each row's first key
  allow_dynamic_smem(reinterpret_cast<const void*>(flash_fwd_kernel<K, CAUSAL, F32_RUN, MASKED>),
                     smem);
  const float scale = 1.f / sqrtf((float)K::HS);
  dim3 grid((unsigned)(p.B * p.NH), (unsigned)ceil_div(p.Tq, K::Br));
  KernelMask<MASKED> mk;
  if constexpr (MASKED) mk = p;  // the problem's AttnProblemMask
  flash_fwd_kernel<K, CAUSAL, F32_RUN, MASKED>
      <<<grid, K::NTHREADS, smem, stream>>>(p, scale * kLog2e, scale, mk);
  CUDA_CHECK_LAUNCH();
}

template <class K>
static void launch_problem(const FwdProblem& p, cudaStream_t stream) {
  CHECK((p.out != nullptr) != (p.o_run != nullptr), "internal: flash forward: one output");
  if (!p.mask.is_causal()) {  // a mask in global positions (the whole sequence or a ring pair)
    check_problem_mask(p);
    if (!p.o_run)
      launch_fwd<K, false, false, true>(p, stream);
    else
      launch_fwd<K, false, true, true>(p, stream);
    return;
  }
  CHECK(!p.causal || p.Tq == p.Tk, "internal: flash forward: causal needs Tq == Tk");
  CHECK(p.causal || p.o_run, "internal: flash forward: a full (non-causal) problem is a ring pair");
  // The whole-sequence forward (causal, bf16) and the ring's two kinds of pair (its own chunks:
  // causal; another rank's block: full), both into the fp32 running O.
  if (!p.o_run)
    launch_fwd<K, true, false>(p, stream);
  else if (p.causal)
    launch_fwd<K, true, true>(p, stream);
  else
    launch_fwd<K, false, true>(p, stream);
}

void forward_problem(const FwdProblem& p, cudaStream_t stream) {
  switch (p.HS) {
    case 64:
      launch_problem<FwdTile64>(p, stream);
      break;
    case 128:
      launch_problem<FwdTile128>(p, stream);
      break;
    default:
      THROW_ERROR("flash attention forward: head size %d is not supported (64 or 128)", p.HS);
  }
}

FwdProblem whole_sequence_forward_problem(__nv_bfloat16* out, float* lse,
                                          const __nv_bfloat16* qkv, const AttnShape& s,
                                          const AttnMask& mask) {
  FwdProblem p{};
  set_whole_sequence_qkv(p, qkv, s, mask);
  p.lse = lse;
  p.out = out;
  p.o_ld = (size_t)s.NH * s.HS;
  p.o_bs = (size_t)s.T * p.o_ld;
  return p;
}

void forward_bf16(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, const AttnShape& s,
                  const AttnMask& mask, cudaStream_t stream) {
  forward_problem(whole_sequence_forward_problem(out, lse, qkv, s, mask), stream);
}

}  // namespace flash
