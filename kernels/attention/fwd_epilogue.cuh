// fwd_epilogue.cuh — the end of a forward work tile, written once for flash (flash_fwd.cu) and
// flash3 (flash3.cu): O_i / l_i and LSE_i from the accumulators (mma.sync C-fragment layout,
// flash_common.cuh: two rows per thread, a row over the 4 lanes of a quad), then either
//   bf16:  O_i -> bf16 -> the kernel's staging tile in shared memory -> 16-byte coalesced
//          stores of the valid rows; LSE_i written by one lane of the quad, or
//   ring:  (O_blk, LSE_blk) written over, or merged exactly into, the ring's fp32 running
//          (O, LSE) of context parallelism (attention.cuh AttnFwdProblem::o_run, merge).
// The kernels differ in their staging layout (flash: rows of HS bf16, swizzled; flash3: 64-column
// panels) and in which rows are valid: they pass those as callables. Each kernel writes its
// per-row loop of the ring epilogue itself (a row's l, 1 / l, LSE, merge weights, then the merged
// O), with the helpers below: through one shared loop body ptxas allocated differently (flash's
// HS 128 forward spilled), and these kernels' code is kept instruction for instruction.
#pragma once
#include "kernels/attention/flash_common.cuh"

namespace flash {

// The row's l (summed over the quad) -> 1 / l, 0 for a row that saw no key.
__device__ __forceinline__ float inv_row_sum(float l) { return l > 0.f ? 1.f / l : 0.f; }
// LSE = m scale + log l (natural log); -inf for a row that saw no key.
__device__ __forceinline__ float row_lse(float l, float m, float scale) {
  return l > 0.f ? m * scale + logf(l) : -INFINITY;
}

// bf16 epilogue of this thread's row r: l_part = its part of l_i, m = m_i. store_lse(lse) stores
// the row's LSE, lse() computing it, if this lane writes it (one lane of the quad, valid rows).
// The N fragments o(n, e) of O_i, times 1 / l, go to the staging tile: chunk(n) = the
// shared-memory address of the row's 16-byte chunk that holds columns 8 n .. 8 n + 7 (this lane
// writes its 4 bytes of it).
template <int N, class Frag, class StoreLse, class ChunkAddr>
__device__ __forceinline__ void epilogue_stage_row(Frag&& o, int r, float l_part, float m,
                                                   float scale, StoreLse&& store_lse,
                                                   ChunkAddr&& chunk, int t4) {
  const float l = quad_sum(l_part);
  const float inv = inv_row_sum(l);
  store_lse([&] { return row_lse(l, m, scale); });
#pragma unroll
  for (int n = 0; n < N; ++n) {
    const uint32_t v = pack_bf16(o(n, 2 * r) * inv, o(n, 2 * r + 1) * inv);
    st_shared_u32(chunk(n) + t4 * 4, v);
  }
}

// The staged rows -> global memory: NTHREADS threads (tid among them) copy ROWS rows from
// tile-local row row0 on, CHUNKS 16-byte chunks each; smem_at(row, chunk) = the chunk's
// shared-memory address, dst(row) = the row's first element in global memory; rows for which
// valid(row) is false are skipped.
template <int ROWS, int CHUNKS, int NTHREADS, class SmemAt, class Dst, class Valid>
__device__ __forceinline__ void epilogue_store_rows(int tid, int row0, SmemAt&& smem_at, Dst&& dst,
                                                    Valid&& valid) {
  static_assert(ROWS * CHUNKS % NTHREADS == 0, "whole passes of the threads");
#pragma unroll
  for (int k = 0; k < ROWS * CHUNKS / NTHREADS; ++k) {
    const int idx = tid + k * NTHREADS;
    const int row = row0 + idx / CHUNKS, ch = idx % CHUNKS;
    if (valid(row)) {
      const uint4 v = ld_shared_v4(smem_at(row, ch));
      st_global_v4(dst(row) + ch * 8, v);
    }
  }
}

// ---- the ring's exact merge of a row's block result (O_blk, LSE_blk) into its running fp32
// (O, LSE):  LSE' = log(e^LSE + e^LSE_blk),  O' = e^(LSE - LSE') O + e^(LSE_blk - LSE') O_blk.
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

}  // namespace flash
