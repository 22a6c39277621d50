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

constexpr int kBM = 128, kBN = 128, kBK = 64;  // output tile (tokens x features), k-block
constexpr int kStages = 3;                     // per consumer warpgroup (a ring each)
constexpr int kPanelBytes = kBM * kBK * 2;     // 16 KB: A rows, or the B tile
constexpr int kStageBytes = 2 * kPanelBytes;   // A | B
constexpr int kThreads = 384;                  // producer warpgroup + 2 consumer warpgroups
constexpr int kRingBytes = kStages * kStageBytes;
constexpr int kSmem = 2 * kRingBytes + 2 * 2 * kStages * 8 + 1024;  // + barriers, alignment
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

// Producer warp c: every k-block of consumer c's tiles (the block's tiles c, c + 2, ...), in
// order, into ring c.
template <bool BWD>
__device__ __forceinline__ void load_tiles(uint32_t s0, const StageBarriers<kStages>& bars,
                                           const CUtensorMap* tm_a, const CUtensorMap* tm_b,
                                           int c, int n_tiles, int tiles_n, int KB) {
  PipelineState<kStages> ps;
  for (int t = blockIdx.x + c * gridDim.x; t < n_tiles; t += 2 * gridDim.x) {
    const int m0 = (t / tiles_n) * kBM, n0 = (t % tiles_n) * kBN;
    for (int kb = 0; kb < KB; ++kb, ps.advance()) {
      bars.producer_acquire(ps);
      bars.producer_expect(ps, kStageBytes);
      const uint32_t sa = s0 + ps.index() * kStageBytes, sb = sa + kPanelBytes;
      const uint32_t full = bars.full_bar(ps.index());
      sm90::tma_load_4d(sa, tm_a, full, kb * kBK, 0, m0, 0);
      if constexpr (!BWD) {
        sm90::tma_load_4d(sb, tm_b, full, kb * kBK, 0, n0, 0);  // weight rows n0.. (K-major)
      } else {  // weight (K, N): two 64-column panels of 64 k-rows (MN-major)
        sm90::tma_load_4d(sb, tm_b, full, n0, 0, kb * kBK, 0);
        sm90::tma_load_4d(sb + kPanelBytes / 2, tm_b, full, n0 + 64, 0, kb * kBK, 0);
      }
    }
  }
}

// A consumer's products for one tile: acc[h] = rows 64 h .. 64 h + 63 of the tile (wgmma
// m64n128: element e of 8-column group n at row 16 wq + g (+8 for e >= 2), column 8 n + 2 t4 +
// (e & 1)), from the next KB uses of the warpgroup's ring.
template <bool BWD>
__device__ __forceinline__ void mainloop(float (&acc0)[64], float (&acc1)[64], uint32_t s0,
                                         const StageBarriers<kStages>& bars,
                                         PipelineState<kStages>& ps, int KB, int lane) {
  sm90::StageSlot prev{};
  for (int kb = 0; kb < KB; ++kb) {
    bars.consumer_wait(ps);
    const uint32_t sa = s0 + ps.index() * kStageBytes, sb = sa + kPanelBytes;
    sm90::reg_fence(acc0);
    sm90::reg_fence(acc1);
    sm90::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      const int scale_d = (kb > 0 || kk > 0) ? 1 : 0;
      const uint64_t db = BWD ? gmma_desc(sb + kk * 2048, kPanelBytes / 2, 1024)
                              : gmma_desc(sb + kk * 32, 16, 1024);
      sm90::wgmma_ss<0, BWD ? 1 : 0>(acc0, gmma_desc(sa + kk * 32, 16, 1024), db, scale_d);
      sm90::wgmma_ss<0, BWD ? 1 : 0>(acc1, gmma_desc(sa + 8192 + kk * 32, 16, 1024), db, scale_d);
    }
    sm90::wgmma_commit();
    sm90::wgmma_wait<1>();  // the k-block before is done: its stage can go back
    sm90::reg_fence(acc0);
    sm90::reg_fence(acc1);
    if (kb > 0 && lane == 0) bars.consumer_release(prev);
    prev = ps.slot();
    ps.advance();
  }
  sm90::wgmma_wait<0>();
  sm90::reg_fence(acc0);
  sm90::reg_fence(acc1);
  if (lane == 0) bars.consumer_release(prev);
}

__device__ __forceinline__ void store2(floatX* p, float a, float b) {
  *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(a, b);
}

// Rows 64 h .. of the tile at (m0, n0), from the accumulators.
template <bool BWD>
__device__ __forceinline__ void epilogue_half(const float (&acc)[64], const GeluGemmArgs& a,
                                              int r0, int n0, int t4) {
  const size_t ra = (size_t)r0 * a.N, rb = ra + 8 * (size_t)a.N;
  if constexpr (!BWD) {
#pragma unroll
    for (int n = 0; n < 16; ++n) {
      const int col = n0 + 8 * n + 2 * t4;
      float b0 = 0.f, b1 = 0.f;
      if (a.bias) {
        const __nv_bfloat162 bb = *reinterpret_cast<const __nv_bfloat162*>(a.bias + col);
        b0 = __low2float(bb);
        b1 = __high2float(bb);
      }
      const float p00 = acc[4 * n] + b0, p01 = acc[4 * n + 1] + b1;
      const float p10 = acc[4 * n + 2] + b0, p11 = acc[4 * n + 3] + b1;
      store2(a.aux + ra + col, p00, p01);
      store2(a.aux + rb + col, p10, p11);
      store2(a.out + ra + col, gelu_of(p00), gelu_of(p01));
      store2(a.out + rb + col, gelu_of(p10), gelu_of(p11));
    }
  } else {
    __nv_bfloat162 pa[16], pb[16];  // pre, read ahead of the math
#pragma unroll
    for (int n = 0; n < 16; ++n) {
      const int col = n0 + 8 * n + 2 * t4;
      pa[n] = *reinterpret_cast<const __nv_bfloat162*>(a.aux + ra + col);
      pb[n] = *reinterpret_cast<const __nv_bfloat162*>(a.aux + rb + col);
    }
#pragma unroll
    for (int n = 0; n < 16; ++n) {
      const int col = n0 + 8 * n + 2 * t4;
      store2(a.out + ra + col, a.alpha * acc[4 * n] * gelu_grad_of(__low2float(pa[n])),
             a.alpha * acc[4 * n + 1] * gelu_grad_of(__high2float(pa[n])));
      store2(a.out + rb + col, a.alpha * acc[4 * n + 2] * gelu_grad_of(__low2float(pb[n])),
             a.alpha * acc[4 * n + 3] * gelu_grad_of(__high2float(pb[n])));
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
  const int tiles_n = a.N / kBN, n_tiles = (a.M / kBM) * tiles_n, KB = a.K / kBK;
  // Ring c (stages, then its full and empty barriers) belongs to consumer warpgroup c and
  // producer warp c. One ring for both would let a warpgroup wait on a stage two phases ahead of
  // its barrier (it skips the other's uses), and a parity wait cannot tell those phases apart.
  auto ring = [&](int c) { return base + c * kRingBytes; };
  auto ring_bars = [&](int c) {
    const uint32_t b = base + 2 * kRingBytes + c * 2 * kStages * 8;
    return StageBarriers<kStages>{b, b + 8 * kStages};
  };
  if (tid == 0) {
    for (int c = 0; c < 2; ++c)
      for (int s = 0; s < kStages; ++s) ring_bars(c).init_stage(s, 1, 4);  // consumer: 4 warps
    sm90::mbar_init_fence();
  }
  __syncthreads();
  if (wg == 0) {
    sm90::setmaxnreg_dec<40>();
    if (warp < 2 && lane == 0)
      load_tiles<BWD>(ring(warp), ring_bars(warp), &tm_a, &tm_b, warp, n_tiles, tiles_n, KB);
  } else {
    sm90::setmaxnreg_inc<232>();
    const int c = wg - 1, wq = warp & 3, g = lane >> 2, t4 = lane & 3;
    const uint32_t s0 = ring(c);
    const StageBarriers<kStages> bars = ring_bars(c);
    PipelineState<kStages> ps;
    for (int t = blockIdx.x + c * gridDim.x; t < n_tiles; t += 2 * gridDim.x) {
      float acc0[64], acc1[64];
      mainloop<BWD>(acc0, acc1, s0, bars, ps, KB, lane);
      const int m0 = (t / tiles_n) * kBM, n0 = (t % tiles_n) * kBN;
      epilogue_half<BWD>(acc0, a, m0 + 16 * wq + g, n0, t4);
      epilogue_half<BWD>(acc1, a, m0 + 64 + 16 * wq + g, n0, t4);
    }
  }
}

// A (rows, cols) row-major bf16 matrix as a tensor map with boxes of 64 columns x box_rows.
CUtensorMap matrix_map(const floatX* base, int rows, int cols, int box_rows) {
  return sm90::make_rows_map(base, 1, rows, 1, cols, (size_t)cols, (size_t)rows * cols, box_rows);
}

template <bool BWD>
void launch(const CUtensorMap& tm_a, const CUtensorMap& tm_b, const GeluGemmArgs& a,
            cudaStream_t stream) {
  allow_dynamic_smem(reinterpret_cast<const void*>(matmul_gelu_kernel<BWD>), kSmem);
  const int n_tiles = (a.M / kBM) * (a.N / kBN);
  const int grid = std::min(n_tiles, cuda_num_sms());
  matmul_gelu_kernel<BWD><<<grid, kThreads, kSmem, stream>>>(tm_a, tm_b, a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

bool matmul_gelu_applies(int M, int N, int K, const void* a, const void* b, const void* out,
                         const void* aux, const void* bias) {
  return M > 0 && N > 0 && K > 0 && M % kBM == 0 && N % kBN == 0 && K % kBK == 0 &&
         aligned16(a) && aligned16(b) && aligned16(out) && aligned16(aux) &&
         (bias == nullptr || aligned16(bias));
}

void matmul_gelu_forward(floatX* out, floatX* pre, const floatX* inp, const floatX* weight,
                         const floatX* bias, int M, int N, int K, cudaStream_t stream) {
  CHECK(matmul_gelu_applies(M, N, K, inp, weight, out, pre, bias),
        "matmul_gelu_forward: M=%d N=%d K=%d outside the kernel's limits", M, N, K);
  const GeluGemmArgs a{out, pre, bias, 1.0f, M, N, K};
  launch<false>(matrix_map(inp, M, K, kBM), matrix_map(weight, N, K, kBN), a, stream);
}

void matmul_gelu_backward(floatX* dinp, const floatX* dout, const floatX* weight,
                          const floatX* pre, float alpha, int M, int N, int K,
                          cudaStream_t stream) {
  CHECK(matmul_gelu_applies(M, N, K, dout, weight, dinp, pre, nullptr),
        "matmul_gelu_backward: M=%d N=%d K=%d outside the kernel's limits", M, N, K);
  const GeluGemmArgs a{dinp, const_cast<floatX*>(pre), nullptr, alpha, M, N, K};
  launch<true>(matrix_map(dout, M, K, kBM), matrix_map(weight, K, N, kBK), a, stream);
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
