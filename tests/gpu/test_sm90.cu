// test_sm90 — one test per sm_90 PTX helper of kernels/attention/sm90/ (the idioms the flash3
// kernels are built from), each against values the host computes exactly.
//
//   Hopper.TmaLoadTile          make_rows_map + tma_load_4d (+ prefetch, mbarrier tx bytes): a box
//                               (128-byte swizzle) of a packed qkv-like buffer equals the source,
//                               rows past T read as 0 (never the next batch)
//   Hopper.PipelineRing         PipelineState + StageBarriers: 1, 2 and 4-stage producer/consumer
//                               rings, 1000 items, order and values
//   Hopper.NamedBarriers        bar.arrive / bar.sync hand-offs between two warps, both ways
//   Hopper.Setmaxnreg           3 warpgroups, dec 24 / inc 240: every role runs and writes
//   Hopper.ReleaseAcquireChain  2048 blocks pass a release/acquire flag in block order
//   Hopper.ReleaseOrBits        31 blocks publish data with red.release.or, one waits for all bits
//   Hopper.WgmmaSS / WgmmaRS    wgmma m64n64 and m64n128 (A and B from shared memory; A from
//                               registers), descriptors stepped by gmma_desc_at, exact products
//   Hopper.GmmaDescAt           gmma_desc_at(gmma_desc(a), bytes) == gmma_desc(a + bytes)
//   Hopper.BulkStoreReduce      bulk store then a second block's bulk reduce-add after a release
//                               (proxy fences, the dQ tickets' protocol), staging reuse after
//                               bulk_wait_read_all
//   Hopper.Stmatrix             stmatrix.x4 puts each lane's fragments where ldmatrix reads them
//
// Run (GPU machine): ./build/test_gpu --gtest_filter='Hopper*'
#include <cstring>
#include <random>
#include <vector>

#include "kernels/attention/flash_common.cuh"  // smem_u32, pswz, pack_bf16
#include "kernels/attention/sm90/copy.cuh"
#include "kernels/attention/sm90/pipeline.cuh"
#include "kernels/attention/sm90/sync.cuh"
#include "kernels/attention/sm90/wgmma.cuh"
#include "tests/gpu/sm90_test.h"

namespace {

using flash::smem_u32;

class Hopper : public Sm90Test {};

// ---- TMA ----
constexpr int kTmaRows = 128, kTmaHS = 128;
__global__ void tma_tile_kernel(const __grid_constant__ CUtensorMap map, uint8_t* dump, int head,
                                int t0, int b) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t s0 = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const uint32_t tile = s0, bar = s0 + kTmaRows * kTmaHS * 2;
  if (threadIdx.x == 0) {
    sm90::tma_prefetch_map(&map);
    sm90::mbar_init(bar, 1);
    sm90::mbar_init_fence();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    sm90::mbar_arrive_expect_tx(bar, kTmaRows * kTmaHS * 2);
    for (int p = 0; p < kTmaHS / 64; ++p)
      sm90::tma_load_4d(tile + p * kTmaRows * 128, &map, bar, p * 64, head, t0, b);
  }
  sm90::mbar_wait(bar, 0);
  const uint8_t* src = smem_raw + (tile - smem_u32(smem_raw));
  for (int k = threadIdx.x; k < kTmaRows * kTmaHS * 2; k += blockDim.x) dump[k] = src[k];
}

TEST_F(Hopper, TmaLoadTile) {
  const int B = 2, T = 100, H3 = 5;
  const size_t n = size_t(B) * T * H3 * kTmaHS;
  std::vector<__nv_bfloat16> h(n);
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (auto& x : h) {
    float v = u(rng);
    if (v == 0.f) v = 0.5f;  // nonzero everywhere: a zero in the tile means zero-fill
    x = __float2bfloat16(v);
  }
  DeviceBuffer<__nv_bfloat16> d(n);
  DeviceBuffer<uint8_t> dump(kTmaRows * kTmaHS * 2);
  d.upload(h);
  const CUtensorMap map = sm90::make_rows_map(d.ptr, B, T, H3, kTmaHS, size_t(H3) * kTmaHS,
                                              size_t(T) * H3 * kTmaHS, kTmaRows);
  const int smem = kTmaRows * kTmaHS * 2 + 8 + 1024;
  CUDA_CHECK(cudaFuncSetAttribute(tma_tile_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  struct Box {
    int head, t0, b;
  };
  for (const Box& bx : {Box{3, 40, 0}, Box{1, 0, 1}}) {  // b 0: rows 100.. must not be batch 1's
    dump.poison();
    tma_tile_kernel<<<1, 128, smem>>>(map, dump.ptr, bx.head, bx.t0, bx.b);
    CUDA_CHECK_LAUNCH();
    const std::vector<uint8_t> got = dump.download();
    size_t bad = 0, zeros = 0;
    for (int r = 0; r < kTmaRows; ++r)
      for (int col = 0; col < kTmaHS; ++col) {
        // 128-byte swizzle: panel col / 64, 16-byte chunk (col % 64) / 8 stored at chunk ^ (r % 8)
        const int panel = col / 64, chunk = (col % 64) / 8;
        const size_t byte = size_t(panel) * kTmaRows * 128 + r * 128 + ((chunk ^ (r & 7)) << 4) +
                            (col % 8) * 2;
        uint16_t g, want = 0;
        std::memcpy(&g, got.data() + byte, 2);
        const int t = bx.t0 + r;
        if (t < T) {
          const __nv_bfloat16 w = h[((size_t(bx.b) * T + t) * H3 + bx.head) * kTmaHS + col];
          std::memcpy(&want, &w, 2);
        } else {
          ++zeros;
        }
        bad += g != want;
      }
    EXPECT_EQ(bad, 0u) << "box head " << bx.head << " t0 " << bx.t0 << " b " << bx.b << ": "
                       << zeros << " elements past T expected zero";
  }
}

// ---- the stage/phase protocol: a ring of STAGES slots, one producer lane, 2 consumer warps ----
constexpr int kRingItems = 1000;
template <int STAGES>
__global__ void pipeline_ring_kernel(int* bad, long long* sum) {
  __shared__ __align__(8) uint64_t bars[2 * STAGES];
  __shared__ int slot[STAGES];
  const sm90::StageBarriers<STAGES> ring{smem_u32(bars), smem_u32(bars) + 8 * STAGES};
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) ring.init_stage(s, 1, 2);  // 2 consumer warps release
    sm90::mbar_init_fence();
  }
  __syncthreads();
  if (warp == 0) {
    if (lane == 0) {
      sm90::PipelineState<STAGES> ps;
      for (int n = 0; n < kRingItems; ++n, ps.advance()) {
        ring.producer_acquire(ps);
        slot[ps.index()] = n * 7 + 1;
        ring.producer_commit(ps);
      }
    }
  } else {
    int wrong = 0;
    long long acc = 0;
    sm90::PipelineState<STAGES> ps;
    for (int n = 0; n < kRingItems; ++n, ps.advance()) {
      wrong += ps.index() != uint32_t(n % STAGES) || ps.phase() != uint32_t((n / STAGES) & 1);
      ring.consumer_wait(ps);
      const int v = slot[ps.index()];
      wrong += v != n * 7 + 1;
      acc += v;
      __syncwarp();
      if (lane == 0) ring.consumer_release(ps);
    }
    atomicAdd(bad, wrong);
    if (lane == 0 && warp == 1) *sum = acc;
  }
}

template <int STAGES>
void run_pipeline_ring() {
  DeviceBuffer<int> bad(1);
  DeviceBuffer<long long> sum(1);
  CUDA_CHECK(cudaMemset(bad.ptr, 0, sizeof(int)));
  sum.poison();
  pipeline_ring_kernel<STAGES><<<1, 96>>>(bad.ptr, sum.ptr);
  CUDA_CHECK_LAUNCH();
  EXPECT_EQ(bad.download()[0], 0) << STAGES << " stages: items read out of order, before they "
                                     "were written, or a wrong stage/phase";
  EXPECT_EQ(sum.download()[0], 7LL * kRingItems * (kRingItems - 1) / 2 + kRingItems);
}

TEST_F(Hopper, PipelineRing) {
  run_pipeline_ring<1>();
  run_pipeline_ring<2>();
  run_pipeline_ring<4>();
}

// ---- named barriers: warp 0 writes, bar.arrive(1); warp 1 bar.sync(1), reads, bar.arrive(2);
// warp 0 bar.sync(2) before the next round. __syncthreads (barrier 0) is never used. ----
constexpr int kNamedRounds = 200;
__global__ void named_bar_kernel(int* bad) {
  __shared__ int buf[32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  int wrong = 0;
  for (int r = 0; r < kNamedRounds; ++r) {
    if (warp == 0) {
      buf[lane] = r * 32 + lane;
      sm90::named_bar_arrive(1, 64);
      sm90::named_bar_sync(2, 64);
    } else {
      sm90::named_bar_sync(1, 64);
      wrong += buf[31 - lane] != r * 32 + 31 - lane;
      sm90::named_bar_arrive(2, 64);
    }
  }
  if (warp == 1) atomicAdd(bad, wrong);
}

TEST_F(Hopper, NamedBarriers) {
  DeviceBuffer<int> bad(1);
  CUDA_CHECK(cudaMemset(bad.ptr, 0, sizeof(int)));
  named_bar_kernel<<<1, 64>>>(bad.ptr);
  CUDA_CHECK_LAUNCH();
  EXPECT_EQ(bad.download()[0], 0);
}

// ---- setmaxnreg: warpgroup 0 gives registers away, 1 and 2 take them; each thread writes ----
__global__ void __launch_bounds__(384, 1) setmaxnreg_kernel(float* out, int n_iter) {
  const int wg = threadIdx.x / 128;
  if (wg == 0) {
    sm90::setmaxnreg_dec<24>();
    out[threadIdx.x] = 1.f + threadIdx.x;
  } else {
    sm90::setmaxnreg_inc<240>();
    float acc[64];  // enough live values to want the registers
#pragma unroll
    for (int k = 0; k < 64; ++k) acc[k] = float(k + threadIdx.x);
    for (int it = 0; it < n_iter; ++it)
#pragma unroll
      for (int k = 0; k < 64; ++k) acc[k] = acc[k] * 0.5f + acc[(k + 1) % 64] * 0.5f;
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < 64; ++k) s += acc[k];
    out[threadIdx.x] = s;
  }
}

TEST_F(Hopper, Setmaxnreg) {
  DeviceBuffer<float> out(384);
  out.poison();
  setmaxnreg_kernel<<<2, 384>>>(out.ptr, 0);  // 0 iterations: the sum is exact and known
  CUDA_CHECK_LAUNCH();
  const std::vector<float> h = out.download();
  for (int t = 0; t < 384; ++t) {
    const float want = t < 128 ? 1.f + t : float(64 * t + 64 * 63 / 2);
    EXPECT_EQ(h[t], want) << "thread " << t;
  }
}

// ---- release/acquire flag chain in block order (the deterministic dQ's assumption) ----
__global__ void flag_chain_kernel(int* flag, int* log) {
  if (threadIdx.x != 0) return;
  const int j = blockIdx.x;
  sm90::wait_flag_equals(flag, j);
  log[j] = j > 0 ? log[j - 1] + 1 : 0;  // reads the previous block's write
  __threadfence();
  sm90::st_release_gpu(flag, j + 1);
}

TEST_F(Hopper, ReleaseAcquireChain) {
  const int n = 2048;
  DeviceBuffer<int> flag(1), log(n);
  CUDA_CHECK(cudaMemset(flag.ptr, 0, sizeof(int)));
  log.poison();
  flag_chain_kernel<<<n, 64>>>(flag.ptr, log.ptr);
  CUDA_CHECK_LAUNCH();
  const std::vector<int> h = log.download();
  int bad = 0;
  for (int j = 0; j < n; ++j) bad += h[j] != j;
  EXPECT_EQ(bad, 0);
}

// ---- red.release.or / wait_flag_bits: blocks 1..31 publish a value each and set their bit;
// block 0 waits for all the bits and must then see every value (32 blocks run at once) ----
__global__ void or_bits_kernel(int* flag, volatile int* data, int* seen) {
  if (threadIdx.x != 0) return;
  const int k = blockIdx.x;
  if (k > 0) {
    data[k] = 1000 + k;
    sm90::red_or_release_gpu(flag, 1 << k);
  } else {
    sm90::wait_flag_bits(flag, int(0xfffffffeu));
    int ok = 0;
    for (int i = 1; i < 32; ++i) ok += data[i] == 1000 + i;
    *seen = ok;
  }
}

TEST_F(Hopper, ReleaseOrBits) {
  DeviceBuffer<int> flag(1), data(32), seen(1);
  CUDA_CHECK(cudaMemset(flag.ptr, 0, sizeof(int)));
  data.poison();
  seen.poison();
  or_bits_kernel<<<32, 32>>>(flag.ptr, data.ptr, seen.ptr);
  CUDA_CHECK_LAUNCH();
  EXPECT_EQ(seen.download()[0], 31);
  EXPECT_EQ(flag.download()[0], int(0xfffffffeu));
}

// ---- wgmma: one warpgroup, D (64 x N) = A (64 x 64) B over k = 64 in 4 k-steps ----
// Operands in shared memory as 64-column panels with the 128-byte swizzle (flash::pswz), the
// layout the flash3 kernels load. Values are multiples of 1/8 in [-1, 1]: every product and sum
// is exact in fp32, so the result must equal the host's exactly.
constexpr int kWgK = 64;
// A: 64 rows of K (K-major). B: N rows of K (K-major, TB = 0: D = A B^T) or K rows of N
// (MN-major, TB = 1: D = A B), N / 64 panels of 64 columns.
template <int N, int TB, bool A_REGS>
__global__ void wgmma_kernel(const __nv_bfloat16* A, const __nv_bfloat16* B, float* D) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t s0 = (smem_u32(smem_raw) + 1023u) & ~1023u;
  unsigned char* base = smem_raw + (s0 - smem_u32(smem_raw));
  constexpr int B_ROWS = TB == 0 ? N : kWgK, B_COLS = TB == 0 ? kWgK : N;
  constexpr int B_PANEL = B_ROWS * 128;
  const uint32_t sA = s0, sB = s0 + 64 * 128;
  const int tid = threadIdx.x;
  for (int i = tid; i < 64 * kWgK; i += 128) {
    const int r = i / kWgK, c = i % kWgK;
    *reinterpret_cast<__nv_bfloat16*>(base + flash::pswz<64>(r, c / 8) + (c % 8) * 2) = A[i];
  }
  for (int i = tid; i < B_ROWS * B_COLS; i += 128) {
    const int r = i / B_COLS, c = i % B_COLS;
    *reinterpret_cast<__nv_bfloat16*>(base + 64 * 128 + flash::pswz<B_ROWS>(r, c / 8) +
                                      (c % 8) * 2) = B[i];
  }
  sm90::fence_proxy_async_smem();  // the stores above, before wgmma reads them
  __syncthreads();
  const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  float d[N / 2];
  uint32_t a[kWgK / 16][4];
  if constexpr (A_REGS) {  // the mma.sync A fragments of the warp's 16 rows
    const int r0 = 16 * warp + g;
    auto at = [&](int r, int c) { return A[r * kWgK + c]; };
#pragma unroll
    for (int kq = 0; kq < kWgK / 16; ++kq) {
      const int c = 16 * kq + 2 * t;
      a[kq][0] = flash::pack_bf16(__bfloat162float(at(r0, c)), __bfloat162float(at(r0, c + 1)));
      a[kq][1] = flash::pack_bf16(__bfloat162float(at(r0 + 8, c)), __bfloat162float(at(r0 + 8, c + 1)));
      a[kq][2] = flash::pack_bf16(__bfloat162float(at(r0, c + 8)), __bfloat162float(at(r0, c + 9)));
      a[kq][3] = flash::pack_bf16(__bfloat162float(at(r0 + 8, c + 8)), __bfloat162float(at(r0 + 8, c + 9)));
    }
  }
  sm90::zero_acc(d);
  sm90::reg_fence(d);
  if constexpr (A_REGS) sm90::reg_fence(a);
  sm90::wgmma_fence();
  const uint64_t dA = sm90::gmma_desc(sA, 16, 1024);
  const uint64_t dB = sm90::gmma_desc(sB, TB == 0 ? 16 : B_PANEL, 1024);
#pragma unroll
  for (int kq = 0; kq < kWgK / 16; ++kq) {
    // K-major operands step 32 bytes (16 bf16 of a row); MN-major ones 16 rows (2048 bytes)
    const uint64_t db = sm90::gmma_desc_at(dB, TB == 0 ? kq * 32 : kq * 2048);
    if constexpr (A_REGS)
      sm90::wgmma_rs<TB>(d, a[kq], db);
    else
      sm90::wgmma_ss<0, TB>(d, sm90::gmma_desc_at(dA, kq * 32), db);
  }
  sm90::wgmma_commit();
  sm90::wgmma_wait<0>();
  sm90::reg_fence(d);
#pragma unroll
  for (int n = 0; n < N / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      D[(16 * warp + g + 8 * (e >> 1)) * N + 8 * n + 2 * t + (e & 1)] = d[4 * n + e];
}

template <int N, int TB, bool A_REGS>
void run_wgmma() {
  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<int> u(-8, 8);
  std::vector<__nv_bfloat16> a(64 * kWgK), b(N * kWgK);
  std::vector<float> fa(a.size()), fb(b.size());
  for (size_t i = 0; i < a.size(); ++i) a[i] = __float2bfloat16(fa[i] = u(rng) / 8.f);
  for (size_t i = 0; i < b.size(); ++i) b[i] = __float2bfloat16(fb[i] = u(rng) / 8.f);
  DeviceBuffer<__nv_bfloat16> dA(a.size()), dB(b.size());
  DeviceBuffer<float> dD(64 * N);
  dA.upload(a);
  dB.upload(b);
  dD.poison();
  const int smem = 64 * 128 + N * kWgK * 2 + 1024;
  CUDA_CHECK(cudaFuncSetAttribute(wgmma_kernel<N, TB, A_REGS>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  wgmma_kernel<N, TB, A_REGS><<<1, 128, smem>>>(dA.ptr, dB.ptr, dD.ptr);
  CUDA_CHECK_LAUNCH();
  const std::vector<float> got = dD.download();
  int bad = 0;
  for (int m = 0; m < 64; ++m)
    for (int n = 0; n < N; ++n) {
      float want = 0.f;
      for (int k = 0; k < kWgK; ++k)
        want += fa[m * kWgK + k] * (TB == 0 ? fb[n * kWgK + k] : fb[k * N + n]);
      bad += got[m * N + n] != want;
    }
  EXPECT_EQ(bad, 0) << "m64n" << N << (A_REGS ? " RS" : " SS") << ", B "
                    << (TB == 0 ? "K-major" : "MN-major") << ": wrong elements of 64 x " << N;
}

TEST_F(Hopper, WgmmaSS) {
  run_wgmma<64, 0, false>();   // S = Q K^T's shape (flash3 forward: N = 128)
  run_wgmma<128, 0, false>();
  run_wgmma<64, 1, false>();   // both operands from smem, B MN-major (the backward's dQ)
  run_wgmma<128, 1, false>();
}

TEST_F(Hopper, WgmmaRS) {
  run_wgmma<64, 1, true>();    // O += P V's shape (P from registers, V MN-major)
  run_wgmma<128, 1, true>();
}

__global__ void gmma_desc_kernel(uint64_t* bad) {
  uint64_t n = 0;
  for (uint32_t addr = 0; addr < 227 * 1024; addr += 1024)
    for (uint32_t bytes = 0; addr + bytes < 227 * 1024 && bytes < 64 * 1024; bytes += 32)
      n += sm90::gmma_desc_at(sm90::gmma_desc(addr, 8192, 1024), bytes) !=
           sm90::gmma_desc(addr + bytes, 8192, 1024);
  *bad = n;
}

TEST_F(Hopper, GmmaDescAt) {
  DeviceBuffer<uint64_t> bad(1);
  bad.poison();
  gmma_desc_kernel<<<1, 1>>>(bad.ptr);
  CUDA_CHECK_LAUNCH();
  EXPECT_EQ(bad.download()[0], 0u);
}

// ---- bulk copies: block 0 stores its staging tile (bulk_store_f32), releases a flag; block 1
// acquires it and adds its own (bulk_reduce_add_f32), then overwrites its staging tile as soon
// as bulk_wait_read_all says the copy engine has read it: the sum must not see the overwrite ----
constexpr int kBulkFloats = 1024;
__global__ void bulk_kernel(float* dst, int* flag) {
  __shared__ __align__(128) float stage[kBulkFloats];
  const int k = blockIdx.x;
  for (int i = threadIdx.x; i < kBulkFloats; i += blockDim.x) stage[i] = float(i * (k + 1));
  sm90::fence_proxy_async_smem();
  __syncthreads();
  if (threadIdx.x != 0) return;
  if (k == 0) {
    sm90::bulk_store_f32(dst, smem_u32(stage), kBulkFloats * 4);
    sm90::bulk_commit();
    sm90::bulk_wait_all();
    sm90::fence_proxy_async_global();
    sm90::red_or_release_gpu(flag, 1);
  } else {
    sm90::wait_flag_bits(flag, 1);
    sm90::fence_proxy_async_global();
    sm90::bulk_reduce_add_f32(dst, smem_u32(stage), kBulkFloats * 4);
    sm90::bulk_commit();
    sm90::bulk_wait_read_all();
    for (int i = 0; i < kBulkFloats; ++i) stage[i] = -1e6f;  // the staging tile is free again
    sm90::bulk_wait_all();
  }
}

TEST_F(Hopper, BulkStoreReduce) {
  DeviceBuffer<float> dst(kBulkFloats);
  DeviceBuffer<int> flag(1);
  dst.poison();  // NaN: an element the store missed stays NaN after the add
  CUDA_CHECK(cudaMemset(flag.ptr, 0, sizeof(int)));
  bulk_kernel<<<2, 128>>>(dst.ptr, flag.ptr);
  CUDA_CHECK_LAUNCH();
  const std::vector<float> got = dst.download();
  int bad = 0;
  for (int i = 0; i < kBulkFloats; ++i) bad += got[i] != float(3 * i);  // i + 2 i
  EXPECT_EQ(bad, 0);
}

// ---- stmatrix.x4: lane l holds, of 8x8 matrix m, the pair (row l / 4, columns 2 (l % 4), +1);
// matrix m's rows are 16 bytes apart at m * 128 ----
__global__ void stmatrix_kernel(uint16_t* out) {
  __shared__ __align__(128) uint16_t tile[4 * 64];
  const int lane = threadIdx.x;
  uint32_t r[4];
  for (int m = 0; m < 4; ++m) {
    const int v = m * 64 + (lane / 4) * 8 + 2 * (lane % 4);
    r[m] = uint32_t(v) | (uint32_t(v + 1) << 16);
  }
  sm90::stmatrix_x4(smem_u32(tile) + (lane / 8) * 128 + (lane % 8) * 16, r[0], r[1], r[2], r[3]);
  __syncwarp();
  for (int i = lane; i < 4 * 64; i += 32) out[i] = tile[i];
}

TEST_F(Hopper, Stmatrix) {
  DeviceBuffer<uint16_t> out(4 * 64);
  out.poison();
  stmatrix_kernel<<<1, 32>>>(out.ptr);
  CUDA_CHECK_LAUNCH();
  const std::vector<uint16_t> h = out.download();
  int bad = 0;
  for (int i = 0; i < 4 * 64; ++i) bad += h[i] != i;
  EXPECT_EQ(bad, 0);
}

}  // namespace
