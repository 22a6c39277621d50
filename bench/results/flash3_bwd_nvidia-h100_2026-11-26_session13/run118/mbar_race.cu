// racecheck probe (session 13): does compute-sanitizer racecheck treat an mbarrier's
// arrive / try_wait as ordering shared-memory accesses? A producer warp and a consumer warp
// pass one shared-memory buffer back and forth through a full and an empty mbarrier (every lane
// arrives on both), the same hand-off as flash3's backward's LSE/D ring. Correct by the PTX
// memory model (arrive releases, try_wait acquires, CTA scope). mode 0: the mbarriers alone;
// mode 1: a __syncthreads after every step as well (the control: racecheck models bar.sync);
// mode 2: the consumer's lane 0 alone arrives on empty (count 1) after a __syncwarp, as flash3's
// math warps do (without the __syncwarp: they order through wgmma .sync.aligned and bar.sync);
// mode 3: lane 0 alone, no __syncwarp.
#include <cstdio>
#include <cstdint>
#include <cstdlib>
__device__ __forceinline__ uint32_t su32(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void init(uint32_t b, uint32_t c) { asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(b), "r"(c) : "memory"); }
__device__ __forceinline__ void arrive(uint32_t b) { asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(b) : "memory"); }
__device__ __forceinline__ void wait(uint32_t b, uint32_t par) {
  uint32_t done = 0;
  while (!done)
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}" : "=r"(done) : "r"(b), "r"(par) : "memory");
}
__global__ void k(int* out, int mode) {
  __shared__ int buf[32];
  __shared__ __align__(8) uint64_t bars[2];
  const uint32_t full = su32(&bars[0]), empty = su32(&bars[1]);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (threadIdx.x == 0) { init(full, 32); init(empty, mode >= 2 ? 1 : 32); asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
  __syncthreads();
  int acc = 0;
  for (int it = 0; it < 8; ++it) {
    if (warp == 0) {
      if (it > 0) wait(empty, (it - 1) & 1);
      buf[(lane + it) & 31] = it * 100 + lane;  // written after the consumer's reads of it - 1
      arrive(full);
    } else {
      wait(full, it & 1);
      acc += buf[lane];
      if (mode == 2) __syncwarp();
      if (mode < 2 || lane == 0) arrive(empty);
    }
    if (mode == 1) __syncthreads();
  }
  if (warp == 1) out[lane] = acc;
}
int main(int argc, char** argv) {
  int* d; cudaMalloc(&d, 32 * sizeof(int));
  const int m = argc > 1 ? atoi(argv[1]) : -1;  // one mode, or both
  for (int mode = 0; mode < 4; ++mode) {
    if (m >= 0 && mode != m) continue;
    k<<<1, 64>>>(d, mode);
    int h[32]; cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    int want = 0; for (int it = 0; it < 8; ++it) want += it * 100 + ((0 - it) & 31);
    printf("mode %d: out[0] %d (expected %d) %s\n", mode, h[0], want, cudaGetErrorString(cudaGetLastError()));
  }
  return 0;
}
