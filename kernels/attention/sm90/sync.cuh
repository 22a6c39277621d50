// sm90/sync.cuh — how the threads, warps and the copy engine of an sm_90 block wait for each other,
// one small helper per PTX idiom. Test: ./build/test_gpu --gtest_filter='Hopper*'
// (tests/gpu/test_sm90.cu: one test per idiom).
//
//   mbarrier   a 64-bit shared-memory barrier with a phase bit. init(count); arrive (count
//              down); arrive_expect_tx(bytes) (arrive and expect that many bytes from the copy
//              engine: the phase completes when both the arrivals and the bytes are in);
//              wait(parity) spins until the phase of that parity has completed. The stage/phase
//              protocol of a ring of such barriers: sm90/pipeline.cuh.
//   named barriers  bar.sync / bar.arrive with an id (1..15; 0 is __syncthreads) and a thread
//              count (a multiple of 32): a subset of warps meets without stopping the others.
//   proxy fences  fence.proxy.async: generic-proxy shared-memory writes (st.shared) before the
//              async proxy (wgmma, TMA, bulk copies) reads them, and async-proxy global writes
//              (bulk reductions) before a generic release that another block acquires.
//   release/acquire flags  st.release.gpu / red.release.gpu.or / ld.acquire.gpu on a global int:
//              the semaphores of the deterministic dQ order (flash_bwd_wgmma.cuh) and flash3's
//              dQ tickets (flash3_bwd.cu).
//   setmaxnreg move registers between warpgroups (dec in the producer, inc in the consumers);
//              needs a register cap at kernel entry (__launch_bounds__(threads, 1)) and each role
//              in one branch of an if/else.
#pragma once
#include <stdint.h>

namespace sm90 {

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
// This thread's st.shared (and cp.async) writes before the async proxy (wgmma, TMA, bulk
// copies) reads or overwrites them.
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
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

// ---- register reallocation between warpgroups (sm_90a) ----
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}

}  // namespace sm90
