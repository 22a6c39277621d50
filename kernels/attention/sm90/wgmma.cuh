// sm90/wgmma.cuh — warpgroup MMA (wgmma, sm_90a): 4 warps together, operands from shared memory
// (described by a 64-bit descriptor) or A from registers, fp32 accumulators in registers.
// Test: ./build/test_gpu --gtest_filter='Hopper.Wgmma*'  (tests/gpu/test_sm90.cu)
//
// D (64 x N, fp32) += A (64 x 16) B (16 x N). Accumulator fragments: warp w % 4 of the group owns
// rows 16 (w % 4) .. +15, and float d[4 n + e] is element e of the mma.sync C fragment of the
// 8-column tile n (rows g, g + 8; columns 2t, 2t + 1; g = lane / 4, t = lane % 4: the layout of
// flash_common.cuh). A from registers (the _rs form) is the mma.sync A fragment of the warp's 16
// rows. TA / TB = 0: the operand is K-major (A row-major, B stored as N rows of K); 1: MN-major
// (stored as K rows of M or N), bf16 only.
// Ordering rules: wgmma_fence() before the first wgmma of a batch whenever its A or accumulator
// registers were written by ordinary instructions; wgmma_commit() closes a group and
// wgmma_wait<N>() waits until at most N groups are in flight. reg_fence() pins registers in
// program order: before wgmma_fence() so that the writes of accumulators / A fragments are not
// sunk past it (ptxas would then insert its own fence and serialize the wgmmas: the C7510-series
// warnings, which a change here must never bring), and after a wait so that reads of the
// accumulators are not hoisted above it. Shared memory written by threads (st.shared, cp.async)
// must pass fence_proxy_async_smem() (sm90/sync.cuh) and a barrier before a wgmma reads it.
#pragma once
#include <stdint.h>

namespace sm90 {

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
template <int N>
__device__ __forceinline__ void reg_fence(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void reg_fence(uint32_t (&r)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(r[i][e])::"memory");
}

// Shared-memory matrix descriptor for the 128-byte swizzle (the layout of load_panels_async):
// start address, LBO = bytes between 64-column panels along M/N (MN-major operands spanning
// several panels; unused for K-major), SBO = bytes between groups of 8 rows (1024 here). The
// start may advance by 32 bytes (16 bf16 of K) inside a swizzled row: the hardware applies the
// swizzle to the address bits, so every panel must sit at a multiple of 1024 bytes.
__device__ __forceinline__ uint64_t gmma_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)(lbo >> 4) << 16) |
         ((uint64_t)(sbo >> 4) << 32) | (1ull << 62);
}
// The descriptor of addr + bytes from addr's: the start field is addr / 16 in the low 14 bits,
// so adding bytes / 16 to the low word is exact while addr + bytes stays below 256 KB (shared
// memory is 228 KB). A k-loop then builds each operand's descriptor once and adds a constant
// per k-step, where gmma_desc(addr + bytes, ...) masks, shifts and ors at every step
// (flash_bwd_wgmma.cuh OperandDesc says what that saves).
__device__ __forceinline__ uint64_t gmma_desc_at(uint64_t desc, uint32_t bytes) {
  const uint32_t lo = static_cast<uint32_t>(desc) + (bytes >> 4);
  return (desc & 0xFFFFFFFF00000000ull) | lo;
}

// The accumulator operands of one wgmma, "+f"(d[0]) .., and the "%0, %1, .." list that names them.
#define SM90_ACC8(d, i)                                                                     \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
      "+f"(d[i + 6]), "+f"(d[i + 7])
#define SM90_ACC32(d) SM90_ACC8(d, 0), SM90_ACC8(d, 8), SM90_ACC8(d, 16), SM90_ACC8(d, 24)
#define SM90_ACC64(d) \
  SM90_ACC32(d), SM90_ACC8(d, 32), SM90_ACC8(d, 40), SM90_ACC8(d, 48), SM90_ACC8(d, 56)
#define SM90_REGS32                                                                          \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define SM90_REGS64                                                                          \
  SM90_REGS32 ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, "  \
              "%47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, " \
              "%63"

// One wgmma instruction: shape, the accumulator list, the A and B operands, the scale-d
// predicate's operand and the transpose immediates.
#define SM90_WGMMA(SHAPE, REGS, AB, SCALE_D, TRANS)                                      \
  "{\n.reg .pred p;\nsetp.ne.b32 p, " SCALE_D ", 0;\nwgmma.mma_async.sync.aligned." SHAPE \
  ".f32.bf16.bf16 {" REGS "}, " AB ", p, 1, 1, " TRANS ";\n}\n"

// D += A B, A and B from shared memory; m64n64k16 (N = 32 fp32 per thread) or m64n128k16
// (N = 64). scale_d = 0 gives D = A B (the accumulator's old contents are ignored: no zeroing
// needed).
template <int TA, int TB, int N>
__device__ __forceinline__ void wgmma_ss(float (&d)[N], uint64_t da, uint64_t db, int scale_d = 1) {
  static_assert(N == 32 || N == 64, "m64n64 or m64n128");
  if constexpr (N == 32)
    asm volatile(SM90_WGMMA("m64n64k16", SM90_REGS32, "%32, %33", "%34", "%35, %36")
                 : SM90_ACC32(d)
                 : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB));
  else
    asm volatile(SM90_WGMMA("m64n128k16", SM90_REGS64, "%64, %65", "%66", "%67, %68")
                 : SM90_ACC64(d)
                 : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB));
}

// D += A B, A from registers (the warp's 16 x 16 mma.sync A fragment), B from shared memory.
template <int TB, int N>
__device__ __forceinline__ void wgmma_rs(float (&d)[N], const uint32_t (&a)[4], uint64_t db,
                                         int scale_d = 1) {
  static_assert(N == 32 || N == 64, "m64n64 or m64n128");
  if constexpr (N == 32)
    asm volatile(SM90_WGMMA("m64n64k16", SM90_REGS32, "{%32, %33, %34, %35}, %36", "%37", "%38")
                 : SM90_ACC32(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d), "n"(TB));
  else
    asm volatile(SM90_WGMMA("m64n128k16", SM90_REGS64, "{%64, %65, %66, %67}, %68", "%69", "%70")
                 : SM90_ACC64(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d), "n"(TB));
}
#undef SM90_ACC8
#undef SM90_ACC32
#undef SM90_ACC64
#undef SM90_REGS32
#undef SM90_REGS64
#undef SM90_WGMMA

// acc = 0 by immediates, for an accumulator zeroed while another wgmma is in flight: the
// compiler's way (one register zeroed, copied to the others) reads a register that a wgmma of
// the same pipeline stage accumulates into, and ptxas then serializes every wgmma (C7514).
template <int N>
__device__ __forceinline__ void zero_acc(float (&acc)[N]) {
#pragma unroll
  for (int n = 0; n < N; ++n) asm volatile("mov.b32 %0, 0;\n" : "=f"(acc[n]));
}

}  // namespace sm90
