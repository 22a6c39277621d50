// naive.cu — the "naive" GPU attention: the classic implementation that materialises the T x T
// probabilities, done as well as that design allows. It is the baseline the FlashAttention
// kernels are measured against (memory and speed as T grows), and a second GPU oracle.
//
// What it computes (layout and maths: attention_ref.h): causal attention over the packed
// qkv (B, T, NH + 2*NKV, HS), read in place through strides; out (B, T, NH, HS); scale
// 1/sqrt(HS); query head h uses kv head h / G, G = NH / NKV. Every matrix product is a cuBLAS
// pointer-array batched GEMM (cublasGemmBatchedEx, one batch entry per (b, h); floatX inputs,
// fp32 accumulation); the pointer arrays are written by a tiny kernel into the scratch buffer,
// which is how Q, K, V are read in place with GQA's h -> h / G mapping.
//
//   forward                                          backward
//     S = Q K^T            -> P buffer (floatX)        dV = P^T dO
//     P = softmax(scale S) in place (causal kernel)    dP = dO V^T          -> scratch (floatX)
//     O = P V                                          dS = P o (dP - rowsum(dP o P)) in place
//                                                      dQ = scale dS K,  dK = scale dS^T Q
//
// Causal structure and schedule:
//   * Query rows are split into nc row chunks of Tc rows (Tc a multiple of 64, nc <= 8; one
//     chunk when T <= 256). Chunk c (rows r0..r1-1) only needs keys 0..r1-1, so each GEMM runs
//     per chunk on that rectangle: S and dP on [r0,r1) x [0,r1), P V and dS K reading it, and
//     P^T dO, dS^T Q over rows [r0,T) x keys [r0,r1). That is (nc+1)/(2 nc) of the full T x T
//     work and traffic (56% at nc = 8) instead of 100%.
//   * The softmax kernels read only the lower triangle j <= i of row i, apply scale and mask
//     in registers (exp2 with scale*log2(e) folded into one multiply), and write P (or dS) for
//     j <= i and zeros for i < j < r1 (the rest of the row's chunk rectangle, which the
//     following GEMMs read). Entries at j >= r1 are never written and never read by anything:
//     the saved P is defined only on each row's chunk rectangle.
//   * Masks (mask.h: documents, a window): the forward softmax's MASKED kernels also set P = 0
//     for j < lo(i); the backward's need nothing (dS = P o (dP - D) is 0 where P is, and D sums
//     P dP). The GEMMs still cover the causal rectangles: naive saves no work under a mask.
//   * A row of up to 32768 keys is held in registers (one read, one write); longer rows use a
//     two-pass loop kernel.
//   * Schedule: each phase runs over all chunks (all S GEMMs, one softmax launch, all P V
//     GEMMs). Interleaving per chunk (S(c) -> softmax(c) -> O(c), and dP(c) -> dS(c) -> dQ(c),
//     hoping the next step finds the rows in L2) measured 4-9% slower on H200 (HS 64/128,
//     T 1024/4096), so it is not done.
// GQA: dK, dV are sums over the G query heads of a group. For G == 1 the GEMMs write dqkv
// directly; for G > 1 they write per-query-head fp32 partials into scratch and a reduce kernel
// sums each group in a fixed order and writes dqkv (deterministic, no atomics, one rounding).
//
// Memory: naive_plan.h (saved = P (B, NH, T, ldP) floatX; scratch = the GEMM pointer arrays, dP
// (overwritten in place by dS) and, for G > 1, fp32 dK, dV partials per query head).
//
// Performance (H200, HS 64, NH 12, B 16, T 1024, causal; Nsight Compute): the forward is
// 0.38 ms = S GEMMs 106 us + softmax 139 us (430 MB at 3.1 TB/s) + P V GEMMs 98 us, the
// backward 0.66 ms with the softmax backward at 3.3 TB/s and the GEMMs at 2.3-3.6 TB/s: this
// design is bound by moving T x T bytes, ~4 passes forward and ~7 backward over the chunk
// rectangles. What is left would need the T x T tile to stay on chip: that is FlashAttention.
//
// Limits (the spec, backends.cpp): HS a multiple of 8 (cuBLAS's tensor-core batched kernels need
// 16-byte aligned pointers, and Q/K/V heads start at multiples of HS elements); B*NH*T <= 2^31-1;
// qkv, out, dout, dqkv, saved, scratch 16-byte aligned (cudaMalloc gives 256). Any T >= 1.
//
// Test and bench (repository root, GPU machine):
//   make test-gpu    (or ./build/test_gpu --gtest_filter='AttentionGpu*')
//   ./build/flashgpt bench-attention --backends naive --hs 64 --seq-lens 1024,4096
#include "kernels/attention/naive.cuh"
#include "kernels/attention/naive_plan.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <type_traits>

namespace {

constexpr int kMaxDescs = NaivePlan::kMaxDescs;
constexpr int kRegRowCap = NaivePlan::kRegRowCap;
using Plan = NaivePlan;  // row chunks, leading dimensions, scratch layout (naive_plan.h)

// ---------------------------------------------------------------------------------------------
// Pointer arrays: entry (d, c, i) with i = b*NH + h is base + b*sb + (h / kv_div)*sh + c*sc.

struct PtrDesc {
  const char* base;
  long long sb, sh, sc;  // bytes
  int kv_div;
};
struct PtrDescs {
  PtrDesc d[kMaxDescs];
};

__global__ void fill_ptrs_kernel(const void** out, PtrDescs descs, int ndesc, int nc, int NH,
                                 int BNH) {
  size_t idx = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  size_t total = size_t(ndesc) * nc * BNH;
  if (idx >= total) return;
  int i = int(idx % BNH);
  int c = int((idx / BNH) % nc);
  int d = int(idx / (size_t(BNH) * nc));
  int b = i / NH, h = i % NH;
  const PtrDesc& p = descs.d[d];
  out[idx] = p.base + b * p.sb + (long long)(h / p.kv_div) * p.sh + c * p.sc;
}

// ---------------------------------------------------------------------------------------------
// 8-element vector loads/stores (16 bytes in bf16; rows are padded to multiples of 8).

__device__ __forceinline__ void load8(const floatX* p, float* x) {
#if defined(ENABLE_FP32)
  float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
  x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w, x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
#else
  uint4 raw = *reinterpret_cast<const uint4*>(p);
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int k = 0; k < 4; k++) {
    float2 f = __bfloat1622float2(h[k]);
    x[2 * k] = f.x, x[2 * k + 1] = f.y;
  }
#endif
}

__device__ __forceinline__ void store8(floatX* p, const float* x) {
#if defined(ENABLE_FP32)
  reinterpret_cast<float4*>(p)[0] = make_float4(x[0], x[1], x[2], x[3]);
  reinterpret_cast<float4*>(p)[1] = make_float4(x[4], x[5], x[6], x[7]);
#else
  uint4 raw;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
  for (int k = 0; k < 4; k++) h[k] = __floats2bfloat162_rn(x[2 * k], x[2 * k + 1]);
  *reinterpret_cast<uint4*>(p) = raw;
#endif
}

// Reductions over the NT threads that own one row: a warp (NT == 32, several rows per block)
// or the whole block (NT > 32, one row per block). `red` holds NT/32 floats.
template <int NT>
__device__ __forceinline__ float row_max(float v, float* red) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  if constexpr (NT > 32) {
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
    __syncthreads();
    v = red[0];
#pragma unroll
    for (int w = 1; w < NT / 32; w++) v = fmaxf(v, red[w]);
  }
  return v;
}
template <int NT>
__device__ __forceinline__ float row_sum(float v, float* red) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if constexpr (NT > 32) {
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
    __syncthreads();
    v = 0.f;
#pragma unroll
    for (int w = 0; w < NT / 32; w++) v += red[w];  // same order in every thread
  }
  return v;
}

template <int NT>
constexpr int rows_per_block() {
  return NT >= 128 ? 1 : 128 / NT;
}

// A softmax launch covers query rows [row0, row0 + nrows) of every head (all rows, as the
// schedule stands; a row chunk when interleaving with the GEMMs). Launch row r is query
// i = row0 + r % nrows of head bh = r / nrows, row bh*T + i of the (B*NH*T, ldP) buffer. Its
// chunk ends at r1 = min(T, (i / Tc + 1) * Tc). Reads j <= i, writes [0, r1) (rounded up to 8
// inside the pad).
struct Rows {
  int T, ldP, Tc, row0, nrows;
  size_t count;  // B*NH*nrows launch rows
};
__device__ __forceinline__ size_t buffer_row(const Rows& R, size_t r, int& i) {
  i = R.row0 + int(r % R.nrows);
  return (r / R.nrows) * R.T + i;
}
// The mask of the MASKED forward softmax kernels: query i of launch row r (head row
// bh = r / nrows = b NH + h) sees keys lo(i)..i of sequence b (mask.h).
struct SoftmaxMask {
  AttnMask mask;
  int NH;
  __device__ __forceinline__ int lo(const Rows& R, size_t r, int i) const {
    return mask.seq(int(r / R.nrows / NH), R.T).lo(i);
  }
};

// Forward softmax, row held in registers: NT threads per row, VPT vectors of 8 per thread.
// MASKED: keys before lo(i) masked too (SoftmaxMask).
template <int NT, int VPT, bool MASKED>
__global__ void __launch_bounds__(NT * rows_per_block<NT>())
    softmax_fwd_reg_kernel(floatX* P, Rows R, float scale_log2e, SoftmaxMask mk) {
  __shared__ float red_m[NT / 32 > 0 ? NT / 32 : 1], red_s[NT / 32 > 0 ? NT / 32 : 1];
  const size_t r = size_t(blockIdx.x) * rows_per_block<NT>() + threadIdx.x / NT;
  if (r >= R.count) return;  // NT == 32 only (NT > 32 has one row per block and a full grid)
  const int lane = threadIdx.x % NT;
  int i;
  floatX* row = P + buffer_row(R, r, i) * R.ldP;
  const int rend = min(R.T, (i / R.Tc + 1) * R.Tc);
  const int lo = MASKED ? mk.lo(R, r, i) : 0;  // the row's first key
  float x[VPT][8];
  float m = -INFINITY;
#pragma unroll
  for (int k = 0; k < VPT; k++) {
    const int j0 = (k * NT + lane) * 8;
    if (j0 <= i) {
      load8(row + j0, x[k]);
#pragma unroll
      for (int e = 0; e < 8; e++) {
        x[k][e] = (j0 + e <= i && j0 + e >= lo) ? x[k][e] : -INFINITY;
        m = fmaxf(m, x[k][e]);
      }
    } else {
#pragma unroll
      for (int e = 0; e < 8; e++) x[k][e] = -INFINITY;
    }
  }
  m = row_max<NT>(m, red_m);  // finite: j = i is always valid
  const float ms = m * scale_log2e;
  float l = 0.f;
#pragma unroll
  for (int k = 0; k < VPT; k++)
#pragma unroll
    for (int e = 0; e < 8; e++) {
      x[k][e] = exp2f(fmaf(x[k][e], scale_log2e, -ms));  // exp(scale (s - m)); -inf -> 0
      l += x[k][e];
    }
  l = row_sum<NT>(l, red_s);
  const float inv = 1.f / l;
#pragma unroll
  for (int k = 0; k < VPT; k++) {
    const int j0 = (k * NT + lane) * 8;
    if (j0 < rend) {
#pragma unroll
      for (int e = 0; e < 8; e++) x[k][e] *= inv;  // masked entries are exactly 0
      store8(row + j0, x[k]);
    }
  }
}

// Backward softmax in place on dP, registers: dS_ij = P_ij (dP_ij - sum_k P_ik dP_ik). P and dP
// stay packed (floatX) in registers: 64 fp32 values a thread would spill at 1024 threads.
struct alignas(16) Vec8 {
  floatX x[8];
};

template <int NT, int VPT>
__global__ void __launch_bounds__(NT * rows_per_block<NT>())
    softmax_bwd_reg_kernel(floatX* dP, const floatX* P, Rows R) {
  __shared__ float red[NT / 32 > 0 ? NT / 32 : 1];
  const size_t r = size_t(blockIdx.x) * rows_per_block<NT>() + threadIdx.x / NT;
  if (r >= R.count) return;
  const int lane = threadIdx.x % NT;
  int i;
  const size_t row = buffer_row(R, r, i);
  const int rend = min(R.T, (i / R.Tc + 1) * R.Tc);
  floatX* drow = dP + row * R.ldP;
  const floatX* prow = P + row * R.ldP;
  Vec8 p[VPT], dp[VPT];
  float D = 0.f;
#pragma unroll
  for (int k = 0; k < VPT; k++) {
    const int j0 = (k * NT + lane) * 8;
    if (j0 <= i) {
      p[k] = *reinterpret_cast<const Vec8*>(prow + j0);
      dp[k] = *reinterpret_cast<const Vec8*>(drow + j0);
#pragma unroll
      for (int e = 0; e < 8; e++)
        if (j0 + e <= i) D = fmaf(float(p[k].x[e]), float(dp[k].x[e]), D);
    }
  }
  D = row_sum<NT>(D, red);
#pragma unroll
  for (int k = 0; k < VPT; k++) {
    const int j0 = (k * NT + lane) * 8;
    if (j0 < rend) {
      float ds[8];
#pragma unroll
      for (int e = 0; e < 8; e++)  // 0 above the diagonal
        ds[e] = (j0 + e <= i) ? float(p[k].x[e]) * (float(dp[k].x[e]) - D) : 0.f;
      store8(drow + j0, ds);
    }
  }
}

// Rows longer than kRegRowCap: one block of 1024 threads per row, two passes over memory.
constexpr int kLoopNT = 1024;

template <bool MASKED>
__global__ void __launch_bounds__(kLoopNT)
    softmax_fwd_loop_kernel(floatX* P, Rows R, float scale_log2e, SoftmaxMask mk) {
  __shared__ float red_m[kLoopNT / 32], red_s[kLoopNT / 32];
  int i;
  floatX* row = P + buffer_row(R, blockIdx.x, i) * R.ldP;
  const int rend = min(R.T, (i / R.Tc + 1) * R.Tc);
  const int lo = MASKED ? mk.lo(R, blockIdx.x, i) : 0;  // the row's first key
  float m = -INFINITY, l = 0.f;  // this thread's running max and sum (of exp(scale (s - m)))
  for (int j0 = threadIdx.x * 8; j0 <= i; j0 += kLoopNT * 8) {
    float x[8];
    load8(row + j0, x);
    float mv = m;
    for (int e = 0; e < 8; e++) mv = (j0 + e <= i && (!MASKED || j0 + e >= lo)) ? fmaxf(mv, x[e]) : mv;
    // MASKED: mv = -inf when no key of this thread's is visible yet (keep exp2(-inf + inf) out)
    float acc = MASKED && mv == -INFINITY ? 0.f : l * exp2f((m - mv) * scale_log2e);
    for (int e = 0; e < 8; e++)
      acc += (j0 + e <= i && (!MASKED || j0 + e >= lo)) ? exp2f((x[e] - mv) * scale_log2e) : 0.f;
    m = mv, l = acc;
  }
  const float M = row_max<kLoopNT>(m, red_m);
  l = (m == -INFINITY) ? 0.f : l * exp2f((m - M) * scale_log2e);
  l = row_sum<kLoopNT>(l, red_s);
  const float inv = 1.f / l;
  for (int j0 = threadIdx.x * 8; j0 < rend; j0 += kLoopNT * 8) {
    float x[8] = {};
    if (j0 <= i) load8(row + j0, x);
    for (int e = 0; e < 8; e++)
      x[e] = (j0 + e <= i && (!MASKED || j0 + e >= lo)) ? exp2f((x[e] - M) * scale_log2e) * inv : 0.f;
    store8(row + j0, x);
  }
}

__global__ void __launch_bounds__(kLoopNT)
    softmax_bwd_loop_kernel(floatX* dP, const floatX* P, Rows R) {
  __shared__ float red[kLoopNT / 32];
  int i;
  const size_t row = buffer_row(R, blockIdx.x, i);
  const int rend = min(R.T, (i / R.Tc + 1) * R.Tc);
  floatX* drow = dP + row * R.ldP;
  const floatX* prow = P + row * R.ldP;
  float D = 0.f;
  for (int j0 = threadIdx.x * 8; j0 <= i; j0 += kLoopNT * 8) {
    float p[8], dp[8];
    load8(prow + j0, p);
    load8(drow + j0, dp);
    for (int e = 0; e < 8; e++) D += (j0 + e <= i) ? p[e] * dp[e] : 0.f;
  }
  D = row_sum<kLoopNT>(D, red);
  for (int j0 = threadIdx.x * 8; j0 < rend; j0 += kLoopNT * 8) {
    float p[8] = {}, dp[8] = {};
    if (j0 <= i) {
      load8(prow + j0, p);
      load8(drow + j0, dp);
    }
    for (int e = 0; e < 8; e++) p[e] = (j0 + e <= i) ? p[e] * (dp[e] - D) : 0.f;
    store8(drow + j0, p);
  }
}

template <int NT, int VPT, bool MASKED>
void launch_softmax_fwd(floatX* P, const Rows& R, float sl2e, const SoftmaxMask& M,
                        cudaStream_t st) {
  constexpr int rpb = rows_per_block<NT>();
  softmax_fwd_reg_kernel<NT, VPT, MASKED>
      <<<unsigned(ceil_div(R.count, size_t(rpb))), NT * rpb, 0, st>>>(P, R, sl2e, M);
  CUDA_CHECK_LAUNCH();
}
template <int NT, int VPT>
void launch_softmax_bwd(floatX* dP, const floatX* P, const Rows& R, cudaStream_t st) {
  constexpr int rpb = rows_per_block<NT>();
  softmax_bwd_reg_kernel<NT, VPT>
      <<<unsigned(ceil_div(R.count, size_t(rpb))), NT * rpb, 0, st>>>(dP, P, R);
  CUDA_CHECK_LAUNCH();
}

// Softmax kernel configs, by row length: capacity NT*VPT*8 >= ldP. Warp-per-row up to 1024
// keys (32 floats a lane), then one block per row; beyond kRegRowCap the two-pass loop kernel.
// The backward's <1024, 4> spills 22 bytes (64 registers at 1024 threads): cheap next to its
// 2 x 64 KB row reads. Tests force each config on small T through make_naive_attention_with_softmax(cfg).
constexpr int kNumSoftmaxConfigs = 6;  // 0..4 register kernels, 5 loop kernel
constexpr int kConfigCap[kNumSoftmaxConfigs] = {256, 1024, 4096, 16384, kRegRowCap, INT_MAX};

int pick_softmax_config(const Plan& p, int forced) {
  if (forced >= 0) {
    CHECK(forced < kNumSoftmaxConfigs && kConfigCap[forced] >= p.ldP,
          "naive attention: softmax config %d cannot hold rows of %d", forced, p.ldP);
    return forced;
  }
  int c = 0;
  while (kConfigCap[c] < p.ldP) c++;
  return c;
}

// Softmax over every row of every head.
Rows all_rows(const Plan& p) { return {p.T, p.ldP, p.Tc, 0, p.T, size_t(p.BNH) * p.T}; }

// Calls launch(NT, VPT) with the softmax kernels' launch configuration cfg (0-4: launch_softmax_*'s
// template arguments as std::integral_constant values), or loop() for the others (the loop
// kernels).
template <class Launch, class Loop>
void with_softmax_config(int cfg, Launch&& launch, Loop&& loop) {
  using std::integral_constant;
  switch (cfg) {
    case 0: launch(integral_constant<int, 32>{}, integral_constant<int, 1>{}); break;
    case 1: launch(integral_constant<int, 32>{}, integral_constant<int, 4>{}); break;
    case 2: launch(integral_constant<int, 128>{}, integral_constant<int, 4>{}); break;
    case 3: launch(integral_constant<int, 512>{}, integral_constant<int, 4>{}); break;
    case 4: launch(integral_constant<int, 1024>{}, integral_constant<int, 4>{}); break;
    default: loop();
  }
}

// The loop kernels: one block of kLoopNT threads per row.
template <class Kernel, class... Args>
void launch_softmax_loop(Kernel kernel, const Rows& R, cudaStream_t st, Args... args) {
  kernel<<<unsigned(R.count), kLoopNT, 0, st>>>(args...);
  CUDA_CHECK_LAUNCH();
}

template <bool MASKED>
void softmax_forward_as(floatX* P, const Plan& p, int cfg, float sl2e, const SoftmaxMask& M,
                        cudaStream_t st) {
  const Rows R = all_rows(p);
  with_softmax_config(
      cfg, [&](auto nt, auto vpt) { launch_softmax_fwd<nt(), vpt(), MASKED>(P, R, sl2e, M, st); },
      [&] { launch_softmax_loop(softmax_fwd_loop_kernel<MASKED>, R, st, P, R, sl2e, M); });
}
void softmax_forward(floatX* P, const Plan& p, int cfg, float sl2e, const AttnMask& mask,
                     cudaStream_t st) {
  const SoftmaxMask M{mask, p.NH};
  if (mask.is_causal()) softmax_forward_as<false>(P, p, cfg, sl2e, M, st);
  else softmax_forward_as<true>(P, p, cfg, sl2e, M, st);
}
void softmax_backward(floatX* dP, const floatX* P, const Plan& p, int cfg, cudaStream_t st) {
  const Rows R = all_rows(p);
  with_softmax_config(
      cfg, [&](auto nt, auto vpt) { launch_softmax_bwd<nt(), vpt()>(dP, P, R, st); },
      [&] { launch_softmax_loop(softmax_bwd_loop_kernel, R, st, dP, P, R); });
}

// GQA: dK[b, t, g] = sum_j dKp[b, g*G + j, t] (fixed order), likewise dV; 4 elements a thread.
__global__ void gqa_reduce_kernel(floatX* dqkv, const float* dKp, const float* dVp, int B, int T,
                                  int NH, int NKV, int HS) {
  const int G = NH / NKV, HS4 = HS / 4;
  const size_t idx = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= size_t(B) * T * NKV * HS4) return;
  const int d = int(idx % HS4) * 4;
  size_t rest = idx / HS4;
  const int g = int(rest % NKV);
  rest /= NKV;
  const int t = int(rest % T);
  const int b = int(rest / T);
  float4 k = make_float4(0.f, 0.f, 0.f, 0.f), v = k;
  for (int j = 0; j < G; j++) {
    const size_t src = ((size_t(b) * NH + size_t(g) * G + j) * T + t) * HS + d;
    const float4 a = *reinterpret_cast<const float4*>(dKp + src);
    const float4 c = *reinterpret_cast<const float4*>(dVp + src);
    k.x += a.x, k.y += a.y, k.z += a.z, k.w += a.w;
    v.x += c.x, v.y += c.y, v.z += c.z, v.w += c.w;
  }
  const size_t H3 = size_t(NH) + 2 * NKV;
  floatX* dk = dqkv + ((size_t(b) * T + t) * H3 + NH + g) * HS + d;
  floatX* dv = dqkv + ((size_t(b) * T + t) * H3 + NH + NKV + g) * HS + d;
  dk[0] = floatX(k.x), dk[1] = floatX(k.y), dk[2] = floatX(k.z), dk[3] = floatX(k.w);
  dv[0] = floatX(v.x), dv[1] = floatX(v.y), dv[2] = floatX(v.z), dv[3] = floatX(v.w);
}

bool is_aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// Byte strides of the buffers the batched GEMMs walk (Plan's element strides times es): qkv and
// dqkv by sequence (sbq), out and dout by sequence (sbo), P by sequence (sbP) and head (shP),
// one head's columns (hs).
struct ByteStrides {
  long long es, sbq, sbo, sbP, shP, hs;
  explicit ByteStrides(const Plan& p)
      : es((long long)p.es), sbq((long long)p.T * p.ld * es), sbo((long long)p.T * p.ldo * es),
        sbP((long long)p.NH * p.T * p.ldP * es), shP((long long)p.T * p.ldP * es),
        hs((long long)(p.HS * es)) {}
};

class NaiveAttention final : public AttentionBackend {
 public:
  explicit NaiveAttention(int softmax_config)
      : AttentionBackend(attention_spec("naive")), softmax_config_(softmax_config) {}
  ~NaiveAttention() override {
    if (handle_) cublasDestroy(handle_);
  }

  void forward(const AttnForwardArgs& a, cudaStream_t st) const override {
    check(a.shape, a.mask);
    CHECK(is_aligned16(a.out) && is_aligned16(a.qkv) && is_aligned16(a.saved) && is_aligned16(a.scratch),
          "naive attention: out, qkv, saved and scratch must be 16-byte aligned");
    const Plan p(a.shape, sizeof(floatX));
    prepare(st);
    const ByteStrides bs(p);
    const char* qkv = reinterpret_cast<const char*>(a.qkv);
    enum { K, V, Q, PP, O, N };
    PtrDescs d{};
    d.d[K] = {qkv + size_t(p.NH) * p.HS * bs.es, bs.sbq, bs.hs, 0, p.G};
    d.d[V] = {qkv + size_t(p.NH + p.NKV) * p.HS * bs.es, bs.sbq, bs.hs, 0, p.G};
    d.d[Q] = {qkv, bs.sbq, bs.hs, (long long)p.Tc * p.ld * bs.es, 1};
    d.d[PP] = {static_cast<const char*>(a.saved), bs.sbP, bs.shP, (long long)p.Tc * p.ldP * bs.es, 1};
    d.d[O] = {reinterpret_cast<const char*>(a.out), bs.sbo, bs.hs,
              (long long)p.Tc * p.ldo * bs.es, 1};
    void** ptrs = fill_ptrs(a.scratch, d, N, p, st);
    auto arr = [&](int desc, int c) { return ptrs + (size_t(desc) * p.nc + c) * p.BNH; };

    const float sl2e = float(1.0 / std::sqrt(double(p.HS)) * 1.4426950408889634);
    const int cfg = pick_softmax_config(p, softmax_config_);
    for (int c = 0; c < p.nc; c++) {  // S[r0:r1, 0:r1] = Q[r0:r1] K[0:r1]^T
      const int r1 = p.r1(c), n = r1 - p.r0(c);
      gemm(CUBLAS_OP_T, CUBLAS_OP_N, r1, n, p.HS, 1.f, arr(K, 0), p.ld, arr(Q, c), p.ld,
           arr(PP, c), kCudaFloatX, p.ldP, p.BNH);
    }
    softmax_forward(static_cast<floatX*>(a.saved), p, cfg, sl2e, a.mask, st);
    for (int c = 0; c < p.nc; c++) {  // O[r0:r1] = P[r0:r1, 0:r1] V[0:r1]
      const int r1 = p.r1(c), n = r1 - p.r0(c);
      gemm(CUBLAS_OP_N, CUBLAS_OP_N, p.HS, n, r1, 1.f, arr(V, 0), p.ld, arr(PP, c), p.ldP,
           arr(O, c), kCudaFloatX, p.ldo, p.BNH);
    }
  }

  void backward(const AttnBackwardArgs& a, cudaStream_t st) const override {
    check(a.shape, a.mask);
    CHECK(is_aligned16(a.dqkv) && is_aligned16(a.dout) && is_aligned16(a.qkv) && is_aligned16(a.saved) &&
              is_aligned16(a.scratch),
          "naive attention: dqkv, dout, qkv, saved and scratch must be 16-byte aligned");
    const Plan p(a.shape, sizeof(floatX));
    prepare(st);
    const ByteStrides bs(p);
    const char* qkv = reinterpret_cast<const char*>(a.qkv);
    char* dqkv = reinterpret_cast<char*>(a.dqkv);
    char* scratch = static_cast<char*>(a.scratch);
    floatX* dP = reinterpret_cast<floatX*>(scratch + p.off_dp);
    float* dKp = reinterpret_cast<float*>(scratch + p.off_dkp);
    float* dVp = reinterpret_cast<float*>(scratch + p.off_dvp);
    const bool direct = p.G == 1;  // dK, dV straight into dqkv; else fp32 partials + reduce

    enum { K, V, Q, DO, PD, DS, DSD, DQ, DK, DV, N };
    static_assert(N <= kMaxDescs, "more pointer arrays than the scratch plan holds");
    PtrDescs d{};
    d.d[K] = {qkv + size_t(p.NH) * p.HS * bs.es, bs.sbq, bs.hs, 0, p.G};
    d.d[V] = {qkv + size_t(p.NH + p.NKV) * p.HS * bs.es, bs.sbq, bs.hs, 0, p.G};
    d.d[Q] = {qkv, bs.sbq, bs.hs, (long long)p.Tc * p.ld * bs.es, 1};
    d.d[DO] = {reinterpret_cast<const char*>(a.dout), bs.sbo, bs.hs, (long long)p.Tc * p.ldo * bs.es, 1};
    d.d[PD] = {static_cast<const char*>(a.saved), bs.sbP, bs.shP, (long long)p.Tc * (p.ldP + 1) * bs.es, 1};
    d.d[DS] = {reinterpret_cast<const char*>(dP), bs.sbP, bs.shP, (long long)p.Tc * p.ldP * bs.es, 1};
    d.d[DSD] = {reinterpret_cast<const char*>(dP), bs.sbP, bs.shP, (long long)p.Tc * (p.ldP + 1) * bs.es, 1};
    d.d[DQ] = {dqkv, bs.sbq, bs.hs, (long long)p.Tc * p.ld * bs.es, 1};
    if (direct) {
      d.d[DK] = {dqkv + size_t(p.NH) * p.HS * bs.es, bs.sbq, bs.hs, (long long)p.Tc * p.ld * bs.es, 1};
      d.d[DV] = {dqkv + size_t(p.NH + p.NKV) * p.HS * bs.es, bs.sbq, bs.hs, (long long)p.Tc * p.ld * bs.es, 1};
    } else {
      const long long f = sizeof(float);
      const long long sbp = (long long)p.NH * p.T * p.HS * f, shp = (long long)p.T * p.HS * f;
      d.d[DK] = {reinterpret_cast<const char*>(dKp), sbp, shp, (long long)p.Tc * p.HS * f, 1};
      d.d[DV] = {reinterpret_cast<const char*>(dVp), sbp, shp, (long long)p.Tc * p.HS * f, 1};
    }
    void** ptrs = fill_ptrs(a.scratch, d, N, p, st);
    auto arr = [&](int desc, int c) { return ptrs + (size_t(desc) * p.nc + c) * p.BNH; };
    const cudaDataType kvType = direct ? kCudaFloatX : CUDA_R_32F;
    const int ldkv = direct ? p.ld : p.HS;
    const float scale = float(1.0 / std::sqrt(double(p.HS)));

    const int cfg = pick_softmax_config(p, softmax_config_);
    for (int c = 0; c < p.nc; c++) {
      const int r0 = p.r0(c), r1 = p.r1(c), n = r1 - r0;
      // dV[r0:r1] = P[r0:T, r0:r1]^T dO[r0:T]   (key chunk c: column block of P)
      gemm(CUBLAS_OP_N, CUBLAS_OP_T, p.HS, n, p.T - r0, 1.f, arr(DO, c), p.ldo, arr(PD, c), p.ldP,
           arr(DV, c), kvType, ldkv, p.BNH);
      // dP[r0:r1, 0:r1] = dO[r0:r1] V[0:r1]^T   (query chunk c: row block)
      gemm(CUBLAS_OP_T, CUBLAS_OP_N, r1, n, p.HS, 1.f, arr(V, 0), p.ld, arr(DO, c), p.ldo,
           arr(DS, c), kCudaFloatX, p.ldP, p.BNH);
    }
    softmax_backward(dP, static_cast<const floatX*>(a.saved), p, cfg, st);
    for (int c = 0; c < p.nc; c++) {
      const int r0 = p.r0(c), r1 = p.r1(c), n = r1 - r0;
      // dQ[r0:r1] = scale dS[r0:r1, 0:r1] K[0:r1]
      gemm(CUBLAS_OP_N, CUBLAS_OP_N, p.HS, n, r1, scale, arr(K, 0), p.ld, arr(DS, c), p.ldP,
           arr(DQ, c), kCudaFloatX, p.ld, p.BNH);
      // dK[r0:r1] = scale dS[r0:T, r0:r1]^T Q[r0:T]
      gemm(CUBLAS_OP_N, CUBLAS_OP_T, p.HS, n, p.T - r0, scale, arr(Q, c), p.ld, arr(DSD, c),
           p.ldP, arr(DK, c), kvType, ldkv, p.BNH);
    }
    if (!direct) {
      const size_t total = size_t(p.B) * p.T * p.NKV * (p.HS / 4);
      gqa_reduce_kernel<<<unsigned(ceil_div(total, size_t(256))), 256, 0, st>>>(
          a.dqkv, dKp, dVp, p.B, p.T, p.NH, p.NKV, p.HS);
      CUDA_CHECK_LAUNCH();
    }
  }

 private:
  int softmax_config_;  // -1: by row length; else forced (tests)
  mutable cublasHandle_t handle_ = nullptr;  // created on first use, so that a backend can be
                                             // made (and named) on a machine without a GPU

  void prepare(cudaStream_t st) const {
    if (!handle_) CUBLAS_CHECK(cublasCreate(&handle_));
    CUBLAS_CHECK(cublasSetStream(handle_, st));
  }

  void** fill_ptrs(void* scratch, const PtrDescs& d, int ndesc, const Plan& p,
                   cudaStream_t st) const {
    const void** out = static_cast<const void**>(scratch);
    const size_t total = size_t(ndesc) * p.nc * p.BNH;
    fill_ptrs_kernel<<<unsigned(ceil_div(total, size_t(256))), 256, 0, st>>>(out, d, ndesc, p.nc,
                                                                            p.NH, p.BNH);
    CUDA_CHECK_LAUNCH();
    return static_cast<void**>(scratch);
  }

  // Column-major C (m x n) = alpha op(A) op(B), batched over pointer arrays, fp32 accumulation.
  void gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
            void** A, int lda, void** B, int ldb, void** C, cudaDataType ctype, int ldc,
            int batch) const {
    const float beta = 0.f;
    CUBLAS_CHECK(cublasGemmBatchedEx(handle_, ta, tb, m, n, k, &alpha, A, kCudaFloatX, lda, B,
                                     kCudaFloatX, ldb, &beta, C, ctype, ldc, batch,
                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
};

}  // namespace

std::unique_ptr<AttentionBackend> make_naive_attention() {
  return std::make_unique<NaiveAttention>(-1);
}

std::unique_ptr<AttentionBackend> make_naive_attention_with_softmax(int softmax_config) {
  return std::make_unique<NaiveAttention>(softmax_config);
}
