// flash_common.cuh — device helpers shared by the FlashAttention forward and backward kernels:
// thin inline-PTX wrappers (cp.async, ldmatrix, mma.sync m16n8k16 bf16 for the forward, wgmma
// and its shared-memory descriptors for the backward, bulk reduce-add, ex2.approx), the
// swizzled shared-memory tile layouts, tile loads from the packed qkv buffer, the online-softmax
// row reductions, the ring's (O, LSE) merge and the causal tile tests. Included by the flash
// kernels (flash_fwd.cu, flash_bwd.cu) and, through hopper.cuh, by flash3's.
//
// Register fragments of mma.sync.m16n8k16 (g = lane / 4, t = lane % 4), each reg = 2 elements:
//   A 16x16 (row-major): a0 = (g, 2t..2t+1)  a1 = (g+8, 2t..)  a2 = (g, 2t+8..)  a3 = (g+8, 2t+8..)
//   B 16x8  (k x n, "col"): b0 = (k 2t..2t+1, n g)  b1 = (k 2t+8.., n g)
//   C 16x8  fp32: c0,c1 = (g, 2t), (g, 2t+1);  c2,c3 = (g+8, 2t), (g+8, 2t+1)
// The C layout of S (rows x keys) is the A layout of P for the next product (P V): two
// neighbouring 8-column C tiles, packed to bf16, are one 16-column A tile (the FA2 trick), so
// P never goes through shared memory.
//
// Shared-memory tiles are rows of `W` bf16 (W = 64 or 128: 128 or 256 bytes), stored in 16-byte
// chunks with the chunk index XOR-swizzled by (row % 8). An ldmatrix phase (8 rows, one chunk
// each) then touches 8 different bank groups: conflict-free. Without it every 8x8 matrix would
// be an 8-way bank conflict (all rows start on bank 0).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace flash {

constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---- cp.async: 16 bytes global -> shared, zero-filled when !pred (src must still be valid) ----
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool pred) {
  const int n = pred ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n)
               : "memory");
}
// 4 bytes (LSE / D rows of the backward), zero-filled when !pred.
__device__ __forceinline__ void cp_async_4(uint32_t dst, const void* src, bool pred) {
  const int n = pred ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(n)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// ---- bulk (TMA engine) reduction shared -> global, sm_90 ----
// Orders this thread's generic-proxy smem writes before async-proxy reads (the bulk copy).
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// gdst[0 .. bytes/4) += ssrc[...] (fp32 adds done in L2); bytes a multiple of 16, both 16-B
// aligned.
__device__ __forceinline__ void bulk_reduce_add_f32(float* gdst, uint32_t ssrc, uint32_t bytes) {
  asm volatile(
      "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(gdst),
      "r"(ssrc), "r"(bytes)
      : "memory");
}
// gdst[0 .. bytes/4) = ssrc[...] (a plain bulk copy); the same limits.
__device__ __forceinline__ void bulk_store_f32(float* gdst, uint32_t ssrc, uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(gdst),
               "r"(ssrc), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
// Wait until the committed bulk operations have finished reading their smem source.
__device__ __forceinline__ void bulk_wait_read_all() {
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
// Wait until the committed bulk operations are complete (their global writes done).
__device__ __forceinline__ void bulk_wait_all() {
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

// ---- ldmatrix: four 8x8 b16 matrices; lane l gives the row address of matrix l/8, row l%8 ----
__device__ __forceinline__ void ldmatrix_x4(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3,
                                            uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}
// The store counterpart (sm_90): four 8x8 b16 matrices from their mma fragments (r_i: this
// lane's pair of matrix i); lane l gives the row address of matrix l / 8, row l % 8.
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2,
                                            uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr),
               "r"(r0), "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t& r0, uint32_t& r1, uint32_t& r2,
                                                  uint32_t& r3, uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}

// ---- mma.sync m16n8k16, bf16 x bf16 + fp32 -> fp32, accumulating in place ----
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats -> bf16x2 (round to nearest), `lo` in the low half (the lower column index).
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// bf16x2 -> two floats (exact), low half first.
__device__ __forceinline__ float2 unpack_bf16(uint32_t v) {
  return make_float2(__uint_as_float(v << 16), __uint_as_float(v & 0xffff0000u));
}

// 2^x, MUFU.EX2 (ex2.approx: relative error ~2^-22, 2^-inf = +0). One instruction, versus the
// range-reduced sequence that exp2f compiles to without --use_fast_math.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float2 ld_shared_f2(uint32_t addr) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(addr) : "memory");
  return v;
}

// Quad (4 lanes sharing a C-fragment row) reductions.
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
  return x;
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  x += __shfl_xor_sync(0xffffffffu, x, 2);
  return x;
}

// ---- the ring's merge of one query row's block result (O_blk, LSE_blk) into its running fp32
// (O, LSE) (context parallelism; the forwards' RING epilogues, flash_fwd.cu and flash3.cu):
//   LSE' = log(e^LSE + e^LSE_blk),  O' = e^(LSE - LSE') O + e^(LSE_blk - LSE') O_blk.
// merge = false (the ring's first block, or a row past T): LSE' = LSE_blk and O' = O_blk.
struct RingMerge {
  float lse, w_old, w_blk;  // LSE', and the weights of the running O and of O_blk
};
// lse_run: the row's running LSE, read only when merging.
__device__ __forceinline__ RingMerge ring_merge_weights(float lse_blk, const float* lse_run,
                                                        bool merge) {
  RingMerge m{lse_blk, 0.f, 1.f};
  if (merge) {
    const float lse_old = *lse_run;
    const float mx = fmaxf(lse_old, lse_blk);
    if (mx == -INFINITY) {
      m.lse = -INFINITY;
      m.w_blk = 0.f;
    } else {
      m.lse = mx + logf(expf(lse_old - mx) + expf(lse_blk - mx));
      m.w_old = expf(lse_old - m.lse);
      m.w_blk = expf(lse_blk - m.lse);
    }
  }
  return m;
}
// Two neighbouring columns of the row: (x, y) = O_blk l (unnormalised, times inv = 1 / l) merged
// into dst = the running O (overwritten when not merging).
__device__ __forceinline__ void ring_merge_o2(float* dst, float x, float y, float inv,
                                              const RingMerge& m, bool merge) {
  float2 v = make_float2(x * inv * m.w_blk, y * inv * m.w_blk);
  float2* d2 = reinterpret_cast<float2*>(dst);
  if (merge) {
    const float2 old = *d2;
    v.x = fmaf(old.x, m.w_old, v.x);
    v.y = fmaf(old.y, m.w_old, v.y);
  }
  *d2 = v;
}

// ---- swizzled tile of ROWS x W bf16 in shared memory ----
// Byte offset of (row, 16-byte chunk c) inside the tile.
template <int W>
__device__ __forceinline__ uint32_t swz(int row, int chunk) {
  static_assert(W % 64 == 0, "swizzle needs >= 8 chunks (128 bytes) per row");
  return static_cast<uint32_t>(row * (W * 2) + ((chunk ^ (row & 7)) << 4));
}

// Load `rows` (<= ROWS) rows of W bf16 from global (row stride `ld` elements) into a swizzled
// tile; rows >= `valid` are zero-filled so ragged tiles compute on zeros, never garbage.
template <int ROWS, int W, int NTHREADS>
__device__ __forceinline__ void load_tile_async(uint32_t s_tile, const __nv_bfloat16* g, size_t ld,
                                                int valid, int tid) {
  constexpr int CHUNKS = W / 8;
  constexpr int TOTAL = ROWS * CHUNKS;
  static_assert(TOTAL % NTHREADS == 0, "tile chunks must split evenly over the threads");
#pragma unroll
  for (int k = 0; k < TOTAL / NTHREADS; ++k) {
    const int idx = tid + k * NTHREADS;
    const int row = idx / CHUNKS, c = idx % CHUNKS;
    const bool ok = row < valid;
    const __nv_bfloat16* src = g + (ok ? (size_t)row * ld + c * 8 : 0);
    cp_async_16(s_tile + swz<W>(row, c), src, ok);
  }
}

// ---- wgmma (sm_90a): warpgroup MMA, 4 warps together, B (and A) read from shared memory ----
// D (64 x N, fp32) += A (64 x 16) B (16 x N). Accumulator fragments: warp w % 4 of the group owns
// rows 16 (w % 4) .. +15, and float d[4 n + e] is element e of the mma.sync C fragment of the
// 8-column tile n (rows g, g + 8; columns 2t, 2t + 1): the layout above. A from registers (the
// _rs form) is the mma.sync A fragment of the warp's 16 rows. Operands in shared memory are
// described by a 64-bit descriptor (gmma_desc). TA / TB = 0: the operand is K-major (A row-major,
// B stored as N rows of K); 1: MN-major (stored as K rows of M or N), bf16 only.
// Ordering rules: wgmma_fence() before the first wgmma of a batch whenever its A or accumulator
// registers were written by ordinary instructions; wgmma_commit() closes a group and
// wgmma_wait<N>() waits until at most N groups are in flight. reg_fence() pins registers in
// program order: before wgmma_fence() so that the writes of accumulators / A fragments are not
// sunk past it (ptxas would then insert its own fence and serialize the wgmmas), and after a
// wait so that reads of the accumulators are not hoisted above it. Shared memory written by
// threads (st.shared, cp.async) must pass fence_proxy_async_smem() and a barrier before a wgmma
// reads it.
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
// per k-step, where gmma_desc(addr + bytes, ...) masks, shifts and ors at every step (ncu,
// session 11: much of flash3's backward's 39% more instructions than cuDNN's; flash_bwd_wgmma.cuh
// OperandDesc uses it).
__device__ __forceinline__ uint64_t gmma_desc_at(uint64_t desc, uint32_t bytes) {
  const uint32_t lo = static_cast<uint32_t>(desc) + (bytes >> 4);
  return (desc & 0xFFFFFFFF00000000ull) | lo;
}

// D += A B, A and B from shared memory; m64n64k16 or m64n128k16 by the accumulator's size.
// scale_d = 0 gives D = A B (the accumulator's old contents are ignored: no zeroing needed).
template <int TA, int TB>
__device__ __forceinline__ void wgmma_ss(float (&d)[32], uint64_t da, uint64_t db, int scale_d = 1) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, %32, %33, p, 1, 1, %35, %36;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
        "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
        "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
        "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31])
      : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB));
}

template <int TA, int TB>
__device__ __forceinline__ void wgmma_ss(float (&d)[64], uint64_t da, uint64_t db, int scale_d = 1) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, %64, %65, p, 1, 1, %67, %68;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
        "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
        "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
        "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
        "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]),
        "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),
        "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB));
}

// D += A B, A from registers (the warp's 16 x 16 mma.sync A fragment), B from shared memory.
template <int TB>
__device__ __forceinline__ void wgmma_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t db,
                                         int scale_d = 1) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
        "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
        "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
        "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d), "n"(TB));
}

template <int TB>
__device__ __forceinline__ void wgmma_rs(float (&d)[64], const uint32_t (&a)[4], uint64_t db,
                                         int scale_d = 1) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
        "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
        "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
        "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
        "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]),
        "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),
        "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d), "n"(TB));
}

// ---- panel tile: ROWS x W bf16 as W/64 panels of ROWS x 64 (128-byte rows), 128-byte swizzle ----
// Chunk c (16 bytes) of row r sits in panel c / 8, at r * 128 + ((c % 8) ^ (r % 8)) * 16: the
// layout the wgmma descriptor's 128-byte swizzle expects (K-major when rows are M/N, MN-major
// when rows are K), and conflict-free for 8-row ldmatrix / fragment stores like swz above.
template <int ROWS>
__device__ __forceinline__ uint32_t pswz(int row, int chunk) {
  return static_cast<uint32_t>((chunk >> 3) * (ROWS * 128) + row * 128 +
                               (((chunk & 7) ^ (row & 7)) << 4));
}
template <int ROWS, int W, int NTHREADS>
__device__ __forceinline__ void load_panels_async(uint32_t s_tile, const __nv_bfloat16* g,
                                                  size_t ld, int valid, int tid) {
  constexpr int CHUNKS = W / 8;
  constexpr int TOTAL = ROWS * CHUNKS;
  static_assert(W % 64 == 0, "whole 64-column panels");
  static_assert(TOTAL % NTHREADS == 0, "tile chunks must split evenly over the threads");
#pragma unroll
  for (int k = 0; k < TOTAL / NTHREADS; ++k) {
    const int idx = tid + k * NTHREADS;
    const int row = idx / CHUNKS, c = idx % CHUNKS;
    const bool ok = row < valid;
    const __nv_bfloat16* src = g + (ok ? (size_t)row * ld + c * 8 : 0);
    cp_async_16(s_tile + pswz<ROWS>(row, c), src, ok);
  }
}

// ---- causal tile arithmetic (query t sees keys 0..t) ----
// Does the tile (queries q0.., keys k0.., Bc keys) need the mask (some key > some query)?
__device__ __forceinline__ bool tile_needs_mask(int q0, int k0, int Bc) { return k0 + Bc - 1 > q0; }

}  // namespace flash
