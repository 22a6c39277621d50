// bench_sm90.cu — `flashgpt bench-kernels --only tensor`: the rates that bound the flash3
// kernels, measured on this GPU with nothing else running:
//   * wgmma of each shape the attention kernels issue, a product's k-steps back to back into
//     one accumulator per warpgroup, then a wait for them (operands fixed in shared memory, or
//     A in registers: the RS form), with 1, 2 and 3 warpgroups per SM, alone and in the
//     forward's mix (per K/V tile, S = Q K^T and O += P V issued together);
//   * MUFU.EX2, 8 independent chains per thread: ex2.approx.ftz.f32, and the packed f16x2 and
//     bf16x2 forms (two exponentials an instruction), counted in exponentials.
// Each rate is reported in TFLOP/s (or Gop/s) from CUDA events and per SM and clock from
// clock64() inside the kernel (the H100's dense bf16 peak: 4096 FLOP and 16 EX2 per SM per
// clock). No memory traffic, no softmax, no barriers: what the tensor pipe and MUFU give a kernel
// that only feeds them. docs/notes/flash3.md reads the forward's numbers against these.
#include "bench/bench_sm90.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "bench/bench_util.cuh"
#include "kernels/attention/flash_common.cuh"
#include "kernels/attention/sm90/wgmma.cuh"
#include "kernels/cuda_common.cuh"
#include "kernels/cuda_timer.cuh"

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "bench_sm90.cu uses wgmma: build for sm_90a (GPU_ARCH=90a, the default)"
#endif

namespace {

using flash::smem_u32;

// One product of the attention kernels: m64 x (2 NACC) x 16 per wgmma, KSTEPS of them per group
// (the k dimension of one product), A in registers (RS) or shared memory, B K-major (TB 0) or
// MN-major (TB 1).
template <int NACC_, bool RS, int TB, int KSTEPS_>
struct Product {
  static constexpr int NACC = NACC_, KSTEPS = KSTEPS_;
  static constexpr int N = 2 * NACC;  // columns of the product
  static constexpr double flops() { return 2.0 * 64 * N * 16 * KSTEPS; }
  // Issues the group (no wait). Operand bytes: the layout of flash3.cu's descriptors over a
  // 64 KB region (values are whatever fill_smem left there).
  __device__ __forceinline__ static void issue(float (&d)[NACC], const uint32_t (&a)[KSTEPS][4],
                                               uint32_t sA, uint32_t sB) {
    sm90::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < KSTEPS; ++kk) {
      // K-major B: 32 bytes per k-step inside a 64-column panel, a panel per 4 k-steps;
      // MN-major B: 16 rows (2048 bytes) per k-step, N / 64 panels 16 KB apart
      const uint64_t db = TB == 0 ? sm90::gmma_desc(sB + (kk / 4) * (N * 128) + (kk % 4) * 32, 16, 1024)
                                  : sm90::gmma_desc(sB + kk * 2048, 16384, 1024);
      if constexpr (RS)
        sm90::wgmma_rs<TB>(d, a[kk], db);
      else
        sm90::wgmma_ss<0, TB>(d, sm90::gmma_desc(sA + (kk / 4) * 8192 + (kk % 4) * 32, 16, 1024),
                              db);
    }
    sm90::wgmma_commit();
  }
};

// Shared memory: 128 KB (one block per SM), A at 0 (64 rows, 2 panels), B at 16 KB.
constexpr int kSmem = 128 * 1024 + 1024;

__device__ __forceinline__ uint32_t fill_smem(unsigned char* raw) {
  const uint32_t s0 = (smem_u32(raw) + 1023u) & ~1023u;
  for (int i = threadIdx.x; i < 128 * 1024 / 4; i += blockDim.x)  // bf16 in [-1/8, 1/8]
    flash::st_shared_u32(s0 + 4 * i, 0x3E003E00u ^ ((i * 2654435761u) & 0x80ff80ffu));
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  return s0;
}

// Block clocks and a sink that keeps the accumulators live.
__device__ __forceinline__ void finish(long long t0, float sum, long long* clocks, float* sink) {
  __syncthreads();
  if (threadIdx.x == 0) clocks[blockIdx.x] = clock64() - t0;
  if (sum == 1234.5f) sink[threadIdx.x] = sum;
}

// Each warpgroup issues `iters` groups of P1 (and, MIX, of P2 after each) into its accumulators
// and waits for them before the next, as the attention kernels do (they read S and rescale O
// between groups); other warpgroups of the SM fill the wait.
// MAXT: the block's largest size (384: up to 168 registers a thread; 256: 255, for HS 128's mix).
template <class P1, class P2, bool MIX, int MAXT>
__global__ void __launch_bounds__(MAXT, 1)
    wgmma_rate_kernel(int iters, long long* clocks, float* sink) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t s0 = fill_smem(smem_raw);
  float d1[P1::NACC], d2[P2::NACC];
  uint32_t a1[P1::KSTEPS][4], a2[P2::KSTEPS][4];
#pragma unroll
  for (int k = 0; k < P1::KSTEPS; ++k)
#pragma unroll
    for (int e = 0; e < 4; ++e) a1[k][e] = 0x3C003C00u + threadIdx.x + k + e;
#pragma unroll
  for (int k = 0; k < P2::KSTEPS; ++k)
#pragma unroll
    for (int e = 0; e < 4; ++e) a2[k][e] = 0x3C003C00u + threadIdx.x + k + e;
  sm90::zero_acc(d1);
  sm90::zero_acc(d2);
  sm90::reg_fence(d1);
  sm90::reg_fence(d2);
  sm90::reg_fence(a1);
  sm90::reg_fence(a2);
  const long long t0 = clock64();
  for (int it = 0; it < iters; ++it) {
    P1::issue(d1, a1, s0, s0 + 16384);
    if constexpr (MIX) P2::issue(d2, a2, s0, s0 + 65536);
    sm90::wgmma_wait<0>();
  }
  sm90::reg_fence(d1);
  sm90::reg_fence(d2);
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < P1::NACC; ++i) sum += d1[i];
#pragma unroll
  for (int i = 0; i < P2::NACC; ++i) sum += d2[i];
  finish(t0, sum, clocks, sink);
}

// 8 independent chains of x = 2^-x per thread, in one of three forms:
//   kF32    ex2.approx.ftz.f32: one exponential an instruction (the flash kernels' form);
//   kF16x2  ex2.approx.f16x2:   two halves an instruction;
//   kBF16x2 ex2.approx.ftz.bf16x2 (sm_90): two bf16 an instruction, the P V operand's type.
// The packed forms would halve the softmax's MUFU instructions if MUFU took two an op.
enum class Ex2Form { kF32, kF16x2, kBF16x2 };
template <Ex2Form FORM>
__global__ void __launch_bounds__(1024) ex2_rate_kernel(int iters, long long* clocks, float* sink) {
  uint32_t x[8];  // one fp32, or two 16-bit values, per chain
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float v = 0.001f * (threadIdx.x + i);
    if constexpr (FORM == Ex2Form::kF32) x[i] = __float_as_uint(v);
    if constexpr (FORM == Ex2Form::kF16x2) x[i] = __half_as_ushort(__float2half(v)) * 0x10001u;
    if constexpr (FORM == Ex2Form::kBF16x2) x[i] = flash::pack_bf16(v, v);
  }
  __syncthreads();
  const long long t0 = clock64();
  for (int it = 0; it < iters; ++it)
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      if constexpr (FORM == Ex2Form::kF32)
        x[i] = __float_as_uint(flash::fast_exp2(-__uint_as_float(x[i])));
      // the sign bits set: 2^-x keeps the chain in (0, 1]
      if constexpr (FORM == Ex2Form::kF16x2)
        asm volatile("ex2.approx.f16x2 %0, %1;" : "=r"(x[i]) : "r"(x[i] | 0x80008000u));
      if constexpr (FORM == Ex2Form::kBF16x2)
        asm volatile("ex2.approx.ftz.bf16x2 %0, %1;" : "=r"(x[i]) : "r"(x[i] | 0x80008000u));
    }
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < 8; ++i) sum += __uint_as_float(x[i]);
  finish(t0, sum, clocks, sink);
}

struct Rate {
  double per_s;      // FLOP/s or ops/s over the whole GPU (events)
  double per_clock;  // per SM per clock (clock64: the median block)
};

template <class Launch>
Rate time_rate(Launch launch, double work_per_block, int blocks, DeviceAllocs& mem) {
  long long* clocks = mem.alloc<long long>(blocks);
  float* sink = mem.alloc<float>(1024);
  const double ms = median_ms([&] { launch(clocks, sink); }, 2, 5);
  std::vector<long long> c(blocks);
  CUDA_CHECK(cudaMemcpy(c.data(), clocks, blocks * sizeof(long long), cudaMemcpyDeviceToHost));
  std::sort(c.begin(), c.end());
  return {work_per_block * blocks / (ms * 1e-3), work_per_block / double(c[blocks / 2])};
}

// The GPU's rate for nwg warpgroups per SM, iters chosen for a ~5 ms kernel.
template <class P1, class P2, bool MIX, int MAXT = 384>
Rate wgmma_rate(int nwg, int sms) {
  CHECK(128 * nwg <= MAXT, "internal: %d warpgroups in a block of at most %d threads", nwg, MAXT);
  CUDA_CHECK(cudaFuncSetAttribute(wgmma_rate_kernel<P1, P2, MIX, MAXT>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  const double group = P1::flops() + (MIX ? P2::flops() : 0.0);
  const int iters = int(5e-3 * 900e12 / sms / nwg / group) + 1;
  DeviceAllocs mem;
  return time_rate(
      [&](long long* clocks, float* sink) {
        wgmma_rate_kernel<P1, P2, MIX, MAXT><<<sms, 128 * nwg, kSmem>>>(iters, clocks, sink);
        CUDA_CHECK_LAUNCH();
      },
      group * iters * nwg, sms, mem);
}

// One block of 1024 threads per SM (32 warps, 8 chains each: MUFU never waits on a result).
// Work: exponentials (two an instruction in the packed forms).
template <Ex2Form FORM>
Rate ex2_rate(int sms) {
  const int iters = 20000, threads = 1024;
  DeviceAllocs mem;
  return time_rate(
      [&](long long* clocks, float* sink) {
        ex2_rate_kernel<FORM><<<sms, threads>>>(iters, clocks, sink);
        CUDA_CHECK_LAUNCH();
      },
      8.0 * iters * threads * (FORM == Ex2Form::kF32 ? 1 : 2), sms, mem);
}

// The attention kernels' products (flash3.cu, flash3_bwd.cu).
using S64 = Product<64, false, 0, 4>;     // S = Q K^T, HS 64: m64n128k16 x 4, both in smem
using S128 = Product<64, false, 0, 8>;    // HS 128: x 8
using PV64 = Product<32, true, 1, 8>;     // O += P V, HS 64: m64n64k16 x 8, P in registers
using PV128 = Product<64, true, 1, 8>;    // HS 128: m64n128k16 x 8
using SS64x64 = Product<32, false, 0, 8>; // m64n64k16 x 8, both in smem (for comparison)

}  // namespace

void bench_sm90_rates() {
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  std::printf("tensor: wgmma back to back (no loads, no softmax), per SM and clock against the "
              "dense bf16 peak of 4096; MUFU.EX2 against 16:\n");
  std::printf("  %-52s %3s %9s %11s %7s\n", "product", "WGs", "TFLOP/s", "FLOP/clk/SM", "of peak");
  auto row = [&](const char* what, int nwg, Rate r) {
    std::printf("  %-52s %3d %9.1f %11.0f %6.1f%%\n", what, nwg, r.per_s / 1e12, r.per_clock,
                100.0 * r.per_clock / 4096.0);
  };
  for (int nwg = 1; nwg <= 3; ++nwg) {
    row("S = Q K^T, HS 64 (m64n128k16 SS x 4)", nwg, wgmma_rate<S64, S64, false>(nwg, sms));
    row("O += P V, HS 64 (m64n64k16 RS x 8)", nwg, wgmma_rate<PV64, PV64, false>(nwg, sms));
    row("HS 64 forward mix (S, then P V)", nwg, wgmma_rate<S64, PV64, true>(nwg, sms));
    row("m64n64k16 SS x 8", nwg, wgmma_rate<SS64x64, SS64x64, false>(nwg, sms));
    if (nwg <= 2) {
      row("S = Q K^T, HS 128 (m64n128k16 SS x 8)", nwg, wgmma_rate<S128, S128, false, 256>(nwg, sms));
      row("O += P V, HS 128 (m64n128k16 RS x 8)", nwg, wgmma_rate<PV128, PV128, false, 256>(nwg, sms));
      row("HS 128 forward mix (S, then P V)", nwg, wgmma_rate<S128, PV128, true, 256>(nwg, sms));
    }
  }
  auto ex2_row = [&](const char* what, Rate e) {
    std::printf("  %-52s %3s %9.1f %11.2f %6.1f%%   (Gop/s; exponentials per SM and clock against "
                "16)\n", what, "-", e.per_s / 1e9, e.per_clock, 100.0 * e.per_clock / 16.0);
  };
  ex2_row("MUFU.EX2 (ex2.approx.ftz.f32)", ex2_rate<Ex2Form::kF32>(sms));
  ex2_row("MUFU.EX2 f16x2 (ex2.approx.f16x2)", ex2_rate<Ex2Form::kF16x2>(sms));
  ex2_row("MUFU.EX2 bf16x2 (ex2.approx.ftz.bf16x2)", ex2_rate<Ex2Form::kBF16x2>(sms));
}
