// matmul_gelu.cu — see matmul_gelu.cuh.
#include "kernels/matmul_gelu.cuh"

#include <algorithm>

#if !defined(ENABLE_FP32)
#include "kernels/attention/sm90/copy.cuh"
#include "kernels/attention/sm90/pipeline.cuh"
#include "kernels/attention/sm90/sync.cuh"
#include "kernels/attention/sm90/wgmma.cuh"

namespace {

using sm90::gmma_desc;
using sm90::PipelineState;
using sm90::StageBarriers;

constexpr int kBM = 128, kBN = 128, kBK = 64;  // a block's output tile (tokens x features), k-block
constexpr int kCluster = 4;                    // 2 x 2 tiles: a 256 x 256 super-tile per cluster
constexpr int kStages = 6;                     // one ring; the consumers take turns on it
constexpr int kPanelBytes = kBM * kBK * 2;     // 16 KB: A rows, or the B tile
constexpr int kHalfBytes = kPanelBytes / 2;    // what one block loads of each, for two blocks
constexpr int kStageBytes = 2 * kPanelBytes;   // A | B
constexpr int kRingBytes = kStages * kStageBytes;
constexpr int kThreads = 384;                  // producer warpgroup + 2 consumer warpgroups
constexpr int kSmem = kRingBytes + 2 * kStages * 8 + 1024;  // + barriers, alignment
constexpr int kBarTurn0 = 1;  // named barriers 1, 2: consumer warpgroup 0's, 1's turn
static_assert(kSmem <= 227 * 1024, "shared memory per block");

struct GeluGemmArgs {
  floatX* out;          // (M, N) forward: gelu(pre); backward: dinp
  floatX* aux;          // (M, N) forward: pre, written; backward: pre, read
  const floatX* bias;   // (N) or nullptr (forward only)
  float alpha;          // backward: the scale of dout
  int M, N, K;
};

constexpr float kSqrt2OverPi = 0.79788456080286535588f, kGeluCubic = 0.044715f;

__device__ __forceinline__ float ex2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float rcp_approx(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
// sigma(2u) = 0.5 (1 + tanh u) for GELU's u(x): 1 / (1 + 2^(-2 u log2 e)).
__device__ __forceinline__ float gelu_sigma(float x) {
  const float u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
  return rcp_approx(1.0f + ex2_approx(-2.8853900817779268f * u));  // 2 log2(e); rcp(inf) = 0
}
__device__ __forceinline__ float gelu_of(float x) { return x * gelu_sigma(x); }
// gelu'(x) = s + x 2 s (1 - s) u'(x), s = sigma(2u): 1 - tanh^2 u = 4 s (1 - s).
__device__ __forceinline__ float gelu_grad_of(float x) {
  const float s = gelu_sigma(x);
  return s + 2.0f * x * s * (1.0f - s) * kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---- cluster helpers ----
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
__device__ __forceinline__ uint32_t cluster_id() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%clusterid.x;\n" : "=r"(r));
  return r;
}
__device__ __forceinline__ uint32_t n_clusters() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%nclusterid.x;\n" : "=r"(r));
  return r;
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::
                   : "memory");
}
// Arrive on the mbarrier at this block's smem address `bar` in block `rank` of the cluster.
__device__ __forceinline__ void mbar_arrive_cluster(uint32_t bar, uint32_t rank) {
  asm volatile(
      "{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\n"
      "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [ra];\n}\n" ::"r"(bar),
      "r"(rank)
      : "memory");
}
// A TMA box into the same smem offset of every block in `mask`, each block's barrier at `bar`
// receiving the bytes.
__device__ __forceinline__ void tma_load_4d_multicast(uint32_t dst, const CUtensorMap* map,
                                                      uint32_t bar, uint16_t mask, int c0, int c1,
                                                      int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::"
      "cluster [%0], [%1, {%4, %5, %6, %7}], [%2], %3;\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "h"(mask), "r"(c0), "r"(c1), "r"(c2),
      "r"(c3)
      : "memory");
}

// Where this block sits in its cluster's 2 x 2 super-tile: rm (row half), rn (column half).
struct ClusterPos {
  int rm, rn;
  uint16_t a_mask, b_mask;  // the blocks sharing this block's A rows, its B tile
  __device__ ClusterPos(uint32_t rank)
      : rm(rank & 1), rn(rank >> 1),
        a_mask((uint16_t)((1u << (rank & 1)) | (1u << ((rank & 1) + 2)))),
        b_mask((uint16_t)(3u << (2 * (rank >> 1)))) {}
};

// The producer: every k-block of the cluster's super-tiles (st = cluster id, + clusters, ...),
// in order, into the ring: this block loads half of its A rows (64 of 128) for itself and the
// block beside it (same rows, the other column half) and half of its B tile for itself and the
// block below it; the other halves come from those blocks. Every stage expects all 32 KB.
template <bool BWD>
__device__ __forceinline__ void load_tiles(uint32_t s0, const StageBarriers<kStages>& bars,
                                           const CUtensorMap* tm_a, const CUtensorMap* tm_b,
                                           const ClusterPos& pos, int n_super, int super_n,
                                           int KB) {
  PipelineState<kStages> ps;
  for (int st = cluster_id(); st < n_super; st += n_clusters()) {
    const int m0 = ((st / super_n) * 2 + pos.rm) * kBM, n0 = ((st % super_n) * 2 + pos.rn) * kBN;
    for (int kb = 0; kb < KB; ++kb, ps.advance()) {
      bars.producer_acquire(ps);
      bars.producer_expect(ps, kStageBytes);
      const uint32_t sa = s0 + ps.index() * kStageBytes, sb = sa + kPanelBytes;
      const uint32_t full = bars.full_bar(ps.index());
      tma_load_4d_multicast(sa + pos.rn * kHalfBytes, tm_a, full, pos.a_mask, kb * kBK, 0,
                            m0 + pos.rn * 64, 0);
      if constexpr (!BWD)  // weight rows n0 + 64 rm .. (K-major)
        tma_load_4d_multicast(sb + pos.rm * kHalfBytes, tm_b, full, pos.b_mask, kb * kBK, 0,
                              n0 + pos.rm * 64, 0);
      else  // weight (K, N): the 64-column panel rm of 64 k-rows (MN-major)
        tma_load_4d_multicast(sb + pos.rm * kHalfBytes, tm_b, full, pos.b_mask, n0 + pos.rm * 64,
                              0, kb * kBK, 0);
    }
  }
}

// A consumer's products for one tile: acc[h] = rows 64 h .. 64 h + 63 of the tile (wgmma
// m64n128: element e of 8-column group n at row 16 wq + g (+8 for e >= 2), column 8 n + 2 t4 +
// (e & 1)), from the next KB uses of the ring. A stage is released to every block of the
// cluster (any of them may multicast into it next). The turn: this warpgroup waits for its turn
// before its first wait on the ring, and passes the turn on once its products are issued, so the
// two warpgroups' products alternate tile by tile and one's epilogue runs under the other's
// products. (It also keeps a warpgroup's wait on a stage at most one phase ahead of the stage's
// barrier, which a parity wait needs: it skips the other warpgroup's uses.)
template <bool BWD>
__device__ __forceinline__ void mainloop(float (&acc0)[64], float (&acc1)[64], uint32_t s0,
                                         const StageBarriers<kStages>& bars,
                                         PipelineState<kStages>& ps, int KB, int lane, int c) {
  sm90::named_bar_sync(kBarTurn0 + c, 256);
  sm90::StageSlot prev{};
  auto release = [&](const sm90::StageSlot& s) {
    if (lane < kCluster) mbar_arrive_cluster(bars.empty_bar(s.index()), lane);
  };
  for (int kb = 0; kb < KB; ++kb) {
    bars.consumer_wait(ps);
    const uint32_t sa = s0 + ps.index() * kStageBytes, sb = sa + kPanelBytes;
    sm90::reg_fence(acc0);
    sm90::reg_fence(acc1);
    sm90::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      const int scale_d = (kb > 0 || kk > 0) ? 1 : 0;
      const uint64_t db = BWD ? gmma_desc(sb + kk * 2048, kHalfBytes, 1024)
                              : gmma_desc(sb + kk * 32, 16, 1024);
      sm90::wgmma_ss<0, BWD ? 1 : 0>(acc0, gmma_desc(sa + kk * 32, 16, 1024), db, scale_d);
      sm90::wgmma_ss<0, BWD ? 1 : 0>(acc1, gmma_desc(sa + 8192 + kk * 32, 16, 1024), db, scale_d);
    }
    sm90::wgmma_commit();
    sm90::wgmma_wait<1>();  // the k-block before is done: its stage can go back
    sm90::reg_fence(acc0);
    sm90::reg_fence(acc1);
    if (kb > 0) release(prev);
    prev = ps.slot();
    ps.advance();
  }
  sm90::named_bar_arrive(kBarTurn0 + (1 - c), 256);
  sm90::wgmma_wait<0>();
  sm90::reg_fence(acc0);
  sm90::reg_fence(acc1);
  release(prev);
}

__device__ __forceinline__ uint32_t pack2(float a, float b) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<const uint32_t*>(&v);
}
// v[n] of quad lane t (4 lanes, n = 0..3) -> v[a] = lane a's v[t]: two xor-shuffle rounds, each
// transposing one bit of (lane, n).
__device__ __forceinline__ void quad_transpose(uint32_t (&v)[4], int t4) {
  const bool b0 = t4 & 1, b1 = t4 & 2;
  uint32_t x = b0 ? v[0] : v[1], y = b0 ? v[2] : v[3];
  x = __shfl_xor_sync(0xffffffffu, x, 1);
  y = __shfl_xor_sync(0xffffffffu, y, 1);
  if (b0) { v[0] = x; v[2] = y; } else { v[1] = x; v[3] = y; }
  x = b1 ? v[0] : v[2];
  y = b1 ? v[1] : v[3];
  x = __shfl_xor_sync(0xffffffffu, x, 2);
  y = __shfl_xor_sync(0xffffffffu, y, 2);
  if (b1) { v[0] = x; v[1] = y; } else { v[2] = x; v[3] = y; }
}
// 4 bf16 pairs of a row in fragment order (v[n]: columns 8 (4 q + n) + 2 t4 ..) as one 16-byte
// store per lane: lane t4 stores columns 8 (4 q + t4) .. + 7 (whole 32-byte sectors per row).
__device__ __forceinline__ void store_row_quad(floatX* row, uint32_t (&v)[4], int q, int t4) {
  quad_transpose(v, t4);
  *reinterpret_cast<uint4*>(row + 8 * (4 * q + t4)) = make_uint4(v[0], v[1], v[2], v[3]);
}
// The inverse: lane t4 loads columns 8 (4 q + t4) .. + 7 of the row; returns them in fragment
// order (v[n] = the pair at columns 8 (4 q + n) + 2 t4).
__device__ __forceinline__ void load_row_quad(const floatX* row, uint32_t (&v)[4], int q, int t4) {
  const uint4 u = *reinterpret_cast<const uint4*>(row + 8 * (4 * q + t4));
  v[0] = u.x; v[1] = u.y; v[2] = u.z; v[3] = u.w;
  quad_transpose(v, t4);
}
__device__ __forceinline__ float lo_of(uint32_t p) {
  return __uint_as_float(p << 16);
}
__device__ __forceinline__ float hi_of(uint32_t p) {
  return __uint_as_float(p & 0xffff0000u);
}

// Rows r0 and r0 + 8 of the tile's columns n0 .., from one accumulator half.
template <bool BWD>
__device__ __forceinline__ void epilogue_half(const float (&acc)[64], const GeluGemmArgs& a,
                                              int r0, int n0, int t4) {
  floatX* out_a = a.out + (size_t)r0 * a.N + n0;
  floatX* out_b = out_a + 8 * (size_t)a.N;
  floatX* aux_a = a.aux + (size_t)r0 * a.N + n0;
  floatX* aux_b = aux_a + 8 * (size_t)a.N;
  uint32_t pre_a[4][4], pre_b[4][4];  // backward: pre, all loads issued before the math
  if constexpr (BWD) {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      load_row_quad(aux_a, pre_a[q], q, t4);
      load_row_quad(aux_b, pre_b[q], q, t4);
    }
  }
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    if constexpr (!BWD) {
      uint32_t pa[4], pb[4], ga[4], gb[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int n = 4 * q + j, col = n0 + 8 * n + 2 * t4;
        float b0 = 0.f, b1 = 0.f;
        if (a.bias) {
          const __nv_bfloat162 bb = *reinterpret_cast<const __nv_bfloat162*>(a.bias + col);
          b0 = __low2float(bb);
          b1 = __high2float(bb);
        }
        const float p00 = acc[4 * n] + b0, p01 = acc[4 * n + 1] + b1;
        const float p10 = acc[4 * n + 2] + b0, p11 = acc[4 * n + 3] + b1;
        pa[j] = pack2(p00, p01);
        pb[j] = pack2(p10, p11);
        ga[j] = pack2(gelu_of(p00), gelu_of(p01));
        gb[j] = pack2(gelu_of(p10), gelu_of(p11));
      }
      store_row_quad(aux_a, pa, q, t4);
      store_row_quad(aux_b, pb, q, t4);
      store_row_quad(out_a, ga, q, t4);
      store_row_quad(out_b, gb, q, t4);
    } else {
      uint32_t da[4], db[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int n = 4 * q + j;
        da[j] = pack2(a.alpha * acc[4 * n] * gelu_grad_of(lo_of(pre_a[q][j])),
                      a.alpha * acc[4 * n + 1] * gelu_grad_of(hi_of(pre_a[q][j])));
        db[j] = pack2(a.alpha * acc[4 * n + 2] * gelu_grad_of(lo_of(pre_b[q][j])),
                      a.alpha * acc[4 * n + 3] * gelu_grad_of(hi_of(pre_b[q][j])));
      }
      store_row_quad(out_a, da, q, t4);
      store_row_quad(out_b, db, q, t4);
    }
  }
}

template <bool BWD>
__global__ void __launch_bounds__(kThreads, 1)
    matmul_gelu_kernel(const __grid_constant__ CUtensorMap tm_a,
                       const __grid_constant__ CUtensorMap tm_b, const GeluGemmArgs a) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t base = (smem_addr(smem_raw) + 1023u) & ~1023u;  // 128-byte swizzle: 1 KB aligned
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, wg = warp >> 2;
  const int super_n = a.N / (2 * kBN), n_super = (a.M / (2 * kBM)) * super_n, KB = a.K / kBK;
  const ClusterPos pos(cluster_rank());
  const StageBarriers<kStages> bars{base + kRingBytes, base + kRingBytes + 8 * kStages};
  if (tid == 0) {
    // full: the local producer's arrival (+ 32 KB from the copy engine); empty: 4 consumer warps
    // of every block of the cluster
    for (int s = 0; s < kStages; ++s) bars.init_stage(s, 1, 4 * kCluster);
    sm90::mbar_init_fence();
  }
  cluster_sync();  // every block's barriers exist before any multicast or remote arrival
  if (wg == 0) {
    sm90::setmaxnreg_dec<40>();
    if (warp == 0 && lane == 0)
      load_tiles<BWD>(base, bars, &tm_a, &tm_b, pos, n_super, super_n, KB);
  } else {
    sm90::setmaxnreg_inc<232>();
    const int c = wg - 1, wq = warp & 3, g = lane >> 2, t4 = lane & 3;
    // The cluster's i-th super-tile is warpgroup (i % 2)'s: ring uses i KB .. i KB + KB - 1.
    const int n_mine = ((int)n_clusters() > 0 && n_super > (int)cluster_id())
                           ? (n_super - (int)cluster_id() + (int)n_clusters() - 1) / (int)n_clusters()
                           : 0;
    if (c == 1) sm90::named_bar_arrive(kBarTurn0, 256);  // warpgroup 0 goes first
    PipelineState<kStages> ps((uint32_t)(c * KB));
    int st = cluster_id() + c * n_clusters();
    for (; st < n_super; st += 2 * n_clusters()) {
      float acc0[64], acc1[64];
      mainloop<BWD>(acc0, acc1, base, bars, ps, KB, lane, c);
      ps = PipelineState<kStages>(ps.count + KB);  // the other warpgroup's tile
      const int m0 = ((st / super_n) * 2 + pos.rm) * kBM;
      const int n0 = ((st % super_n) * 2 + pos.rn) * kBN;
      epilogue_half<BWD>(acc0, a, m0 + 16 * wq + g, n0, t4);
      epilogue_half<BWD>(acc1, a, m0 + 64 + 16 * wq + g, n0, t4);
    }
    // Balance the turns: each warpgroup passed the turn once per tile (and warpgroup 1 once
    // before its first); the one whose turn comes next takes it, so no arrival is left pending.
    const int t0 = (n_mine + 1) / 2, t1 = n_mine / 2;
    if (c == 0 && t0 == t1) sm90::named_bar_sync(kBarTurn0, 256);
    if (c == 1 && t0 == t1 + 1) sm90::named_bar_sync(kBarTurn0 + 1, 256);
  }
  cluster_sync();  // no block leaves while another may still multicast into it or arrive on it
}

// A (rows, cols) row-major bf16 matrix as a tensor map with boxes of 64 columns x box_rows.
CUtensorMap matrix_map(const floatX* base, int rows, int cols, int box_rows) {
  return sm90::make_rows_map(base, 1, rows, 1, cols, (size_t)cols, (size_t)rows * cols, box_rows);
}

template <bool BWD>
void launch(const CUtensorMap& tm_a, const CUtensorMap& tm_b, const GeluGemmArgs& a,
            cudaStream_t stream) {
  const void* kernel = reinterpret_cast<const void*>(matmul_gelu_kernel<BWD>);
  allow_dynamic_smem(kernel, kSmem);
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = kCluster;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = kSmem;
  cfg.stream = stream;
  // As many clusters as fit at once (the GPCs' sizes decide: not always SMs / 4), at most one
  // per super-tile.
  static int max_clusters = 0;
  if (max_clusters == 0) {
    cfg.gridDim = dim3(kCluster * 64);
    CUDA_CHECK(cudaOccupancyMaxActiveClusters(&max_clusters, matmul_gelu_kernel<BWD>, &cfg));
    CHECK(max_clusters > 0, "matmul_gelu: no cluster of %d blocks fits this GPU", kCluster);
  }
  const int n_super = (a.M / (2 * kBM)) * (a.N / (2 * kBN));
  cfg.gridDim = dim3(kCluster * std::min(n_super, max_clusters));
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, matmul_gelu_kernel<BWD>, tm_a, tm_b, a));
}

}  // namespace

bool matmul_gelu_applies(int M, int N, int K, const void* a, const void* b, const void* out,
                         const void* aux, const void* bias) {
  return M > 0 && N > 0 && K > 0 && M % (2 * kBM) == 0 && N % (2 * kBN) == 0 && K % kBK == 0 &&
         aligned16(a) && aligned16(b) && aligned16(out) && aligned16(aux) &&
         (bias == nullptr || aligned16(bias));
}

void matmul_gelu_forward(floatX* out, floatX* pre, const floatX* inp, const floatX* weight,
                         const floatX* bias, int M, int N, int K, cudaStream_t stream) {
  CHECK(matmul_gelu_applies(M, N, K, inp, weight, out, pre, bias),
        "matmul_gelu_forward: M=%d N=%d K=%d outside the kernel's limits", M, N, K);
  const GeluGemmArgs a{out, pre, bias, 1.0f, M, N, K};
  // A boxes of 64 rows (each block loads half of its 128), B boxes of 64 rows likewise
  launch<false>(matrix_map(inp, M, K, 64), matrix_map(weight, N, K, 64), a, stream);
}

void matmul_gelu_backward(floatX* dinp, const floatX* dout, const floatX* weight,
                          const floatX* pre, float alpha, int M, int N, int K,
                          cudaStream_t stream) {
  CHECK(matmul_gelu_applies(M, N, K, dout, weight, dinp, pre, nullptr),
        "matmul_gelu_backward: M=%d N=%d K=%d outside the kernel's limits", M, N, K);
  const GeluGemmArgs a{dinp, const_cast<floatX*>(pre), nullptr, alpha, M, N, K};
  launch<true>(matrix_map(dout, M, K, 64), matrix_map(weight, K, N, kBK), a, stream);
}

#else  // ENABLE_FP32: the kernel is bf16 only; matmul.cu keeps cuBLASLt's epilogues.

bool matmul_gelu_applies(int, int, int, const void*, const void*, const void*, const void*,
                         const void*) {
  return false;
}
void matmul_gelu_forward(floatX*, floatX*, const floatX*, const floatX*, const floatX*, int, int,
                         int, cudaStream_t) {
  CHECK(false, "matmul_gelu_forward: bf16 builds only");
}
void matmul_gelu_backward(floatX*, const floatX*, const floatX*, const floatX*, float, int, int,
                          int, cudaStream_t) {
  CHECK(false, "matmul_gelu_backward: bf16 builds only");
}

#endif
