// flash1.cu — the "flash1" attention backend: FlashAttention-1's schedule (Dao et al. 2022,
// Algorithms 1 and 2 / 4), causal, on tensor cores (mma.sync m16n8k16 bf16, fp32 accumulate,
// the same wrappers, swizzled tiles and fragment tricks as our FlashAttention-2 in
// flash_fwd.cu), so that what `--attn flash1` vs `--attn flash` measures is the loop order and
// the parallelism, not CUDA cores vs tensor cores.
//
// What it computes: exactly what "flash" does (layout and maths: attention_ref.h): out (B, T, NH,
// HS) from the packed qkv (B, T, NH + 2*NKV, HS) read in place, scale 1/sqrt(HS), query head h
// on kv head h / (NH/NKV); saved = LSE (B, NH, T) fp32 (natural log, interchangeable with
// flash's); backward overwrites dqkv. CPU twin, same loop order: attention_flash_*_ref with
// FlashOrder::kFA1. Causal only: its spec refuses document masks and windows (backends.cpp).
//
// Forward (Algorithm 1), one thread block per (b, h), 4 warps, Br = Bc = 64, warp w owns rows
// 16w .. 16w+15 of every Q tile:
//   for j = 0 .. Tc-1:                                        (sequential inside the block)
//     load K_j, V_j -> smem
//     for i = j Bc / Br .. Tr-1:                               (Q tiles that reach key j Bc)
//       load Q_i -> smem
//       read m_i, l_i, O_i from device memory (fp32; j == 0: m_i = -inf, l_i = 0, O_i = 0)
//       S_ij  = Q_i K_j^T                      (mma.sync; masked where key > query)
//       m_new = max(m_i, rowmax S_ij);  P~_ij = exp(S_ij - m_new)   (exp2, scale folded in)
//       l_i   = e^(m_i - m_new) l_i + rowsum P~_ij
//       O_i   = e^(m_i - m_new) O_i + P~_ij V_j   (P~ from registers as the A operand)
//       if j is the last K/V tile that tile i reaches, j == (min(q0 + Br, T) - 1) / Bc:
//         out_i = O_i / l_i (bf16), LSE_i = m_i scale + log l_i
//       else write m_i, l_i, O_i back to device memory
//   O_i is kept UN-normalised between passes and divided once at the end (the paper rescales
//   by diag(l_new)^-1 each pass; same result, fewer multiplies, same HBM traffic).
//
// Backward (Algorithm 2/4), one thread block per (b, kv head), 4 warps, Br = Bc = 64, warp w
// owns keys 16w .. 16w+15 of K_j (its dK_j, dV_j in registers) and query rows 16w .. of dQ_i:
//   D = rowsum(dO o O) for the group's query heads -> device memory (the block, first)
//   for j = 0 .. Tc-1:
//     load K_j, V_j -> smem;  dK_j = dV_j = 0 (registers)
//     for each query head h of the group, for i = j Bc / Br .. Tr-1:
//       load Q_i, dO_i, LSE_i, D_i -> smem
//       S_ij^T  = K_j Q_i^T;  P_ij^T = exp(S_ij^T scale - LSE_i) (0 where key > query)
//       dP_ij^T = V_j dO_i^T;  dS_ij^T = P_ij^T o (dP_ij^T - D_i)
//       dV_j += P_ij^T dO_i;  dK_j += dS_ij^T Q_i       (transposed products: the key rows are
//                                                       the mma M dimension, as in flash_bwd.cu)
//       dS_ij -> smem (bf16);  read dQ_i from device memory (fp32; j == 0: 0)
//       dQ_i += dS_ij K_j;  last K/V tile of tile i: dQ_i scale -> bf16 into dqkv, else write
//       dQ_i back (fp32)
//     write dK_j scale, dV_j (bf16)
//
// Why this is slower than FlashAttention-2 ("flash"), the point of keeping it:
//   * HBM traffic of the accumulators: every (j, i) pass reads and writes O_i (Br x HS fp32),
//     m_i and l_i: about 2 * 4 * HS bytes per query row per K/V tile, i.e. ~T/Bc round trips of
//     the whole fp32 O per head (causal: half). At T = 4096, HS 64 that is ~32 MB moved per
//     head against 1 MB of Q, K, V: bandwidth-bound where FA2 is compute-bound. FA2 keeps O_i,
//     m_i, l_i in registers for the whole j loop and writes O once. The backward pays the same
//     for dQ_i (read-modify-write fp32 per pass), which FA2 sums with one reduce-add per pass
//     from many blocks in parallel.
//   * Parallelism: B * NH blocks forward (B * NKV backward), each walking its j loop
//     sequentially. At B * NH = 12 and 132 SMs, 90% of the GPU idles; FA2 also splits over Q
//     tiles (forward) and K/V tiles (backward). This one-block-per-head grid is kept on purpose:
//     it is exactly what FA2 changed.
//   * K/V tiles are loaded once per j (good), but Q_i and dO_i are re-loaded for every j: the
//     roles of the operands are swapped, not the total bytes.
// No tuning was done (correctness first; no GPU was available when it was written): no
// double-buffering of the tile loads, no warp-level causal skipping.
//
// Scratch (fp32, Tp = T rounded up to 64 so that padded rows of the last tile need no
// predication in device memory): forward O (B, NH, Tp, HS) | m (B, NH, Tp) | l (B, NH, Tp);
// backward dQ (B, NH, Tp, HS) | D (B, NH, Tp). Every element is written before it is read (j == 0
// initialises), so poisoned scratch is harmless. One block owns all of a head's O/m/l and a kv
// group's dQ, so there are no races and no atomics: forward, dQ, dK and dV are all bitwise
// deterministic.
//
// Limits: bf16 only (the FP32 build reports it unsupported); HS 64 or 128; any T >= 1 (ragged
// tiles: zero-filled loads, masked keys, predicated stores); 16-byte aligned buffers
// (cudaMalloc'd ones are); B * NH < 2^31.
//
// One file of over 600 lines: forward and backward of one schedule belong together (one op per
// file, DESIGN.md), and they share the tile traits and lane offsets above them.
//
// Test:  make build/test_gpu && ./build/test_gpu --gtest_filter='AttentionGpu*flash1*'
//        (tests/gpu/test_attention.cu: vs the CPU oracle with the self-calibrating bf16 rule,
//        poisoned outputs, repeat determinism); CPU twin: build/test_cpu
//        --gtest_filter='AttentionRef.Flash1*'
// Bench: ./build/flashgpt bench-attention --backends flash,flash1 --hs 64 --seq-lens 1024,4096
//        python3 scripts/bench_attention.py
#include "kernels/attention/attention.cuh"
#include "kernels/attention/flash1_tiles.h"

#include <cmath>

#include "kernels/attention/flash_common.cuh"
#include "kernels/attention/online_softmax.cuh"

namespace flash1 {

using flash::cp_async_commit;
using flash::cp_async_wait;
using flash::fast_exp2;
using flash::kLog2e;
using flash::ldmatrix_x4;
using flash::ldmatrix_x4_trans;
using flash::load_tile_async;
using flash::mma_bf16;
using flash::pack_bf16;
using flash::quad_max;
using flash::quad_sum;
using flash::smem_u32;
using flash::swz;

constexpr int kTile = kFlash1Tile;  // Br = Bc (flash1_tiles.h); also the padding of Tp

template <int HS_>
struct Fa1Tile {
  static constexpr int HS = HS_, Br = kTile, Bc = kTile, NWARPS = 4;
  static constexpr int NTHREADS = 32 * NWARPS;
  static constexpr int WM = 16;      // query rows (forward, dQ) or keys (dK, dV) per warp
  static constexpr int NS = Bc / 8;  // 8-column n-tiles of S_ij (forward) / S_ij^T (backward)
  static constexpr int NO = HS / 8;  // 8-column n-tiles of O_i, dQ_i, dK_j, dV_j
  static constexpr int KQ = HS / 16; // k-steps over the head dim
  static constexpr int KP = Bc / 16; // k-steps over a tile's 64 rows
  static constexpr int TILE_BYTES = kTile * HS * 2;
  static constexpr int DS_BYTES = Br * Bc * 2;
  static constexpr int FWD_SMEM = 3 * TILE_BYTES;                    // Q_i, K_j, V_j
  static constexpr int BWD_SMEM = 4 * TILE_BYTES + DS_BYTES + 2 * Br * 4;  // + dO_i, dS, LSE, D
  static_assert(HS == 64 || HS == 128, "head size 64 or 128");
  static_assert(Br == NWARPS * WM && Bc == NWARPS * WM, "each warp owns 16 rows");
  static_assert(KQ <= 8 && NO / 2 <= 8, "ldmatrix offsets cover 8 chunks x 2 halves");
  static_assert(BWD_SMEM <= 227 * 1024, "shared memory per block");
};

// Per-lane ldmatrix address parts (as in flash_fwd.cu): every 8x8 matrix starts on a row that
// is a multiple of 8, so the swizzle term (row % 8) is lane % 8, and chunk 2k + c of a row sits
// at off[k % 4] + (k / 4) * 128.
struct LaneOffsets {
  uint32_t a[4];  // A operand (16 rows x 16 cols), non-trans, rows base_row + 0..15
  uint32_t b[4];  // B operand from rows = n (non-trans): two 8-column n-tiles per x4
  uint32_t t[4];  // B operand from rows = k (trans): two 8-column n-tiles per x4
};
template <int ROWB>
__device__ __forceinline__ LaneOffsets lane_offsets(int lane, int a_base_row) {
  const int sw = lane & 7;
  const int a_row = a_base_row + (lane & 7) + ((lane >> 3) & 1) * 8, a_chk = lane >> 4;
  const int b_row = (lane & 7) + (lane >> 4) * 8, b_chk = (lane >> 3) & 1;
  const int t_row = (lane & 7) + ((lane >> 3) & 1) * 8, t_chk = lane >> 4;
  LaneOffsets o;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    o.a[k] = a_row * ROWB + (((2 * k + a_chk) ^ sw) << 4);
    o.b[k] = b_row * ROWB + (((2 * k + b_chk) ^ sw) << 4);
    o.t[k] = t_row * ROWB + (((2 * k + t_chk) ^ sw) << 4);
  }
  return o;
}

// acc[NN][4] += A (16 x 16 KSTEPS, rows of sA at the lane's a offsets) * B^T where B's rows are
// the n index (sB rows, non-trans): acc = A_rows . B_rows^T. NN = 8-column n-tiles (even).
template <int KSTEPS, int NN>
__device__ __forceinline__ void mma_abt(float (&acc)[NN][4], uint32_t sA, uint32_t sB,
                                        const LaneOffsets& lo, int ROWB) {
#pragma unroll
  for (int kk = 0; kk < KSTEPS; ++kk) {
    uint32_t a[4];
    ldmatrix_x4(a[0], a[1], a[2], a[3], sA + lo.a[kk & 3] + (kk >> 2) * 128);
#pragma unroll
    for (int np = 0; np < NN / 2; ++np) {
      uint32_t b0, b1, b2, b3;
      ldmatrix_x4(b0, b1, b2, b3, sB + lo.b[kk & 3] + (kk >> 2) * 128 + np * 16 * ROWB);
      mma_bf16(acc[2 * np], a, b0, b1);
      mma_bf16(acc[2 * np + 1], a, b2, b3);
    }
  }
}

// acc[NN][4] += P (16 x 16 KP, given as C fragments p[2 KP][4], packed to bf16 A fragments) * B
// where B's rows are the k index (sB rows, trans), NN = 8-column n-tiles of B's columns.
template <int KP, int NN>
__device__ __forceinline__ void mma_pb(float (&acc)[NN][4], const float (&p)[2 * KP][4],
                                       uint32_t sB, const LaneOffsets& lo, int ROWB) {
#pragma unroll
  for (int kc = 0; kc < KP; ++kc) {
    uint32_t a[4];
    a[0] = pack_bf16(p[2 * kc][0], p[2 * kc][1]);
    a[1] = pack_bf16(p[2 * kc][2], p[2 * kc][3]);
    a[2] = pack_bf16(p[2 * kc + 1][0], p[2 * kc + 1][1]);
    a[3] = pack_bf16(p[2 * kc + 1][2], p[2 * kc + 1][3]);
#pragma unroll
    for (int np = 0; np < NN / 2; ++np) {
      uint32_t b0, b1, b2, b3;
      ldmatrix_x4_trans(b0, b1, b2, b3, sB + lo.t[np & 3] + (np >> 2) * 128 + kc * 16 * ROWB);
      mma_bf16(acc[2 * np], a, b0, b1);
      mma_bf16(acc[2 * np + 1], a, b2, b3);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// forward

template <int HS>
__global__ void __launch_bounds__(128, 1)
    flash1_fwd_kernel(__nv_bfloat16* __restrict__ out, float* __restrict__ lse,
                      float* __restrict__ Oacc, float* __restrict__ macc,
                      float* __restrict__ lacc, const __nv_bfloat16* __restrict__ qkv, int T,
                      int Tp, int NH, int NKV, float scale_log2, float scale) {
  using K = Fa1Tile<HS>;
  constexpr int Br = K::Br, Bc = K::Bc, NS = K::NS, NO = K::NO, KQ = K::KQ, KP = K::KP,
                NTHREADS = K::NTHREADS;
  constexpr int ROWB = HS * 2;
  extern __shared__ __align__(128) unsigned char smem[];

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t4 = lane & 3;
  const int b = blockIdx.x / NH, h = blockIdx.x % NH;
  const int kvh = h / (NH / NKV);
  const size_t ld = (size_t)(NH + 2 * NKV) * HS;
  const size_t bh = (size_t)b * NH + h;
  const __nv_bfloat16* gQ = qkv + (size_t)b * T * ld + (size_t)h * HS;
  const __nv_bfloat16* gK = qkv + (size_t)b * T * ld + (size_t)(NH + kvh) * HS;
  const __nv_bfloat16* gV = qkv + (size_t)b * T * ld + (size_t)(NH + NKV + kvh) * HS;
  float* O_bh = Oacc + bh * Tp * HS;
  float* m_bh = macc + bh * Tp;
  float* l_bh = lacc + bh * Tp;
  float* lse_bh = lse + bh * T;

  const uint32_t sQ = smem_u32(smem), sK = sQ + K::TILE_BYTES, sV = sK + K::TILE_BYTES;
  const LaneOffsets lo = lane_offsets<ROWB>(lane, warp * 16);
  const int Tr = (T + Br - 1) / Br, Tc = (T + Bc - 1) / Bc;

  for (int j = 0; j < Tc; ++j) {
    const int k0 = j * Bc;
    __syncthreads();  // every warp is done with the previous K_j, V_j
    load_tile_async<Bc, HS, NTHREADS>(sK, gK + (size_t)k0 * ld, ld, T - k0, tid);
    load_tile_async<Bc, HS, NTHREADS>(sV, gV + (size_t)k0 * ld, ld, T - k0, tid);
    cp_async_commit();
    for (int i = k0 / Br; i < Tr; ++i) {
      const int q0 = i * Br;
      __syncthreads();  // every warp is done with the previous Q_i
      load_tile_async<Br, HS, NTHREADS>(sQ, gQ + (size_t)q0 * ld, ld, T - q0, tid);
      cp_async_commit();

      const int row0 = q0 + warp * 16 + g;  // this lane's rows: row0, row0 + 8 (< Tp)
      const bool last = j == (min(q0 + Br, T) - 1) / Bc;

      // ---- read m_i, l_i, O_i (or initialise on the first pass) while Q_i is in flight;
      //      the previous pass's writes (m_i, l_i by another lane of the quad) are ordered
      //      before these reads by the __syncthreads above ----
      float o[NO][4], m_i[2], l_i[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = row0 + 8 * r;
        if (j == 0) {
          m_i[r] = -INFINITY;
          l_i[r] = 0.f;
#pragma unroll
          for (int nt = 0; nt < NO; ++nt) o[nt][2 * r] = o[nt][2 * r + 1] = 0.f;
        } else {
          m_i[r] = m_bh[row];
          l_i[r] = l_bh[row];
#pragma unroll
          for (int nt = 0; nt < NO; ++nt) {
            const float2 v =
                *reinterpret_cast<const float2*>(O_bh + (size_t)row * HS + nt * 8 + 2 * t4);
            o[nt][2 * r] = v.x;
            o[nt][2 * r + 1] = v.y;
          }
        }
      }

      cp_async_wait<0>();
      __syncthreads();

      // ---- S_ij = Q_i K_j^T ----
      float s[NS][4];
#pragma unroll
      for (int nt = 0; nt < NS; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[nt][e] = 0.f;
      mma_abt<KQ, NS>(s, sQ, sK, lo, ROWB);

      // ---- causal mask (also masks the zero-filled keys >= T of a ragged last tile) ----
      if (flash::tile_needs_mask(q0, k0, Bc)) {
#pragma unroll
        for (int nt = 0; nt < NS; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int row = row0 + (e >> 1) * 8;
            const int key = k0 + nt * 8 + 2 * t4 + (e & 1);
            if (key > row) s[nt][e] = -INFINITY;
          }
      }

      // ---- online softmax (online_softmax.cuh) against the state read from device memory;
      //      l_i is the full row sum: it goes to device memory ----
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float alpha = flash::online_softmax_row<NS, true>(
            [&](int n, int e) -> float& { return s[n][e]; }, r, m_i[r], l_i[r], scale_log2);
#pragma unroll
        for (int nt = 0; nt < NO; ++nt) {
          o[nt][2 * r] *= alpha;
          o[nt][2 * r + 1] *= alpha;
        }
      }

      // ---- O_i += P~_ij V_j ----
      mma_pb<KP, NO>(o, s, sV, lo, ROWB);

      // ---- write back, or finish the rows ----
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = row0 + 8 * r;
        if (last) {
          if (row < T) {
            const float inv = 1.f / l_i[r];
            __nv_bfloat16* orow = out + (((size_t)b * T + row) * NH + h) * HS;
#pragma unroll
            for (int nt = 0; nt < NO; ++nt)
              *reinterpret_cast<uint32_t*>(orow + nt * 8 + 2 * t4) =
                  pack_bf16(o[nt][2 * r] * inv, o[nt][2 * r + 1] * inv);
            if (t4 == 0) lse_bh[row] = m_i[r] * scale + logf(l_i[r]);
          }
        } else {
          if (t4 == 0) {
            m_bh[row] = m_i[r];
            l_bh[row] = l_i[r];
          }
#pragma unroll
          for (int nt = 0; nt < NO; ++nt)
            *reinterpret_cast<float2*>(O_bh + (size_t)row * HS + nt * 8 + 2 * t4) =
                make_float2(o[nt][2 * r], o[nt][2 * r + 1]);
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// backward

template <int HS>
__global__ void __launch_bounds__(128, 1)
    flash1_bwd_kernel(__nv_bfloat16* __restrict__ dqkv, float* __restrict__ dQacc,
                      float* __restrict__ Dvec, const __nv_bfloat16* __restrict__ dout,
                      const __nv_bfloat16* __restrict__ qkv, const __nv_bfloat16* __restrict__ out,
                      const float* __restrict__ lse, int T, int Tp, int NH, int NKV,
                      float scale_log2, float scale) {
  using K = Fa1Tile<HS>;
  constexpr int Br = K::Br, Bc = K::Bc, NS = K::NS, NO = K::NO, KQ = K::KQ, KP = K::KP,
                NTHREADS = K::NTHREADS;
  constexpr int ROWB = HS * 2;  // bytes per K/V/Q/dO smem row
  constexpr int DSB = Bc * 2;   // bytes per dS smem row (64 keys)
  extern __shared__ __align__(128) unsigned char smem[];

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t4 = lane & 3;
  const int b = blockIdx.x / NKV, kvh = blockIdx.x % NKV;
  const int G = NH / NKV;
  const size_t ld = (size_t)(NH + 2 * NKV) * HS, ldo = (size_t)NH * HS;
  const __nv_bfloat16* gK = qkv + (size_t)b * T * ld + (size_t)(NH + kvh) * HS;
  const __nv_bfloat16* gV = qkv + (size_t)b * T * ld + (size_t)(NH + NKV + kvh) * HS;

  const uint32_t sK = smem_u32(smem), sV = sK + K::TILE_BYTES, sQ = sV + K::TILE_BYTES,
                 sdO = sQ + K::TILE_BYTES, sdS = sdO + K::TILE_BYTES;
  float* fL = reinterpret_cast<float*>(smem + 4 * K::TILE_BYTES + K::DS_BYTES);
  float* fD = fL + Br;
  __nv_bfloat16* hdS = reinterpret_cast<__nv_bfloat16*>(smem + 4 * K::TILE_BYTES);

  // ---- D = rowsum(dO o O) for the group's query heads, rows (h, t) ----
  for (int idx = tid; idx < G * T; idx += NTHREADS) {
    const int h = kvh * G + idx / T, t = idx % T;
    const size_t orow = (((size_t)b * T + t) * NH + h) * HS;
    float acc = 0.f;
#pragma unroll 4
    for (int c = 0; c < HS / 8; ++c) {
      const uint4 a = *reinterpret_cast<const uint4*>(dout + orow + c * 8);
      const uint4 o = *reinterpret_cast<const uint4*>(out + orow + c * 8);
      const uint32_t av[4] = {a.x, a.y, a.z, a.w}, ov[4] = {o.x, o.y, o.z, o.w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float2 x = flash::unpack_bf16(av[k]), y = flash::unpack_bf16(ov[k]);
        acc += x.x * y.x + x.y * y.y;
      }
    }
    Dvec[((size_t)b * NH + h) * Tp + t] = acc;
  }
  // (the __syncthreads at the top of the first pass makes D visible to the whole block)

  // Warp w: keys 16w.. of K_j / V_j as the A operand of S^T, dP^T; query rows 16w.. of dS as
  // the A operand of dQ.
  const LaneOffsets lo = lane_offsets<ROWB>(lane, warp * 16);
  const LaneOffsets lds = lane_offsets<DSB>(lane, warp * 16);
  const int Tr = (T + Br - 1) / Br, Tc = (T + Bc - 1) / Bc;

  for (int j = 0; j < Tc; ++j) {
    const int k0 = j * Bc;
    __syncthreads();  // every warp is done with the previous K_j, V_j (and D is written)
    load_tile_async<Bc, HS, NTHREADS>(sK, gK + (size_t)k0 * ld, ld, T - k0, tid);
    load_tile_async<Bc, HS, NTHREADS>(sV, gV + (size_t)k0 * ld, ld, T - k0, tid);
    cp_async_commit();

    float dk[NO][4], dv[NO][4];
#pragma unroll
    for (int nt = 0; nt < NO; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) dk[nt][e] = dv[nt][e] = 0.f;
    const int key0 = k0 + warp * 16 + g;  // this lane's keys: key0, key0 + 8

    for (int gh = 0; gh < G; ++gh) {
      const int h = kvh * G + gh;
      const size_t bh = (size_t)b * NH + h;
      const __nv_bfloat16* gQ = qkv + (size_t)b * T * ld + (size_t)h * HS;
      const __nv_bfloat16* gdO = dout + (size_t)b * T * ldo + (size_t)h * HS;
      float* dQ_bh = dQacc + bh * Tp * HS;
      for (int i = k0 / Br; i < Tr; ++i) {
        const int q0 = i * Br;
        __syncthreads();  // every warp is done with Q_i, dO_i, dS, LSE_i, D_i of the last pass
        load_tile_async<Br, HS, NTHREADS>(sQ, gQ + (size_t)q0 * ld, ld, T - q0, tid);
        load_tile_async<Br, HS, NTHREADS>(sdO, gdO + (size_t)q0 * ldo, ldo, T - q0, tid);
        cp_async_commit();
        if (tid < Br) {
          const int row = q0 + tid;
          // Padded rows (>= T): Q = dO = 0 there, so P^T = 1 and dS^T = 0; nothing reaches an
          // output. LSE and D are set to 0 rather than read (scratch past T is never written).
          fL[tid] = row < T ? lse[bh * T + row] * kLog2e : 0.f;
          fD[tid] = row < T ? Dvec[bh * Tp + row] : 0.f;
        }
        cp_async_wait<0>();
        __syncthreads();

        // ---- S^T = K_j Q_i^T, dP^T = V_j dO_i^T (warp: 16 keys x 64 queries) ----
        float st[NS][4], dpt[NS][4];
#pragma unroll
        for (int nt = 0; nt < NS; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) st[nt][e] = dpt[nt][e] = 0.f;
        mma_abt<KQ, NS>(st, sK, sQ, lo, ROWB);
        mma_abt<KQ, NS>(dpt, sV, sdO, lo, ROWB);

        // ---- P^T, dS^T (masked where key > query: also the zero-filled keys >= T) ----
#pragma unroll
        for (int nt = 0; nt < NS; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = key0 + (e >> 1) * 8;
            const int qc = nt * 8 + 2 * t4 + (e & 1);
            float p = 0.f, ds = 0.f;
            if (key <= q0 + qc) {
              p = fast_exp2(fmaf(st[nt][e], scale_log2, -fL[qc]));
              ds = p * (dpt[nt][e] - fD[qc]);
            }
            st[nt][e] = p;
            dpt[nt][e] = ds;
          }

        // ---- dV_j += P^T dO_i, dK_j += dS^T Q_i (registers) ----
        mma_pb<KP, NO>(dv, st, sdO, lo, ROWB);
        mma_pb<KP, NO>(dk, dpt, sQ, lo, ROWB);

        // ---- dS (queries x keys, bf16) -> smem for dQ_i ----
#pragma unroll
        for (int nt = 0; nt < NS; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int kl = warp * 16 + g + (e >> 1) * 8;  // key within the tile
            const int qc = nt * 8 + 2 * t4 + (e & 1);    // query within the tile
            const uint32_t byte = swz<Bc>(qc, kl >> 3) + (kl & 7) * 2;
            hdS[byte / 2] = __float2bfloat16_rn(dpt[nt][e]);
          }
        __syncthreads();

        // ---- dQ_i (rows 16w..) += dS_ij K_j: read-modify-write in device memory ----
        const int qrow0 = q0 + warp * 16 + g;  // this lane's query rows: qrow0, qrow0 + 8 (< Tp)
        float dq[NO][4];
#pragma unroll
        for (int r = 0; r < 2; ++r)
#pragma unroll
          for (int nt = 0; nt < NO; ++nt) {
            if (j == 0) {
              dq[nt][2 * r] = dq[nt][2 * r + 1] = 0.f;
            } else {
              const float2 v = *reinterpret_cast<const float2*>(
                  dQ_bh + (size_t)(qrow0 + 8 * r) * HS + nt * 8 + 2 * t4);
              dq[nt][2 * r] = v.x;
              dq[nt][2 * r + 1] = v.y;
            }
          }
#pragma unroll
        for (int kc = 0; kc < KP; ++kc) {
          uint32_t a[4];
          ldmatrix_x4(a[0], a[1], a[2], a[3], sdS + lds.a[kc & 3] + (kc >> 2) * 128);
#pragma unroll
          for (int np = 0; np < NO / 2; ++np) {
            uint32_t b0, b1, b2, b3;
            ldmatrix_x4_trans(b0, b1, b2, b3,
                              sK + lo.t[np & 3] + (np >> 2) * 128 + kc * 16 * ROWB);
            mma_bf16(dq[2 * np], a, b0, b1);
            mma_bf16(dq[2 * np + 1], a, b2, b3);
          }
        }
        const bool last = j == (min(q0 + Br, T) - 1) / Bc;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int row = qrow0 + 8 * r;
          if (last) {
            if (row < T) {
              __nv_bfloat16* dqr = dqkv + ((size_t)b * T + row) * ld + (size_t)h * HS;
#pragma unroll
              for (int nt = 0; nt < NO; ++nt)
                *reinterpret_cast<uint32_t*>(dqr + nt * 8 + 2 * t4) =
                    pack_bf16(dq[nt][2 * r] * scale, dq[nt][2 * r + 1] * scale);
            }
          } else {
#pragma unroll
            for (int nt = 0; nt < NO; ++nt)
              *reinterpret_cast<float2*>(dQ_bh + (size_t)row * HS + nt * 8 + 2 * t4) =
                  make_float2(dq[nt][2 * r], dq[nt][2 * r + 1]);
          }
        }
      }
    }

    // ---- dK_j scale, dV_j -> dqkv ----
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int key = key0 + 8 * r;
      if (key < T) {
        __nv_bfloat16* dkr = dqkv + ((size_t)b * T + key) * ld + (size_t)(NH + kvh) * HS;
        __nv_bfloat16* dvr = dqkv + ((size_t)b * T + key) * ld + (size_t)(NH + NKV + kvh) * HS;
#pragma unroll
        for (int nt = 0; nt < NO; ++nt) {
          *reinterpret_cast<uint32_t*>(dkr + nt * 8 + 2 * t4) =
              pack_bf16(dk[nt][2 * r] * scale, dk[nt][2 * r + 1] * scale);
          *reinterpret_cast<uint32_t*>(dvr + nt * 8 + 2 * t4) =
              pack_bf16(dv[nt][2 * r], dv[nt][2 * r + 1]);
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// launchers

template <int HS>
void launch_forward(__nv_bfloat16* out, float* lse, float* scratch, const __nv_bfloat16* qkv,
                    const AttnShape& s, cudaStream_t stream) {
  using K = Fa1Tile<HS>;
  allow_dynamic_smem(reinterpret_cast<const void*>(flash1_fwd_kernel<HS>), K::FWD_SMEM);
  const size_t Tp = flash1_padded_T(s.T), rows = (size_t)s.B * s.NH * Tp;
  float* O = scratch;
  float* m = O + rows * HS;
  float* l = m + rows;
  const float scale = 1.f / sqrtf((float)HS);
  flash1_fwd_kernel<HS><<<(unsigned)(s.B * s.NH), K::NTHREADS, K::FWD_SMEM, stream>>>(
      out, lse, O, m, l, qkv, s.T, (int)Tp, s.NH, s.NKV, scale * flash::kLog2e, scale);
  CUDA_CHECK_LAUNCH();
}

template <int HS>
void launch_backward(__nv_bfloat16* dqkv, float* scratch, const __nv_bfloat16* dout,
                     const __nv_bfloat16* qkv, const __nv_bfloat16* out, const float* lse,
                     const AttnShape& s, cudaStream_t stream) {
  using K = Fa1Tile<HS>;
  allow_dynamic_smem(reinterpret_cast<const void*>(flash1_bwd_kernel<HS>), K::BWD_SMEM);
  const size_t Tp = flash1_padded_T(s.T), rows = (size_t)s.B * s.NH * Tp;
  float* dQ = scratch;
  float* D = dQ + rows * HS;
  const float scale = 1.f / sqrtf((float)HS);
  flash1_bwd_kernel<HS><<<(unsigned)(s.B * s.NKV), K::NTHREADS, K::BWD_SMEM, stream>>>(
      dqkv, dQ, D, dout, qkv, out, lse, s.T, (int)Tp, s.NH, s.NKV, scale * flash::kLog2e, scale);
  CUDA_CHECK_LAUNCH();
}

}  // namespace flash1

namespace {

class Flash1Attention final : public Bf16AttentionBackend {
 public:
  Flash1Attention() : Bf16AttentionBackend(attention_spec("flash1")) {}

 protected:
  void forward_bf16(const Bf16ForwardArgs& a, cudaStream_t st) const override {
    float* scratch = static_cast<float*>(a.scratch);
    if (a.shape.HS == 64)
      flash1::launch_forward<64>(a.out, a.lse, scratch, a.qkv, a.shape, st);
    else
      flash1::launch_forward<128>(a.out, a.lse, scratch, a.qkv, a.shape, st);
  }
  void backward_bf16(const Bf16BackwardArgs& a, cudaStream_t st) const override {
    float* scratch = static_cast<float*>(a.scratch);
    if (a.shape.HS == 64)
      flash1::launch_backward<64>(a.dqkv, scratch, a.dout, a.qkv, a.out, a.lse, a.shape, st);
    else
      flash1::launch_backward<128>(a.dqkv, scratch, a.dout, a.qkv, a.out, a.lse, a.shape, st);
  }
};

}  // namespace

std::unique_ptr<AttentionBackend> make_flash1_attention() {
  return std::make_unique<Flash1Attention>();
}
