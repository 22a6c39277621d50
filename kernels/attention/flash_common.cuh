// flash_common.cuh — device helpers shared by the FlashAttention kernels (flash1, flash, flash3):
// thin inline-PTX wrappers of the sm_80 idioms (cp.async, ldmatrix, mma.sync m16n8k16 bf16,
// ex2.approx), the swizzled shared-memory tile layouts, tile loads from the packed qkv buffer,
// the quad reductions of the online softmax and the causal tile test.
// The sm_90 idioms (wgmma, mbarrier, TMA, bulk copies, setmaxnreg, named barriers, fences) are
// in sm90/.
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

// ---- ldmatrix: four 8x8 b16 matrices; lane l gives the row address of matrix l/8, row l%8 ----
__device__ __forceinline__ void ldmatrix_x4(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3,
                                            uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
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

// max of two bf16x2 words, half by half (max.bf16x2; ptxas fuses a chain of them into 3-input
// VHMNMX, three halves a pair per instruction).
__device__ __forceinline__ uint32_t max_bf16x2(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("max.bf16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
  return d;
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
__device__ __forceinline__ int ld_shared_s32(uint32_t addr) {
  int v;
  asm volatile("ld.shared.s32 %0, [%1];\n" : "=r"(v) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ int2 ld_shared_s2(uint32_t addr) {
  int2 v;
  asm volatile("ld.shared.v2.s32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ uint4 ld_shared_v4(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}
// A 16-byte global store. `*reinterpret_cast<uint4*>(p) = v` of a value from ld_shared_v4
// compiled to four st.global.u32 (four times the store instructions and L2 requests).
__device__ __forceinline__ void st_global_v4(void* p, uint4 v) {
  asm volatile("st.global.v4.u32 [%0], {%1,%2,%3,%4};\n" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z),
               "r"(v.w)
               : "memory");
}
__device__ __forceinline__ void st_shared_u32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
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

// ---- swizzled tile of ROWS x W bf16 in shared memory ----
// Byte offset of (row, 16-byte chunk c) inside the tile.
template <int W>
__device__ __forceinline__ uint32_t swz(int row, int chunk) {
  static_assert(W % 64 == 0, "swizzle needs >= 8 chunks (128 bytes) per row");
  return static_cast<uint32_t>(row * (W * 2) + ((chunk ^ (row & 7)) << 4));
}

// Load ROWS rows of W bf16 from global (row stride `ld` elements) into a shared-memory tile
// whose 16-byte chunk c of row r sits at s_tile + at(r, c) (swz or pswz below); rows >= `valid`
// are zero-filled so ragged tiles compute on zeros, never garbage.
template <int ROWS, int W, int NTHREADS, class ChunkAt>
__device__ __forceinline__ void load_rows_async(uint32_t s_tile, const __nv_bfloat16* g, size_t ld,
                                                int valid, int tid, ChunkAt&& at) {
  constexpr int CHUNKS = W / 8;
  constexpr int TOTAL = ROWS * CHUNKS;
  static_assert(TOTAL % NTHREADS == 0, "tile chunks must split evenly over the threads");
#pragma unroll
  for (int k = 0; k < TOTAL / NTHREADS; ++k) {
    const int idx = tid + k * NTHREADS;
    const int row = idx / CHUNKS, c = idx % CHUNKS;
    const bool ok = row < valid;
    const __nv_bfloat16* src = g + (ok ? (size_t)row * ld + c * 8 : 0);
    cp_async_16(s_tile + at(row, c), src, ok);
  }
}
// ... into a swizzled tile (swz).
template <int ROWS, int W, int NTHREADS>
__device__ __forceinline__ void load_tile_async(uint32_t s_tile, const __nv_bfloat16* g, size_t ld,
                                                int valid, int tid) {
  load_rows_async<ROWS, W, NTHREADS>(s_tile, g, ld, valid, tid,
                                     [](int row, int c) { return swz<W>(row, c); });
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
// ... into a panel tile (pswz).
template <int ROWS, int W, int NTHREADS>
__device__ __forceinline__ void load_panels_async(uint32_t s_tile, const __nv_bfloat16* g,
                                                  size_t ld, int valid, int tid) {
  static_assert(W % 64 == 0, "whole 64-column panels");
  load_rows_async<ROWS, W, NTHREADS>(s_tile, g, ld, valid, tid,
                                     [](int row, int c) { return pswz<ROWS>(row, c); });
}

// ---- causal tile arithmetic (query t sees keys 0..t) ----
// Does the tile (queries q0.., keys k0.., Bc keys) need the mask (some key > some query)?
__device__ __forceinline__ bool tile_needs_mask(int q0, int k0, int Bc) { return k0 + Bc - 1 > q0; }

}  // namespace flash
