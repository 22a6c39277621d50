// hopper.cuh — small named helpers, one per Hopper (sm_90 / sm_90a) PTX idiom, used by the
// flash kernels (flash3.cu, flash_bwd_wgmma.cuh). Each has a unit test in tests/gpu/test_flash3.cu.
// The warpgroup MMA wrappers (wgmma_ss / wgmma_rs, gmma_desc, wgmma_fence / commit / wait) live
// in flash_common.cuh, beside the other attention PTX wrappers; this file adds what a warp-
// specialised kernel needs around them:
//
//   mbarrier   a 64-bit shared-memory barrier with a phase bit. init(count); arrive (count
//              down); arrive_expect_tx(bytes) (arrive and expect that many bytes from the copy
//              engine: the phase completes when both the arrivals and the bytes are in);
//              wait(parity) spins until the phase of that parity has completed. Ring protocol
//              (producer P, consumers C, stage s of a ring of S stages, n = use count):
//                P: wait(empty[s], ((n / S) & 1) ^ 1)   (a fresh barrier: passes at once)
//                   arrive_expect_tx(full[s], bytes); TMA -> stage s completing on full[s]
//                C: wait(full[s], (n / S) & 1); read stage s; arrive(empty[s])
//   TMA        tensor maps (cuTensorMapEncodeTiled, fetched from the driver through the runtime's
//              cudaGetDriverEntryPointByVersion so nothing links -lcuda) and
//              cp.async.bulk.tensor loads of a box into shared memory, completing on an
//              mbarrier. Rows outside the tensor are zero-filled (and still counted in the
//              transaction bytes: the whole box always lands).
//   setmaxnreg move registers between warpgroups (dec in the producer, inc in the consumers);
//              needs a register cap at kernel entry (__launch_bounds__(threads, 1)) and each role
//              in one branch of an if/else.
//   named barriers  bar.sync / bar.arrive with an id (1..15; 0 is __syncthreads) and a thread
//              count (a multiple of 32): a subset of warps meets without stopping the others.
//   proxy fences  fence.proxy.async: generic-proxy shared-memory writes (st.shared) before the
//              async proxy (wgmma, TMA) reads them, and async-proxy global writes (bulk
//              reductions) before a generic release that another block acquires.
//   release/acquire flags  st.release.gpu / red.release.gpu.or / ld.acquire.gpu on a global int:
//              the semaphores of the deterministic dQ order (flash_bwd_wgmma.cuh) and flash3's
//              dQ tickets (flash3_bwd.cu).
#pragma once
#include <cuda.h>  // CUtensorMap and the cuTensorMapEncodeTiled types only (no -lcuda)
#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/attention/flash_common.cuh"

namespace hopper {

using flash::smem_u32;

// ---- mbarrier ----
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Makes barrier initialisations visible to the async proxy (the copy engine) and the other
// threads; follow it with a __syncthreads() before any thread uses the barriers.
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
// One non-blocking probe: has the phase of this parity completed?
__device__ __forceinline__ bool mbar_try_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  while (!mbar_try_wait(bar, parity)) {
  }
}

// ---- TMA (cp.async.bulk.tensor), sm_90 ----
// Host: a tensor map over a bf16 tensor of rank 4, dims[0] innermost (elements), strides of
// dims 1..3 in bytes (multiples of 16), a box of box[0..3] elements, 128-byte swizzle (box[0]
// * 2 must be <= 128 bytes), zero fill outside the tensor. Throws flashgpt::Error on failure.
CUtensorMap make_tensor_map_bf16_4d(const void* base, const uint64_t dims[4],
                                    const uint64_t strides_bytes[3], const uint32_t box[4]);

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

// ---- register reallocation between warpgroups (sm_90a) ----
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}

// ---- named barriers ----
// All `count` threads (whole warps) that use barrier `id` meet here.
__device__ __forceinline__ void named_bar_sync(int id, int count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
// Signal barrier `id` without waiting (a producer side of a named barrier).
__device__ __forceinline__ void named_bar_arrive(int id, int count) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

// ---- proxy fences ----
// This thread's st.shared writes before the async proxy (wgmma / TMA) reads or overwrites them.
__device__ __forceinline__ void fence_proxy_async_smem() { flash::fence_proxy_async_smem(); }
// Async-proxy global writes (completed bulk reductions) ordered with generic accesses.
__device__ __forceinline__ void fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}

// ---- release / acquire flags in global memory (GPU scope) ----
__device__ __forceinline__ void st_release_gpu(int* p, int v) {
  asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ int ld_acquire_gpu(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
// *p |= v with release semantics (the writes before it are visible to whoever acquires v).
__device__ __forceinline__ void red_or_release_gpu(int* p, int v) {
  asm volatile("red.release.gpu.global.or.b32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
// Spin until *p has all bits of `bits` (acquire).
__device__ __forceinline__ void wait_flag_bits(const int* p, int bits) {
  while ((ld_acquire_gpu(p) & bits) != bits) {
  }
}
// Spin until *p == v (the flag's owner will get there; see flash_bwd_wgmma.cuh for why it must).
__device__ __forceinline__ void wait_flag_equals(const int* p, int v) {
  while (ld_acquire_gpu(p) != v) {
  }
}

}  // namespace hopper
