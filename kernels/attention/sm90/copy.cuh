// sm90/copy.cuh — the copy engine of sm_90 (TMA tensor loads, bulk copies and reductions) and
// stmatrix, one small helper per PTX idiom, and the one tensor map the flash3 kernels use.
// Test: ./build/test_gpu --gtest_filter='Hopper*'  (tests/gpu/test_sm90.cu: one test per idiom).
//
//   TMA        tensor maps (cuTensorMapEncodeTiled, fetched from the driver through the runtime's
//              cudaGetDriverEntryPointByVersion so that nothing links -lcuda) and
//              cp.async.bulk.tensor loads of a box into shared memory, completing on an
//              mbarrier (sm90/sync.cuh). Rows outside the tensor are zero-filled (and still
//              counted in the transaction bytes: the whole box always lands).
//   bulk       cp.async.bulk / cp.reduce.async.bulk: shared -> global copies and fp32 add
//              reductions done by the copy engine (in L2), in commit groups.
//   stmatrix   four 8x8 b16 matrices from mma fragments into shared memory.
#pragma once
#include <cuda.h>          // CUtensorMap and the cuTensorMapEncodeTiled types only (no -lcuda)
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/cuda_common.cuh"

namespace sm90 {

// ---- TMA tensor maps (host) ----
namespace detail {
inline PFN_cuTensorMapEncodeTiled_v12000 encode_tiled_fn() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  if (!fn) {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q;
    CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000,
                                                cudaEnableDefault, &q));
    CHECK(q == cudaDriverEntryPointSuccess && p,
          "the CUDA driver has no cuTensorMapEncodeTiled (flash3 needs a CUDA 12+ driver and an "
          "sm_90 GPU); use --attn flash");
    fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }
  return fn;
}
}  // namespace detail

// A (B, rows, heads, HS) view of bf16 rows `ld` elements apart and sequences `bs` apart (both
// multiples of 8, base 16-byte aligned), as a 4-D tensor map (dims HS, heads, rows, B) with a
// box of 64 columns x one head x `box_rows` rows and the 128-byte swizzle: a box never crosses
// into the next head or sequence, and rows outside 0 .. rows - 1 read as zeros. The flash3
// kernels load every tile through such maps (Q, K, V, dO: one box per 64-column panel). Throws
// flashgpt::Error on failure.
inline CUtensorMap make_rows_map(const __nv_bfloat16* base, int B, int rows, int heads, int HS,
                                 size_t ld, size_t bs, int box_rows) {
  const cuuint64_t gdim[4] = {(cuuint64_t)HS, (cuuint64_t)heads, (cuuint64_t)rows, (cuuint64_t)B};
  const cuuint64_t gstride[3] = {(cuuint64_t)HS * 2, (cuuint64_t)ld * 2, (cuuint64_t)bs * 2};
  const cuuint32_t gbox[4] = {64, 1, (cuuint32_t)box_rows, 1};  // 64 bf16 = the 128-byte swizzle
  const cuuint32_t estride[4] = {1, 1, 1, 1};
  CUtensorMap map;
  const CUresult r = detail::encode_tiled_fn()(
      &map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, const_cast<__nv_bfloat16*>(base), gdim, gstride,
      gbox, estride, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  CHECK(r == CUDA_SUCCESS,
        "cuTensorMapEncodeTiled failed (error %d) for B %d x rows %d x heads %d x HS %d, row "
        "stride %zu, sequence stride %zu, box rows %d (buffers must be 16-byte aligned)",
        (int)r, B, rows, heads, HS, ld, bs, box_rows);
  return map;
}

// ---- TMA loads (device) ----
__device__ __forceinline__ void tma_prefetch_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}
// Box at coordinates (c0, c1, c2, c3) -> shared memory at dst (1024-byte aligned for the
// 128-byte swizzle), completing on mbarrier bar (which must expect the box's bytes).
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                            int c0, int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, "
      "%4, %5, %6}], [%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}

// The same with an L2 cache policy from l2_policy_evict_first (or another createpolicy).
__device__ __forceinline__ void tma_load_4d_l2(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                               int c0, int c1, int c2, int c3, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%3, %4, %5, %6}], [%2], %7;\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3),
      "l"(policy)
      : "memory");
}
// An L2 policy whose lines are the first evicted (the others' stay longer).
__device__ __forceinline__ uint64_t l2_policy_evict_first() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(p));
  return p;
}

// ROWS rows from row0 of one head of a rows map (make_rows_map with boxes of BOX rows) -> dst
// as PANELS 64-column panels of ROWS x 128 bytes, completing on bar.
template <int ROWS, int PANELS, int BOX>
__device__ __forceinline__ void tma_load_rows(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                              int head, int row0, int b) {
#pragma unroll
  for (int p = 0; p < PANELS; ++p)
#pragma unroll
    for (int r = 0; r < ROWS; r += BOX)
      tma_load_4d(dst + p * (ROWS * 128) + r * 128, map, bar, p * 64, head, row0 + r, b);
}

// ---- bulk copies and reductions shared -> global ----
// gdst[0 .. bytes/4) += ssrc[...] (fp32 adds done in L2); bytes a multiple of 16, both 16-B
// aligned. The smem source must have passed fence_proxy_async_smem() (sm90/sync.cuh).
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

// ---- stmatrix: the store counterpart of ldmatrix ----
// Four 8x8 b16 matrices from their mma fragments (r_i: this lane's pair of matrix i); lane l
// gives the row address of matrix l / 8, row l % 8.
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2,
                                            uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr),
               "r"(r0), "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}

}  // namespace sm90
