// flash_bwd_shared.cuh — what the backward does around its products (flash_bwd_wgmma.cuh): load
// the block's K/V tile and each step's Q/dO tiles and LSE/D rows, hand a step's dQ tile to the
// copy engine (the epilogue of a step), and write the block's dK_j, dV_j (the epilogue of the
// block). The schedule: flash_bwd.cu.
#pragma once
#include "kernels/attention/flash.cuh"
#include "kernels/attention/flash_common.cuh"
#include "kernels/attention/problem_mask.cuh"
#include "kernels/attention/sm90/copy.cuh"
#include "kernels/attention/sm90/sync.cuh"

namespace flash {

// ROWS x HS bf16 rows from global memory into shared memory (cp.async; rows past `valid`
// zero-filled) as 64-column panels with the 128-byte swizzle that the wgmma descriptors read.
template <int ROWS, int HS, int NTHREADS>
__device__ __forceinline__ void bwd_load_rows(uint32_t s_tile, const __nv_bfloat16* g, size_t ld,
                                              int valid, int tid) {
  load_panels_async<ROWS, HS, NTHREADS>(s_tile, g, ld, valid, tid);
}

// The block's K_j, V_j (Bc keys from k0 of kv head kvh; p: flash.cuh BwdCore) into sK, sV.
// Keys >= Tk are zero-filled: their S = 0 gives dS K = 0 in dQ, and their dK, dV are not stored.
template <int Bc, int HS, int NTHREADS>
__device__ __forceinline__ void bwd_load_kv(uint32_t sK, uint32_t sV, const BwdCore& p, int b,
                                            int k0, int kvh, int tid) {
  const size_t off = (size_t)b * p.kv_bs + (size_t)k0 * p.kv_ld + (size_t)kvh * HS;
  bwd_load_rows<Bc, HS, NTHREADS>(sK, p.k + off, p.kv_ld, p.Tk - k0, tid);
  bwd_load_rows<Bc, HS, NTHREADS>(sV, p.v + off, p.kv_ld, p.Tk - k0, tid);
}

// One step's inputs (query head hq, Q tile from q0) into one buffer of each: Q_i, dO_i, and
// LSE_i, D_i. Rows >= Tq read as LSE = D = 0: with their Q and dO zero-filled, P = 1 there but
// dP = 0 and dS = 0, and dO = 0 makes their dV term 0; their dQ rows are not stored.
// MASKED: also the rows' doc_start into sDoc (0 past Tq and without documents; mk: the problem's
// mask, problem_mask.cuh).
template <int Br, int HS, int NTHREADS, bool MASKED = false>
__device__ __forceinline__ void bwd_load_step(uint32_t sQ, uint32_t sdO, uint32_t sL, uint32_t sD,
                                              const BwdCore& p, int b, int hq, int q0,
                                              int tid, uint32_t sDoc = 0,
                                              const KernelMask<MASKED>& mk = {}) {
  bwd_load_rows<Br, HS, NTHREADS>(
      sQ, p.q + (size_t)b * p.q_bs + (size_t)q0 * p.q_ld + (size_t)hq * HS, p.q_ld, p.Tq - q0,
      tid);
  bwd_load_rows<Br, HS, NTHREADS>(
      sdO, p.dout + (size_t)b * p.do_bs + (size_t)q0 * p.do_ld + (size_t)hq * HS, p.do_ld,
      p.Tq - q0, tid);
  if (tid < Br) {
    const size_t r = ((size_t)b * p.NH + hq) * p.lse_T + q0 + tid;
    const bool ok = q0 + tid < p.Tq;
    cp_async_4(sL + tid * 4, p.lse + (ok ? r : 0), ok);
    cp_async_4(sD + tid * 4, p.D + (ok ? r : 0), ok);
    if constexpr (MASKED) {
      const int* ds = mk.mask.doc_start;
      const bool has = ok && ds != nullptr;
      cp_async_4(sDoc + tid * 4,
                 has ? ds + (size_t)b * mk.mask_T + mk.q_pos0 + q0 + tid : (const int*)p.lse, has);
    }
  }
}

// After every thread has staged its part of the step's fp32 dQ_i tile (Br x HS) at sdQ in
// dQacc's layout (8-float segment s of dQacc row r at s ^ (r % 8)): one bulk reduce-add of the
// tile's valid rows into dQacc, done by the copy engine in L2 (thread 0 issues it; the next
// step's sm90::bulk_wait_read_all() frees the staging tile). before_add() runs on thread 0 just before
// the add (the deterministic order's semaphore wait).
template <int HS, int Br, class BeforeAdd>
__device__ __forceinline__ void bwd_add_dq_tile(const BwdCore& p, uint32_t sdQ, int b, int hq,
                                                int q0, int tid, BeforeAdd before_add) {
  sm90::fence_proxy_async_smem();  // each thread's staging stores, before the copy engine reads
  __syncthreads();
  if (tid == 0) {
    before_add();
    sm90::bulk_reduce_add_f32(p.dq_accum + (((size_t)b * p.NH + hq) * p.dq_T + p.dq_row0 + q0) * HS,
                        sdQ, (uint32_t)(min(Br, p.Tq - q0) * HS * 4));
    sm90::bulk_commit();
  }
}

// The end of the block: dK_j (times scale) and dV_j -> bf16 into dqkv. Warp w holds keys
// k0 + 16 w .. +15 as m16n8 accumulator fragments: dk(nt, e), dv(nt, e) for n-tile nt (head dims
// 8 nt ..) and element e (row g + 8 (e / 2), dims 8 nt + 2 t4 + e % 2). They are staged in the
// warp's own rows of the K_j, V_j tiles in shared memory (swizzled rows of HS bf16; K_j and V_j
// are no longer read once every warp has passed the barrier below), then stored with 16-byte
// writes; rows past T are not written.
// With p.dk_acc (the ring's fp32 accumulator) the fragments are added to it straight from the
// registers instead (each block owns its key rows: no other block touches them).
// tid: the thread among the block's 8 key warps (256 threads); all_done_with_kv(): the barrier
// after which no warp reads K_j, V_j any more (they are overwritten).
template <int HS, class FragK, class FragV, class Barrier>
__device__ __forceinline__ void bwd_store_dk_dv(FragK dk, FragV dv, float scale, uint32_t sK,
                                                uint32_t sV, const BwdCore& p, int b, int k0,
                                                int kvh, int tid, Barrier all_done_with_kv) {
  const int warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
  const size_t ld = p.dkv_ld;
  all_done_with_kv();
  if (p.dk_acc != nullptr) {
#pragma unroll
    for (int nt = 0; nt < HS / 8; ++nt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int key = k0 + warp * 16 + g + r * 8;
        if (key >= p.Tk) continue;
        const size_t o = (size_t)b * p.dkv_bs + (size_t)key * ld + (size_t)kvh * HS + nt * 8 + 2 * t4;
        float2* pk = reinterpret_cast<float2*>(p.dk_acc + o);
        float2* pv = reinterpret_cast<float2*>(p.dv_acc + o);
        float2 a = *pk, c = *pv;
        a.x += dk(nt, 2 * r) * scale;
        a.y += dk(nt, 2 * r + 1) * scale;
        c.x += dv(nt, 2 * r);
        c.y += dv(nt, 2 * r + 1);
        *pk = a;
        *pv = c;
      }
    return;
  }
#pragma unroll
  for (int nt = 0; nt < HS / 8; ++nt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = warp * 16 + g + r * 8;
      const uint32_t o = row * (HS * 2) + ((nt ^ (row & 7)) << 4) + t4 * 4;
      const uint32_t vk = pack_bf16(dk(nt, 2 * r) * scale, dk(nt, 2 * r + 1) * scale);
      const uint32_t vv = pack_bf16(dv(nt, 2 * r), dv(nt, 2 * r + 1));
      asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(sK + o), "r"(vk) : "memory");
      asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(sV + o), "r"(vv) : "memory");
    }
  __syncwarp();
  constexpr int CHUNKS = HS / 8;
  const size_t off = (size_t)b * p.dkv_bs + (size_t)k0 * ld + (size_t)kvh * HS;
  __nv_bfloat16* gdK = p.dk + off;
  __nv_bfloat16* gdV = p.dv + off;
#pragma unroll
  for (int k = 0; k < 16 * CHUNKS / 32; ++k) {
    const int idx = lane + k * 32;
    const int row = warp * 16 + idx / CHUNKS, c = idx % CHUNKS;
    if (k0 + row < p.Tk) {
      uint4 vk, vv;
      asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                   : "=r"(vk.x), "=r"(vk.y), "=r"(vk.z), "=r"(vk.w)
                   : "r"(sK + swz<HS>(row, c))
                   : "memory");
      asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                   : "=r"(vv.x), "=r"(vv.y), "=r"(vv.z), "=r"(vv.w)
                   : "r"(sV + swz<HS>(row, c))
                   : "memory");
      st_global_v4(gdK + (size_t)row * ld + c * 8, vk);
      st_global_v4(gdV + (size_t)row * ld + c * 8, vv);
    }
  }
}

}  // namespace flash
