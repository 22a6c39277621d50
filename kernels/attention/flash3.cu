// flash3.cu — the "flash3" attention backend: the FlashAttention-3 forward schedule on sm_90a
// (Shah, Bikshandi, Zhang, Thakkar, Ramani, Dao 2024), and the backend class. The backward is
// flash3_bwd.cu (FlashAttention-2's recomputation on the FA3 warp-specialised schedule). Tile
// sizes: flash3_tiles.h; limits, saved/scratch bytes, cost: its spec kSpec_flash3
// (backends.cpp).
//
// Computes, for every (batch b, query head h, query t), causal, scale = 1/sqrt(HS):
//   out[b,t,h,:] = sum_{s<=t} softmax_s(scale q_t . k_s) v_s
//   lse[b,h,t]   = log sum_{s<=t} exp(scale q_t . k_s)            (fp32, natural log)
// reading Q, K, V in place from qkv (B, T, NH + 2*NKV, HS) through one 4-D TMA tensor map
// (dims HS, NH + 2*NKV, T, B: a box never crosses into the next head or sequence, rows >= T
// read as 0); query head h uses kv head h / (NH/NKV).
// The same kernel runs one ring pair of context parallelism (forward_problem; attention.cuh
// AttnFwdProblem, a tensor map per Q, K and V where K/V came from another rank's block): Q rows
// against K/V rows of their own buffers and strides, either the diagonal
// pair (causal, as above) or a full pair (every one of the Tk keys visible; the ragged last K/V
// tile masks keys >= Tk), its (O_blk, LSE_blk) written or merged exactly into the ring's fp32
// running O and LSE in the epilogue (RING).
//
// Schedule (paper notation; Br = 64 x NWG query rows per work tile with NWG consumer
// warpgroups: 192 at HS 64, 128 at HS 128 (flash3_tiles.h kFwdConsumerWGs); Bc = 128 keys per
// K/V tile). Persistent grid (one block per SM); work tiles (i, b, h) in order of decreasing i
// (the longest causal rows first), handed out one at a time (see Work tiles below).
// 1 + NWG warpgroups per block:
//   producer (warpgroup 0, setmaxnreg 24; one thread issues everything):
//     for each work tile (i, b, h):
//       wait Q_empty; TMA Q_i -> sQ (completes on Q_full)
//       for j = Tc_i-1 down to 0:            (Tc_i = ceil((last row of tile i + 1) / Bc): tiles
//         wait K_empty[s]; TMA K_j -> sK[s]    right of the diagonal are never loaded)
//         wait V_empty[s]; TMA V_j -> sV[s]   (s = n mod STAGES over the block's n-th K/V tile)
//   consumers (warpgroups 1 .. NWG, setmaxnreg 240 for 2, 160 for 3; warpgroup c owns query
//   rows 64c .. 64c+63 of the tile):
//     for each work tile: m_i = -inf, l_i = 0, O_i = 0; wait Q_full
//       S = Q_c K_{Tc-1}^T (wgmma, both operands in smem); mask (diagonal tile); softmax -> P
//       for each next j (intra-warpgroup overlap, the paper's Algorithm 2):
//         issue S_next = Q_c K_j^T;  issue O_i += P V_{j+1} (wgmma, P from registers)
//         wait for S_next; release K_j; mask if on the diagonal;
//         m_new = max(m_i, rowmax(S)); P = exp2(S scale log2e - m_new scale log2e);
//         l_i = exp2((m_i - m_new) scale log2e) l_i + rowsum(P)      (while P V runs)
//         wait for P V; release V_{j+1}; O_i *= exp2((m_i - m_new) scale log2e); m_i = m_new
//       O_i += P V_0; O_i /= l_i -> bf16 via smem, 16-byte stores of rows < T; LSE_i
//     ping-pong (kFwdPingPongDefault): the consumer warpgroups take turns, round the ring, to
//     issue their GEMMs (a named barrier each), so that one's softmax runs under the others'
//     GEMMs. With 3 (HS 64) each softmax has two warpgroups' GEMMs to hide under, not one.
// Work tiles: kFwdDynamicDefault: the producer takes the next tile of the longest-first list
// from an atomic counter (one int of the scratch, zeroed before the launch) and passes its index
// to the consumers in shared memory with the Q_full phase; else block k takes k, k + grid, ...
// The list is row-major (the longest rows of every head first) while the K/V of all heads fit
// L2, else head-major (work_tile; flash3_tiles.h kv_outgrows_l2 has the measurements): with
// row-major order at long T the ~132 running tiles belong to every head at scattered points of
// their rows, so their K/V reads miss L2; head-major keeps them on one head's K/V.
// Only tiles that cross the diagonal are masked (with Br = 192 the first two of a row; a
// warpgroup whose rows all precede a tile's keys computes it masked whole: P = 0).
// Row tiles end at T (tile i starts at T - (Tr - i) Br): a ragged tile is the first, the
// shortest row, whose rows < 0 compute on zero-filled Q rows (TMA reads negative rows as 0) and
// are never stored. (Tiles from row 0 would leave the ragged tile last, the longest: at HS 64,
// T 4096 = 21 x 192 + 64, two of its three warpgroups would idle through all 32 K/V tiles.)
//
// Limits: bf16; HS 64 or 128; sm_90a (wgmma, setmaxnreg); qkv and out 16-byte aligned; any T
// >= 1 up to 4M. A ring pair: rows 16-byte aligned; static tile order (the ring passes no
// scratch for the counter; at its lengths every block runs hundreds of tiles).
//
// Tuning notes. H100 80GB HBM3, causal bf16, 16384 tokens per batch (B = 16384 / T; 12 heads at
// HS 64, 16 at HS 128), forward TFLOP/s = 2 B NH T^2 HS / time, scripts/bench_attention.py with
// PyTorch 2.11 SDPA in the same run; logs in bench/results/flash3_nvidia-h100_2026-11-23/.
// Floors: at HS 128 a 128 x 128 tile pair is 2048 tensor-core clocks per SM against 1024 for its
// 2 x 64 x 128 exponentials (MUFU, 16/clk): GEMM-bound, so overlap can reach the wgmma rate. At
// HS 64 both are 1024 clocks: only a perfect overlap of every exponential (and the max, scale
// and convert instructions around them) with the GEMMs would reach the wgmma rate.
//   HS / T:                          64/4K  64/16K  128/4K  128/16K  (cuDNN over 4 runs: 323-357
//                                                                      408-437 513-557 611-630)
//   v1 overlap only, static grid      369    427     518     595     all GPU tests pass first run
//   v1 + ping-pong (predicted +5-10%  379    428     531     615     +0-3%: the intra-warpgroup
//      at HS 128 from hiding the                                      overlap already hides most
//      softmax under the other WG)                                    of the softmax; kept
//   v3 + dynamic tile scheduler       403    462     548     680     +6-12%: the static stride
//      (atomic counter; predicted                                     hands each block a fixed
//      +3-12% from the static                                         share of the longest-first
//      stride's imbalance)                                            list, 3-12% imbalance
//   v4 = v3 defaults, final run       388    460     538     674     cuDNN same run: 351 424 547
//                                                                      613 (1.11 1.09 0.98 1.10x)
//   At T = 65536 (v2, static): 372 (HS 64) and 531 (HS 128) against cuDNN 460 and 604.
// Session 10 (2026-11-25, H100, bench/results/flash3_fwd_nvidia-h100_2026-11-25_session10/):
//   3 consumer warpgroups at HS 64 (Br 192, FlashAttention-3's tile there; the ring of turns;
//   64-row TMA boxes; row tiles end-aligned). Run 63, 3 interleaved rounds, medians against
//   Br 128 in the same binary (FLASHGPT_FLASH3_FWD_WG=2): HS 64 forward T 1K/4K/8K/16K/64K
//   260/405/449/440/458 -> 281/460/512/526/526 TFLOP/s (+8/+14/+14/+19/+15%), fwd+bwd +2..+4%.
//   Predicted: the 2-warpgroup ping-pong leaves each softmax one warpgroup's GEMMs (256 + 256
//   tensor clocks) to hide under while its exponentials alone take 512 MUFU clocks per SM
//   sub-partition; with 3 it gets two warpgroups' GEMMs. At HS 128 the consumers' 240 registers
//   (O 64 + S 64 + P 32 per thread) do not fit the 160 that 3 warpgroups leave.
//   Tried and removed (run 62, HS 64 on Br 128): 1/8 or 1/4 of P's exponentials on the FMA pipe
//   (a degree-3 polynomial, FlashAttention-4's trick against the MUFU bound): -1..-5% at HS 64,
//   -3..-12% at HS 128; skipping O's rescale in warps where no row max changed (a vote): 0 at
//   HS 64, -1..-4% at HS 128. So the 2-warpgroup forward was not bound by MUFU throughput (it ran
//   at about half of both bounds) but by the latency of each warpgroup's S -> softmax -> P V
//   chain, which the third warpgroup hides.
//   Run 65 (3 interleaved rounds): without the turns (FLASHGPT_FLASH3_FWD=overlap) the 3
//   warpgroups lose 5-11% at HS 64 (4K/16K/64K 465/557/520 -> 441/497/494): turns kept. Tried
//   and removed: HS 128 on 3 warpgroups with K/V tiles of 64 keys (Br 192, Bc 64: O 64 + S 32 +
//   P 16 registers fit 160), with turns 0.998/0.989/1.000, without 1.012/0.987/1.010 of the
//   tree's 558/623/637 TFLOP/s: the halved tiles give back what the third warpgroup hides.
//   Tried and removed (run 71): the next work tile's first S issued with this tile's last P V
//   (a second Q buffer), to run under the epilogue; predicted +2-4% at 4K, got 15-33% slower
//   at every shape (no ptxas serialisation message once O's zeroing became scale_d 0); with
//   the producer claiming the next tile early (run 72) still 25-35% slower, so not the loads'
//   order, nor the runtime scale_d (run 73: zeroed O, 21-31% slower), nor two Q buffers alone
//   (run 74: noise). The same restructured loop without the prefetch (run 75) loses only 1-8%:
//   the S in flight across the epilogue (and a turn of two GEMMs) is what costs; why, not
//   found (diffs in the results folder).
//   Tried and removed (session 11, run 83, bench/results/flash3_bwd_nvidia-h100_2026-11-26_
//   session11/): at HS 128, Q_c in registers for S (ldmatrix once per tile, RS wgmma): forward
//   0.99-1.01 of the tree at T 1K-64K, noise; shared-memory bandwidth does not bound it.
// Stages: HS 128 has 2 K/V stages (Q 32 KB + 2 x 64 KB + O staging 32 KB = 192 KB of 227);
// HS 64 has 4 (Q 24 KB + 4 x 32 KB + O 24 KB = 176 KB). No spills (ptxas); producer 24
// registers, consumers 240 (2 warpgroups) or 160 (3).
//
// Test:  ./build/test_gpu --gtest_filter='*flash3*:Flash3*:Hopper*'  (ring pairs: '*RingAttention*flash3*')
// Bench: python3 scripts/bench_attention.py --backends flash,flash3
#include <cfloat>
#include <cstdlib>
#include <cstring>

#include "kernels/attention/flash.cuh"
#include "kernels/attention/flash3.cuh"
#include "kernels/attention/flash3_tiles.h"
#include "kernels/attention/hopper.cuh"

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "flash3.cu uses wgmma and setmaxnreg: build for sm_90a (GPU_ARCH=90a, the default)"
#endif

namespace flash3 {

using flash::fast_exp2;
using flash::gmma_desc;
using flash::kLog2e;
using flash::pack_bf16;
using flash::quad_max;
using flash::quad_sum;
using flash::reg_fence;
using flash::smem_u32;
using flash::wgmma_commit;
using flash::wgmma_fence;
using flash::wgmma_wait;

// Compile-time traits of the forward kernel (numbers from flash3_tiles.h).
template <int HS_, bool PINGPONG_, bool DYNAMIC_, int NWG_ = kFwdConsumerWGs(HS_)>
struct Fwd3Tile {
  static constexpr int NWG = NWG_;  // consumer warpgroups, 64 query rows each
  static constexpr int HS = HS_, Br = 64 * NWG, Bc = kFwdBc;
  // K/V stages: as many as fit beside Q and the O staging (at most 4)
  static constexpr int STAGE_FIT = (227 * 1024 - 2 * Br * HS * 2 - 2048) / (2 * Bc * HS * 2);
  static constexpr int STAGES = STAGE_FIT > 4 ? 4 : STAGE_FIT;
  static constexpr bool PINGPONG = PINGPONG_;  // consumer warpgroups take turns for the GEMMs
  static constexpr bool DYNAMIC = DYNAMIC_;    // work tiles handed out by an atomic counter
  static constexpr int NTHREADS = 128 * (1 + NWG);  // producer warpgroup + the consumers
  // setmaxnreg: the producer's registers go to the consumers (65536 per SM, 1 block).
  static constexpr int PRODUCER_REGS = 24, CONSUMER_REGS = NWG == 2 ? 240 : 160;
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
  static constexpr int NBARS = 2 + 4 * STAGES;  // Q full/empty, K and V full/empty per stage
  static constexpr int OFF_SLOT = OFF_BAR + NBARS * 8;  // 2 ints: the work tile of each Q phase
  static constexpr int SMEM = OFF_SLOT + 8 + 1024;      // + slack to align the base
  static constexpr int CONSUMER_WARPS = 4 * NWG;  // arrivals that release a stage (lane 0 of each)
  static_assert(HS == 64 || HS == 128, "head size 64 or 128");
  static_assert(Bc == 128, "S = Q K^T is one m64n128 wgmma per warpgroup per k-step");
  static_assert(NWG == 2 || (NWG == 3 && HS == 64), "2 consumer warpgroups, or 3 at HS 64 (registers)");
  static_assert(128 * (PRODUCER_REGS + NWG * CONSUMER_REGS) <= 65536, "register file");
  static_assert(Q_BYTES % 1024 == 0 && KV_BYTES % 1024 == 0, "panels on 1024-byte boundaries");
  static_assert(SMEM <= 227 * 1024, "shared memory per block");
};

// Named barrier ids (0 is __syncthreads): per consumer warpgroup (up to 3) one for the epilogue
// (1-3) and one for its turn (4-6).
constexpr int kBarEpilogue0 = 1, kBarTurn0 = 4;

// One online-softmax step on a warpgroup's S (64 x Bc, this thread's two rows g and g + 8):
// new running max, P = exp2(S scale_log2 - m scale_log2) in place, l_i updated, alpha = the
// factor that rescales the old O_i and l_i.
template <int NS>
__device__ __forceinline__ void softmax_step(float (&s)[NS], float (&m_i)[2], float (&l_i)[2],
                                             float (&alpha)[2], float scale_log2) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float mx = m_i[r];
#pragma unroll
    for (int n = 0; n < NS / 4; ++n) mx = fmaxf(mx, fmaxf(s[4 * n + 2 * r], s[4 * n + 2 * r + 1]));
    mx = quad_max(mx);
    // A row with every key masked so far keeps m = -inf; subtract 0 then (exp2(-inf) = 0).
    const float m_scaled = (mx == -INFINITY) ? 0.f : mx * scale_log2;
    alpha[r] = fast_exp2(m_i[r] * scale_log2 - m_scaled);
    m_i[r] = mx;
    float rs = 0.f;
#pragma unroll
    for (int n = 0; n < NS / 4; ++n) {
      const float p0 = fast_exp2(fmaf(s[4 * n + 2 * r], scale_log2, -m_scaled));
      const float p1 = fast_exp2(fmaf(s[4 * n + 2 * r + 1], scale_log2, -m_scaled));
      s[4 * n + 2 * r] = p0;
      s[4 * n + 2 * r + 1] = p1;
      rs += p0 + p1;
    }
    l_i[r] = l_i[r] * alpha[r] + rs;  // per-thread partial; quad-reduced in the epilogue
  }
}

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

// Work tile w (0 .. Tr BH - 1, handed out in order) -> (Q tile i, sequence-head bh). Row-major:
// the longest rows of every head first (i = Tr-1 for all heads, then Tr-2, ...). Head-major
// (long T): one head at a time, its longest rows first, so that the tiles running at once read
// the same head's K/V tiles within a few steps of each other (L2 hits); see Work tiles above.
__device__ __forceinline__ void work_tile(int w, int Tr, int BH, int head_major, int& i, int& bh) {
  if (head_major) {
    bh = w / Tr;
    i = Tr - 1 - w % Tr;
  } else {
    i = Tr - 1 - w / BH;
    bh = w % BH;
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

template <class K, bool RING>
__global__ void __launch_bounds__(K::NTHREADS, 1)
    flash3_fwd_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                      const __grid_constant__ CUtensorMap tm_v, const Fwd3Args a) {
  constexpr int HS = K::HS, Br = K::Br, Bc = K::Bc, STAGES = K::STAGES, NS = K::NS, NO = K::NO,
                KQ = K::KQ, KP = K::KP, PANELS = K::PANELS;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t s0 = (smem_u32(smem_raw) + 1023u) & ~1023u;  // 128-byte swizzle: 1024-B panels
  const uint32_t sQ = s0, sK = s0 + K::OFF_K, sV = s0 + K::OFF_V, sO = s0 + K::OFF_O;
  const uint32_t bar_q_full = s0 + K::OFF_BAR, bar_q_empty = bar_q_full + 8;
  const uint32_t bar_k_full = bar_q_full + 16, bar_k_empty = bar_k_full + 8 * STAGES,
                 bar_v_full = bar_k_empty + 8 * STAGES, bar_v_empty = bar_v_full + 8 * STAGES;

  // The work tile of each Q_full phase, written by the producer before it arrives (n_work = no
  // more work); read by the consumers after their wait.
  volatile int* tile_slot = reinterpret_cast<volatile int*>(smem_raw + (s0 + K::OFF_SLOT - smem_u32(smem_raw)));
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, wg = warp >> 2;
  const int NH = a.NH, NKV = a.NKV, Tq = a.Tq, Tk = a.Tk, head_major = a.head_major;
  const bool causal = RING ? a.causal != 0 : true;  // the whole-sequence forward is causal
  const int Tr = (Tq + Br - 1) / Br, BH = a.B * NH, n_work = Tr * BH;
  // Work tile i covers query rows q0 = Tq - (Tr - i) Br .. q0 + Br - 1: the tiles end at Tq, so
  // a ragged tile is the first (the shortest row, q0 < 0), not the last, the longest.
  auto first_row = [&](int i) { return Tq - (Tr - i) * Br; };
  // K/V tiles of a work tile's rows from q0: causal, up to the diagonal (tiles right of it are
  // never loaded); a full pair, all of Tk.
  auto kv_tiles = [&](int q0) { return ((causal ? min(q0 + Br, Tq) : Tk) + Bc - 1) / Bc; };

  if (tid == 0) {
    hopper::mbar_init(bar_q_full, 1);
    hopper::mbar_init(bar_q_empty, K::CONSUMER_WARPS);
    for (int st = 0; st < STAGES; ++st) {
      hopper::mbar_init(bar_k_full + 8 * st, 1);
      hopper::mbar_init(bar_v_full + 8 * st, 1);
      hopper::mbar_init(bar_k_empty + 8 * st, K::CONSUMER_WARPS);
      hopper::mbar_init(bar_v_empty + 8 * st, K::CONSUMER_WARPS);
    }
    hopper::mbar_init_fence();
  }
  __syncthreads();

  if (wg == 0) {
    // ================================ producer ================================
    hopper::setmaxnreg_dec<K::PRODUCER_REGS>();
    if (warp == 0 && lane == 0) {
      hopper::tma_prefetch_map(&tm_q);
      hopper::tma_prefetch_map(&tm_k);
      hopper::tma_prefetch_map(&tm_v);
      uint32_t kv_it = 0, tile_it = 0;
      for (int w = blockIdx.x;; ++tile_it) {
        hopper::mbar_wait(bar_q_empty, (tile_it & 1) ^ 1);
        tile_slot[tile_it & 1] = min(w, n_work);
        if (w >= n_work) {
          hopper::mbar_arrive(bar_q_full);  // tells the consumers to stop
          break;
        }
        int i, bh;
        work_tile(w, Tr, BH, head_major, i, bh);
        const int b = bh / NH, h = bh % NH;
        const int kvh = h / (NH / NKV), q0 = first_row(i);
        const int n_kv = kv_tiles(q0);
        hopper::mbar_arrive_expect_tx(bar_q_full, K::Q_BYTES);
#pragma unroll
        for (int p = 0; p < PANELS; ++p)
#pragma unroll
          for (int r = 0; r < Br; r += K::BOX)
            hopper::tma_load_4d(sQ + p * K::Q_PANEL + r * 128, &tm_q, bar_q_full, p * 64, h, q0 + r, b);
        for (int jj = 0; jj < n_kv; ++jj, ++kv_it) {
          const int j = n_kv - 1 - jj, st = kv_it % STAGES;
          const uint32_t par = ((kv_it / STAGES) & 1) ^ 1;
          hopper::mbar_wait(bar_k_empty + 8 * st, par);
          hopper::mbar_arrive_expect_tx(bar_k_full + 8 * st, K::KV_BYTES);
#pragma unroll
          for (int p = 0; p < PANELS; ++p)
#pragma unroll
            for (int r = 0; r < Bc; r += K::BOX)
              hopper::tma_load_4d(sK + st * K::KV_BYTES + p * K::KV_PANEL + r * 128, &tm_k,
                                  bar_k_full + 8 * st, p * 64, a.k_head0 + kvh, j * Bc + r, b);
          hopper::mbar_wait(bar_v_empty + 8 * st, par);
          hopper::mbar_arrive_expect_tx(bar_v_full + 8 * st, K::KV_BYTES);
#pragma unroll
          for (int p = 0; p < PANELS; ++p)
#pragma unroll
            for (int r = 0; r < Bc; r += K::BOX)
              hopper::tma_load_4d(sV + st * K::KV_BYTES + p * K::KV_PANEL + r * 128, &tm_v,
                                  bar_v_full + 8 * st, p * 64, a.v_head0 + kvh, j * Bc + r, b);
        }
        if constexpr (K::DYNAMIC)
          w = gridDim.x + atomicAdd(a.tile_counter, 1);
        else
          w += gridDim.x;
      }
    }
  } else {
    // ================================ consumers ================================
    hopper::setmaxnreg_inc<K::CONSUMER_REGS>();
    const int c = wg - 1;                  // consumer warpgroup: query rows 64 c .. 64 c + 63
    const int wq = warp & 3, g = lane >> 2, t4 = lane & 3;
    const int ctid = tid - 128 * wg;       // thread index within the warpgroup
    const uint32_t aQ = sQ + c * 64 * 128;  // this warpgroup's rows in each Q panel
    // Turns go round the consumer warpgroups: c waits for c - 1's, then hands over to c + 1.
    const int bar_turn_mine = kBarTurn0 + c, bar_turn_next = kBarTurn0 + (c + 1) % K::NWG;
    if constexpr (K::PINGPONG) {
      if (c == K::NWG - 1) hopper::named_bar_arrive(kBarTurn0, 256);  // warpgroup 0 issues first
    }
    uint32_t kv_it = 0, tile_it = 0;

    // S = Q_c K^T from K stage st (k-steps over the head dim; the first overwrites S).
    auto issue_s = [&](float (&s)[NS], int st) {
      reg_fence(s);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < KQ; ++kk) {
        const uint32_t off_q = (kk / 4) * K::Q_PANEL + (kk % 4) * 32;
        const uint32_t off_k = st * K::KV_BYTES + (kk / 4) * K::KV_PANEL + (kk % 4) * 32;
        flash::wgmma_ss<0, 0>(s, gmma_desc(aQ + off_q, 16, 1024), gmma_desc(sK + off_k, 16, 1024),
                              kk > 0 ? 1 : 0);
      }
      wgmma_commit();
    };
    // O += P V from V stage st (V is MN-major: rows = keys = the k dimension).
    auto issue_pv = [&](float (&o)[NO], uint32_t (&p)[KP][4], int st) {
      reg_fence(o);
      reg_fence(p);
      wgmma_fence();
#pragma unroll
      for (int kq = 0; kq < KP; ++kq)
        flash::wgmma_rs<1>(o, p[kq], gmma_desc(sV + st * K::KV_BYTES + kq * 2048, K::KV_PANEL, 1024));
      wgmma_commit();
    };
    auto release = [&](uint32_t bar) {
      if (lane == 0) hopper::mbar_arrive(bar);
    };
    auto turn_begin = [&]() {
      if constexpr (K::PINGPONG) hopper::named_bar_sync(bar_turn_mine, 256);
    };
    auto turn_end = [&]() {
      if constexpr (K::PINGPONG) hopper::named_bar_arrive(bar_turn_next, 256);
    };

    for (;; ++tile_it) {
      hopper::mbar_wait(bar_q_full, tile_it & 1);
      const int w = tile_slot[tile_it & 1];
      if (w >= n_work) break;
      int i, bh;
      work_tile(w, Tr, BH, head_major, i, bh);
      const int b = bh / NH, h = bh % NH;
      const int q0 = first_row(i);
      const int n_kv = kv_tiles(q0);
      const int row0 = q0 + c * 64 + wq * 16 + g;  // this thread's rows: row0, row0 + 8

      float o[NO], s[NS], m_i[2] = {-INFINITY, -INFINITY}, l_i[2] = {0.f, 0.f}, alpha[2];
      uint32_t p[KP][4];
#pragma unroll
      for (int n = 0; n < NO; ++n) o[n] = 0.f;
      // S[r, key] = -inf where key > query (causal: diagonal tiles only), or where key >= Tk (a
      // full pair: its ragged last tile only; TMA reads those keys as zeros, not -inf).
      auto mask = [&](int j) {
        if (causal ? j * Bc + Bc - 1 > q0 + c * 64 : j * Bc + Bc > Tk) {
#pragma unroll
          for (int n = 0; n < NS / 4; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int key = j * Bc + n * 8 + 2 * t4 + (e & 1);
              if (causal ? key > row0 + (e >> 1) * 8 : key >= Tk) s[4 * n + e] = -INFINITY;
            }
        }
      };

      // ---- first (diagonal) K/V tile: S, softmax ----
      int st = kv_it % STAGES;
      uint32_t par = (kv_it / STAGES) & 1;
      hopper::mbar_wait(bar_k_full + 8 * st, par);
      turn_begin();
      issue_s(s, st);
      turn_end();
      wgmma_wait<0>();
      reg_fence(s);
      release(bar_k_empty + 8 * st);
      if (n_kv == 1) release(bar_q_empty);
      mask(n_kv - 1);
      softmax_step(s, m_i, l_i, alpha, a.scale_log2);
      pack_p(p, s);
      int prev_st = st;
      uint32_t prev_par = par;
      ++kv_it;
      // ---- the other tiles, right to left: S_j overlaps P V_{j+1}, softmax overlaps P V ----
      for (int jj = 1; jj < n_kv; ++jj, ++kv_it) {
        const int j = n_kv - 1 - jj;
        st = kv_it % STAGES;
        par = (kv_it / STAGES) & 1;
        hopper::mbar_wait(bar_k_full + 8 * st, par);
        hopper::mbar_wait(bar_v_full + 8 * prev_st, prev_par);
        turn_begin();
        issue_s(s, st);
        issue_pv(o, p, prev_st);
        turn_end();
        wgmma_wait<1>();  // S_j
        reg_fence(s);
        release(bar_k_empty + 8 * st);
        if (jj == n_kv - 1) release(bar_q_empty);
        mask(j);
        softmax_step(s, m_i, l_i, alpha, a.scale_log2);
        wgmma_wait<0>();  // P V_{j+1}
        reg_fence(o);
        release(bar_v_empty + 8 * prev_st);
#pragma unroll
        for (int n = 0; n < NO / 4; ++n) {
          o[4 * n + 0] *= alpha[0];
          o[4 * n + 1] *= alpha[0];
          o[4 * n + 2] *= alpha[1];
          o[4 * n + 3] *= alpha[1];
        }
        pack_p(p, s);
        prev_st = st;
        prev_par = par;
      }
      // ---- last P V ----
      hopper::mbar_wait(bar_v_full + 8 * prev_st, prev_par);
      turn_begin();
      issue_pv(o, p, prev_st);
      turn_end();
      wgmma_wait<0>();
      reg_fence(o);
      release(bar_v_empty + 8 * prev_st);

      float* lse_bh = a.lse + ((size_t)b * NH + h) * a.lse_T;
      if constexpr (RING) {
        // ---- ring epilogue: O_blk = O_i / l_i, LSE_blk; overwrite or merge (o_run, lse) as
        // flash_common.cuh's ring_merge_weights says. Each row's LSE is read by the 4 threads of
        // its quad and written by one: a __syncwarp that every lane reaches splits the reads from
        // the write. fp32 straight from registers (8-byte stores; the merge reads the old rows
        // anyway).
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const float l = quad_sum(l_i[r]);
          const float inv = l > 0.f ? 1.f / l : 0.f;
          const int row = row0 + 8 * r;
          const bool ok = row >= 0 && row < Tq;
          const float lse_blk = l > 0.f ? m_i[r] * a.scale + logf(l) : -INFINITY;
          const flash::RingMerge m = flash::ring_merge_weights(lse_blk, lse_bh + (ok ? row : 0), a.merge && ok);
          __syncwarp();
          if (ok) {
            if (t4 == 0) lse_bh[row] = m.lse;
            float* orow = a.o_run + (size_t)b * a.o_bs + (size_t)row * a.o_ld + (size_t)h * HS;
#pragma unroll
            for (int n = 0; n < NO / 4; ++n)  // 8-column tile n
              flash::ring_merge_o2(orow + n * 8 + 2 * t4, o[4 * n + 2 * r], o[4 * n + 2 * r + 1],
                                   inv, m, a.merge);
          }
        }
      } else {
        // ---- epilogue: O_i / l_i -> bf16 -> sO (this warpgroup's rows) -> out; LSE_i ----
        const int bar_epi = kBarEpilogue0 + c;
        hopper::named_bar_sync(bar_epi, 128);  // the last tile's reads of sO are done
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const float l = quad_sum(l_i[r]);
          const float inv = l > 0.f ? 1.f / l : 0.f;
          const int rl = c * 64 + wq * 16 + g + 8 * r;  // tile-local row
          if (t4 == 0 && q0 + rl >= 0 && q0 + rl < Tq)
            lse_bh[q0 + rl] = l > 0.f ? m_i[r] * a.scale + logf(l) : -INFINITY;
#pragma unroll
          for (int n = 0; n < NO / 4; ++n) {  // 8-column tile n: panel n / 8, chunk n % 8
            const uint32_t v = pack_bf16(o[4 * n + 2 * r] * inv, o[4 * n + 2 * r + 1] * inv);
            const uint32_t addr =
                sO + (n >> 3) * K::Q_PANEL + rl * 128 + (((n & 7) ^ (rl & 7)) << 4) + t4 * 4;
            asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
          }
        }
        hopper::named_bar_sync(bar_epi, 128);
        constexpr int CHUNKS = HS / 8;  // 16-byte chunks per row
        __nv_bfloat16* gO = a.out + (size_t)b * a.o_bs + (size_t)h * HS;  // row 0
#pragma unroll
        for (int k = 0; k < 64 * CHUNKS / 128; ++k) {
          const int idx = ctid + k * 128;
          const int rl = c * 64 + idx / CHUNKS, ch = idx % CHUNKS;
          if (q0 + rl >= 0 && q0 + rl < Tq) {
            uint4 v;
            asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                         : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                         : "r"(sO + flash::pswz<Br>(rl, ch))
                         : "memory");
            *reinterpret_cast<uint4*>(gO + (size_t)(q0 + rl) * a.o_ld + ch * 8) = v;
          }
        }
      }
    }
    if constexpr (K::PINGPONG) {
      if (c == 0) hopper::named_bar_sync(kBarTurn0, 256);  // the last warpgroup's last turn_end
    }
  }
}

namespace {

// Which forward variant runs: the defaults of flash3_tiles.h, or the ones named by
// FLASHGPT_FLASH3_FWD ("pingpong" | "overlap") and FLASHGPT_FLASH3_SCHED ("dynamic" | "static"):
// measurement switches for the tuning notes above, read once.
bool env_choice(const char* var, const char* yes, const char* no, bool dflt) {
  const char* e = std::getenv(var);
  if (e && std::strcmp(e, yes) == 0) return true;
  if (e && std::strcmp(e, no) == 0) return false;
  return dflt;
}
bool use_pingpong() {
  static const bool v = env_choice("FLASHGPT_FLASH3_FWD", "pingpong", "overlap", kFwdPingPongDefault);
  return v;
}
bool use_dynamic() {
  static const bool v = env_choice("FLASHGPT_FLASH3_SCHED", "dynamic", "static", kFwdDynamicDefault);
  return v;
}
// Consumer warpgroups at HS 64: kFwdConsumerWGs(64), or FLASHGPT_FLASH3_FWD_WG=2|3 (a
// measurement switch for the tuning notes above).
int fwd_consumer_wgs() {
  static const int v = std::getenv("FLASHGPT_FLASH3_FWD_WG") ? std::atoi(std::getenv("FLASHGPT_FLASH3_FWD_WG")) : kFwdConsumerWGs(64);
  return v;
}
// Head-major work order for this shape: when the K and V of all (sequence, kv head) pairs
// outgrow the L2 cache (flash3_tiles.h kv_outgrows_l2), or as FLASHGPT_FLASH3_ORDER ("heads" |
// "rows") says for every shape (a measurement switch).
bool use_head_major(const AttnFwdProblem& p) {
  static const char* e = std::getenv("FLASHGPT_FLASH3_ORDER");
  if (e && std::strcmp(e, "heads") == 0) return true;
  if (e && std::strcmp(e, "rows") == 0) return false;
  return kv_outgrows_l2(p.B, p.NKV, p.Tk, p.HS, cuda_l2_bytes());
}

// A (B, rows, heads, HS) view of bf16 rows `ld` elements apart, sequences `bs` apart, as a 4-D
// tensor map (dims HS, heads, rows, B) with a box of 64 columns x one head x `box_rows` rows: a
// box never crosses into the next head or sequence, and rows >= `rows` read as zeros.
CUtensorMap rows_map(const __nv_bfloat16* base, int B, int rows, int heads, int HS, size_t ld,
                     size_t bs, int box_rows) {
  const uint64_t dims[4] = {(uint64_t)HS, (uint64_t)heads, (uint64_t)rows, (uint64_t)B};
  const uint64_t strides[3] = {(uint64_t)HS * 2, (uint64_t)ld * 2, (uint64_t)bs * 2};
  const uint32_t box[4] = {64, 1, (uint32_t)box_rows, 1};
  return hopper::make_tensor_map_bf16_4d(base, dims, strides, box);
}

// tile_counter: the dynamic scheduler's counter (K::DYNAMIC), else unused.
template <class K, bool RING>
void launch_fwd(const AttnFwdProblem& p, int* tile_counter, cudaStream_t stream) {
  allow_dynamic_smem(reinterpret_cast<const void*>(flash3_fwd_kernel<K, RING>), K::SMEM);
  Fwd3Args a{};
  // Q, K and V as the heads of one qkv (the whole sequence; the ring's own chunks): one map over
  // all NH + 2 NKV heads, K and V at head offsets. Encoding a map is host time on every launch
  // (~10 us, measured: three maps cost the 4K forward 2-4% in bench-attention), so the common
  // case encodes one. Else (K/V from another rank's block) a map per tensor.
  const bool one_qkv = p.Tq == p.Tk && p.k == p.q + (size_t)p.NH * p.HS &&
                       p.v == p.k + (size_t)p.NKV * p.HS && p.kv_ld == p.q_ld && p.kv_bs == p.q_bs;
  CUtensorMap tm_q, tm_k, tm_v;
  if (one_qkv) {
    tm_q = tm_k = tm_v = rows_map(p.q, p.B, p.Tq, p.NH + 2 * p.NKV, p.HS, p.q_ld, p.q_bs, K::BOX);
    a.k_head0 = p.NH;
    a.v_head0 = p.NH + p.NKV;
  } else {
    tm_q = rows_map(p.q, p.B, p.Tq, p.NH, p.HS, p.q_ld, p.q_bs, K::BOX);
    tm_k = rows_map(p.k, p.B, p.Tk, p.NKV, p.HS, p.kv_ld, p.kv_bs, K::BOX);
    tm_v = rows_map(p.v, p.B, p.Tk, p.NKV, p.HS, p.kv_ld, p.kv_bs, K::BOX);
  }
  const int n_work = ceil_div(p.Tq, K::Br) * p.B * p.NH;
  const int grid = std::min(n_work, cuda_num_sms());
  const float scale = 1.f / sqrtf((float)p.HS);
  a.out = p.out;
  a.o_run = p.o_run;
  a.o_ld = p.o_ld;
  a.o_bs = p.o_bs;
  a.lse = p.lse;
  a.lse_T = p.lse_T;
  a.tile_counter = tile_counter;
  a.B = p.B;
  a.Tq = p.Tq;
  a.Tk = p.Tk;
  a.NH = p.NH;
  a.NKV = p.NKV;
  a.scale_log2 = scale * kLog2e;
  a.scale = scale;
  a.head_major = use_head_major(p) ? 1 : 0;
  a.causal = p.causal ? 1 : 0;
  a.merge = p.merge ? 1 : 0;
  if (K::DYNAMIC) CUDA_CHECK(cudaMemsetAsync(tile_counter, 0, sizeof(int), stream));
  flash3_fwd_kernel<K, RING><<<grid, K::NTHREADS, K::SMEM, stream>>>(tm_q, tm_k, tm_v, a);
  CUDA_CHECK_LAUNCH();
}

template <int HS>
void launch_fwd_hs(const AttnFwdProblem& p, int* tile_counter, cudaStream_t stream) {
  if (p.o_run) {
    // A ring pair: no scratch comes with it, so no counter: the static stride, which at the
    // ring's lengths (hundreds of tiles per block) is as balanced as the counter.
    launch_fwd<Fwd3Tile<HS, kFwdPingPongDefault, false>, true>(p, nullptr, stream);
    return;
  }
  const bool pp = use_pingpong(), dyn = use_dynamic();
  if constexpr (HS == 64) {
    if (pp && dyn && fwd_consumer_wgs() != kFwdConsumerWGs(HS)) {
      if (fwd_consumer_wgs() == 2)
        launch_fwd<Fwd3Tile<HS, true, true, 2>, false>(p, tile_counter, stream);
      else
        launch_fwd<Fwd3Tile<HS, true, true, 3>, false>(p, tile_counter, stream);
      return;
    }
  }
  if (pp && dyn)
    launch_fwd<Fwd3Tile<HS, true, true>, false>(p, tile_counter, stream);
  else if (pp)
    launch_fwd<Fwd3Tile<HS, true, false>, false>(p, tile_counter, stream);
  else if (dyn)
    launch_fwd<Fwd3Tile<HS, false, true>, false>(p, tile_counter, stream);
  else
    launch_fwd<Fwd3Tile<HS, false, false>, false>(p, tile_counter, stream);
}

void launch_problem(const AttnFwdProblem& p, int* tile_counter, cudaStream_t stream) {
  CHECK((p.out != nullptr) != (p.o_run != nullptr), "internal: flash3 forward: one output");
  CHECK(!p.causal || p.Tq == p.Tk, "internal: flash3 forward: causal needs Tq == Tk");
  CHECK(p.causal || p.o_run, "internal: flash3 forward: a full (non-causal) problem is a ring pair");
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
                  const AttnShape& s, cudaStream_t stream) {
  int* tile_counter = static_cast<int*>(scratch);  // the work-tile counter: the scratch's first int
  launch_problem(flash::whole_sequence_forward_problem(out, lse, qkv, s), tile_counter, stream);
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

  void forward(const AttnForwardArgs& a, cudaStream_t stream) const override {
    check(a.shape);  // the FP32 build stops here: flash3 is bf16-only
#if !defined(ENABLE_FP32)
    flash3::forward_bf16(a.out, static_cast<float*>(a.saved), a.scratch, a.qkv, a.shape, stream);
#endif
  }
  void backward(const AttnBackwardArgs& a, cudaStream_t stream) const override {
    check(a.shape);
#if !defined(ENABLE_FP32)
    flash3::backward_bf16(a.dqkv, a.scratch, a.dout, a.qkv, a.out,
                          static_cast<const float*>(a.saved), a.shape, a.deterministic, stream);
#endif
  }
#if !defined(ENABLE_FP32)
  void ring_forward(const AttnFwdProblem& p, cudaStream_t st) const override {
    flash3::forward_problem(p, st);
  }
  void ring_backward(const AttnBwdProblem& p, cudaStream_t st) const override {
    flash3::backward_problem(p, st);
  }
#endif
};

}  // namespace

std::unique_ptr<AttentionBackend> make_flash3_attention() {
  return std::make_unique<Flash3Attention>();
}
