// test_flash3 — the Hopper PTX helpers of kernels/attention/hopper.cuh, one test each, and the
// flash3 backend's repeat determinism. (flash3's accuracy against the CPU oracle, ragged T,
// GQA and poisoned outputs: the registry-driven tests/gpu/test_attention.cu.)
//
//   Hopper.TmaLoadTile          a 4-D TMA box (128-byte swizzle) from a packed qkv-like buffer
//                               equals the source, rows past T read as 0 (never the next batch)
//   Hopper.MbarrierPhaseRing    a 2-stage producer/consumer ring, 1000 items, order and values
//   Hopper.NamedBarriers        bar.arrive / bar.sync hand-offs between two warps, both ways
//   Hopper.Setmaxnreg           3 warpgroups, dec 24 / inc 240: every role runs and writes
//   Hopper.ReleaseAcquireChain  2048 blocks pass a release/acquire flag in block order
//   Flash3.RepeatDeterminism    forward and backward bitwise equal over 3 runs (HS 64 and 128,
//                               GQA, ragged T, more blocks than SMs)
//
// Run (GPU machine): ./build/test_gpu --gtest_filter='Hopper*:Flash3*'
#include <cstring>
#include <random>
#include <vector>

#include "kernels/attention/attention.cuh"
#include "kernels/attention/hopper.cuh"
#include "tests/gpu/gpu_test.h"

namespace {

int sm_major() {
  int dev = 0, major = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  return major;
}

class Hopper : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (!IsSkipped() && sm_major() != 9) GTEST_SKIP() << "needs an sm_90 GPU";
  }
};

// ---- TMA ----
constexpr int kTmaRows = 128, kTmaHS = 128;
__global__ void tma_tile_kernel(const __grid_constant__ CUtensorMap map, uint8_t* dump, int head,
                                int t0, int b) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t s0 = (hopper::smem_u32(smem_raw) + 1023u) & ~1023u;
  const uint32_t tile = s0, bar = s0 + kTmaRows * kTmaHS * 2;
  if (threadIdx.x == 0) {
    hopper::mbar_init(bar, 1);
    hopper::mbar_init_fence();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    hopper::mbar_arrive_expect_tx(bar, kTmaRows * kTmaHS * 2);
    for (int p = 0; p < kTmaHS / 64; ++p)
      hopper::tma_load_4d(tile + p * kTmaRows * 128, &map, bar, p * 64, head, t0, b);
  }
  hopper::mbar_wait(bar, 0);
  const uint8_t* src = smem_raw + (tile - hopper::smem_u32(smem_raw));
  for (int k = threadIdx.x; k < kTmaRows * kTmaHS * 2; k += blockDim.x) dump[k] = src[k];
}

TEST_F(Hopper, TmaLoadTile) {
  const int B = 2, T = 100, H3 = 5;
  const size_t n = size_t(B) * T * H3 * kTmaHS;
  std::vector<__nv_bfloat16> h(n);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (auto& x : h) {
    float v = u(rng);
    if (v == 0.f) v = 0.5f;  // nonzero everywhere: a zero in the tile means zero-fill
    x = __float2bfloat16(v);
  }
  __nv_bfloat16* d = nullptr;
  uint8_t* dump = nullptr;
  CUDA_CHECK(cudaMalloc(&d, n * 2));
  CUDA_CHECK(cudaMalloc(&dump, kTmaRows * kTmaHS * 2));
  CUDA_CHECK(cudaMemcpy(d, h.data(), n * 2, cudaMemcpyHostToDevice));
  const uint64_t dims[4] = {kTmaHS, H3, T, B};
  const uint64_t strides[3] = {kTmaHS * 2, (uint64_t)H3 * kTmaHS * 2, (uint64_t)T * H3 * kTmaHS * 2};
  const uint32_t box[4] = {64, 1, kTmaRows, 1};
  const CUtensorMap map = hopper::make_tensor_map_bf16_4d(d, dims, strides, box);
  const int smem = kTmaRows * kTmaHS * 2 + 8 + 1024;
  CUDA_CHECK(cudaFuncSetAttribute(tma_tile_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  struct Box {
    int head, t0, b;
  };
  for (const Box& bx : {Box{3, 40, 0}, Box{1, 0, 1}}) {  // b 0: rows 100.. must not be batch 1's
    CUDA_CHECK(cudaMemset(dump, 0xff, kTmaRows * kTmaHS * 2));
    tma_tile_kernel<<<1, 128, smem>>>(map, dump, bx.head, bx.t0, bx.b);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<__nv_bfloat16> got(kTmaRows * kTmaHS);
    CUDA_CHECK(cudaMemcpy(got.data(), dump, got.size() * 2, cudaMemcpyDeviceToHost));
    size_t bad = 0, zeros = 0;
    for (int r = 0; r < kTmaRows; ++r)
      for (int col = 0; col < kTmaHS; ++col) {
        // 128-byte swizzle: panel col / 64, 16-byte chunk (col % 64) / 8 stored at chunk ^ (r % 8)
        const int panel = col / 64, chunk = (col % 64) / 8;
        const size_t byte = size_t(panel) * kTmaRows * 128 + r * 128 + ((chunk ^ (r & 7)) << 4) +
                            (col % 8) * 2;
        uint16_t g, want = 0;
        std::memcpy(&g, reinterpret_cast<const uint8_t*>(got.data()) + byte, 2);
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
  CUDA_CHECK(cudaFree(d));
  CUDA_CHECK(cudaFree(dump));
}

// ---- mbarrier ring ----
constexpr int kRingStages = 2, kRingItems = 1000;
__global__ void mbar_ring_kernel(int* bad, long long* sum) {
  __shared__ __align__(8) uint64_t bars[2 * kRingStages];
  __shared__ int slot[kRingStages];
  const uint32_t full = hopper::smem_u32(bars), empty = full + 8 * kRingStages;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kRingStages; ++s) {
      hopper::mbar_init(full + 8 * s, 1);
      hopper::mbar_init(empty + 8 * s, 1);
    }
    hopper::mbar_init_fence();
  }
  __syncthreads();
  if (warp == 0) {
    if (lane == 0)
      for (int n = 0; n < kRingItems; ++n) {
        const int s = n % kRingStages;
        hopper::mbar_wait(empty + 8 * s, ((n / kRingStages) & 1) ^ 1);
        slot[s] = n * 7 + 1;
        hopper::mbar_arrive(full + 8 * s);
      }
  } else {
    int wrong = 0;
    long long acc = 0;
    for (int n = 0; n < kRingItems; ++n) {
      const int s = n % kRingStages;
      hopper::mbar_wait(full + 8 * s, (n / kRingStages) & 1);
      const int v = slot[s];
      wrong += v != n * 7 + 1;
      acc += v;
      __syncwarp();
      if (lane == 0) hopper::mbar_arrive(empty + 8 * s);
    }
    if (lane == 0) {
      *bad = wrong;
      *sum = acc;
    }
  }
}

TEST_F(Hopper, MbarrierPhaseRing) {
  int* bad = nullptr;
  long long* sum = nullptr;
  CUDA_CHECK(cudaMalloc(&bad, sizeof(int)));
  CUDA_CHECK(cudaMalloc(&sum, sizeof(long long)));
  CUDA_CHECK(cudaMemset(bad, 0xff, sizeof(int)));
  CUDA_CHECK(cudaMemset(sum, 0, sizeof(long long)));
  mbar_ring_kernel<<<1, 64>>>(bad, sum);
  CUDA_CHECK_LAUNCH();
  CUDA_CHECK(cudaDeviceSynchronize());
  int h_bad = -1;
  long long h_sum = 0;
  CUDA_CHECK(cudaMemcpy(&h_bad, bad, sizeof(int), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(&h_sum, sum, sizeof(long long), cudaMemcpyDeviceToHost));
  EXPECT_EQ(h_bad, 0) << "items read out of order or before they were written";
  EXPECT_EQ(h_sum, 7LL * kRingItems * (kRingItems - 1) / 2 + kRingItems);
  CUDA_CHECK(cudaFree(bad));
  CUDA_CHECK(cudaFree(sum));
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
      hopper::named_bar_arrive(1, 64);
      hopper::named_bar_sync(2, 64);
    } else {
      hopper::named_bar_sync(1, 64);
      wrong += buf[31 - lane] != r * 32 + 31 - lane;
      hopper::named_bar_arrive(2, 64);
    }
  }
  if (warp == 1) atomicAdd(bad, wrong);
}

TEST_F(Hopper, NamedBarriers) {
  int* bad = nullptr;
  CUDA_CHECK(cudaMalloc(&bad, sizeof(int)));
  CUDA_CHECK(cudaMemset(bad, 0, sizeof(int)));
  named_bar_kernel<<<1, 64>>>(bad);
  CUDA_CHECK_LAUNCH();
  CUDA_CHECK(cudaDeviceSynchronize());
  int h = -1;
  CUDA_CHECK(cudaMemcpy(&h, bad, sizeof(int), cudaMemcpyDeviceToHost));
  EXPECT_EQ(h, 0);
  CUDA_CHECK(cudaFree(bad));
}

// ---- setmaxnreg: warpgroup 0 gives registers away, 1 and 2 take them; each thread writes ----
__global__ void __launch_bounds__(384, 1) setmaxnreg_kernel(float* out, int n_iter) {
  const int wg = threadIdx.x / 128;
  if (wg == 0) {
    hopper::setmaxnreg_dec<24>();
    out[threadIdx.x] = 1.f + threadIdx.x;
  } else {
    hopper::setmaxnreg_inc<240>();
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
  float* out = nullptr;
  CUDA_CHECK(cudaMalloc(&out, 384 * sizeof(float)));
  CUDA_CHECK(cudaMemset(out, 0xff, 384 * sizeof(float)));
  setmaxnreg_kernel<<<2, 384>>>(out, 0);  // 0 iterations: the sum is exact and known
  CUDA_CHECK_LAUNCH();
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> h(384);
  CUDA_CHECK(cudaMemcpy(h.data(), out, h.size() * sizeof(float), cudaMemcpyDeviceToHost));
  for (int t = 0; t < 384; ++t) {
    const float want = t < 128 ? 1.f + t : float(64 * t + 64 * 63 / 2);
    EXPECT_EQ(h[t], want) << "thread " << t;
  }
  CUDA_CHECK(cudaFree(out));
}

// ---- release/acquire flag chain in block order (the deterministic dQ's assumption) ----
__global__ void flag_chain_kernel(int* flag, int* log) {
  if (threadIdx.x != 0) return;
  const int j = blockIdx.x;
  hopper::wait_flag_equals(flag, j);
  log[j] = j > 0 ? log[j - 1] + 1 : 0;  // reads the previous block's write
  __threadfence();
  hopper::st_release_gpu(flag, j + 1);
}

TEST_F(Hopper, ReleaseAcquireChain) {
  const int n = 2048;
  int *flag = nullptr, *log = nullptr;
  CUDA_CHECK(cudaMalloc(&flag, sizeof(int)));
  CUDA_CHECK(cudaMalloc(&log, n * sizeof(int)));
  CUDA_CHECK(cudaMemset(flag, 0, sizeof(int)));
  CUDA_CHECK(cudaMemset(log, 0xff, n * sizeof(int)));
  flag_chain_kernel<<<n, 64>>>(flag, log);
  CUDA_CHECK_LAUNCH();
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<int> h(n);
  CUDA_CHECK(cudaMemcpy(h.data(), log, n * sizeof(int), cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int j = 0; j < n; ++j) bad += h[j] != j;
  EXPECT_EQ(bad, 0);
  CUDA_CHECK(cudaFree(flag));
  CUDA_CHECK(cudaFree(log));
}

// ---- flash3 --deterministic: forward and backward bitwise reproducible over 3 runs ----
class Flash3 : public Hopper {};

TEST_F(Flash3, RepeatDeterminism) {
#if defined(ENABLE_FP32)
  GTEST_SKIP() << "flash3 is bf16-only";
#endif
  auto be = make_attention("flash3");
  ASSERT_TRUE(be->dq_bitwise(/*deterministic=*/true));
  for (const AttnShape s : {AttnShape{2, 2500, 8, 2, 64}, AttnShape{3, 1777, 6, 3, 128}}) {
    ASSERT_EQ(be->unsupported_reason(s), "");
    const size_t H3 = size_t(s.NH) + 2 * s.NKV, n_qkv = size_t(s.B) * s.T * H3 * s.HS,
                 n_out = size_t(s.B) * s.T * s.NH * s.HS;
    std::vector<floatX> qkv(n_qkv), dout(n_out);
    std::mt19937 rng(std::random_device{}());
    std::normal_distribution<float> nd(0.f, 1.f);
    for (auto& x : qkv) x = floatX(nd(rng));
    for (auto& x : dout) x = floatX(nd(rng));
    floatX *d_qkv, *d_dqkv, *d_out, *d_dout;
    void *saved, *scratch;
    CUDA_CHECK(cudaMalloc(&d_qkv, n_qkv * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&d_dqkv, n_qkv * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&d_out, n_out * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&d_dout, n_out * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&saved, be->saved_bytes(s)));
    CUDA_CHECK(cudaMalloc(&scratch, be->scratch_bytes(s)));
    CUDA_CHECK(cudaMemcpy(d_qkv, qkv.data(), n_qkv * sizeof(floatX), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_dout, dout.data(), n_out * sizeof(floatX), cudaMemcpyHostToDevice));
    std::vector<floatX> out0, dqkv0;
    for (int run = 0; run < 3; ++run) {
      CUDA_CHECK(cudaMemset(d_out, 0xff, n_out * sizeof(floatX)));
      CUDA_CHECK(cudaMemset(d_dqkv, 0xff, n_qkv * sizeof(floatX)));
      CUDA_CHECK(cudaMemset(scratch, 0xff, be->scratch_bytes(s)));
      be->forward({d_out, saved, scratch, d_qkv, s}, 0);
      be->backward({d_dqkv, scratch, d_dout, d_qkv, d_out, saved, s, /*deterministic=*/true}, 0);
      CUDA_CHECK(cudaDeviceSynchronize());
      std::vector<floatX> out(n_out), dqkv(n_qkv);
      CUDA_CHECK(cudaMemcpy(out.data(), d_out, n_out * sizeof(floatX), cudaMemcpyDeviceToHost));
      CUDA_CHECK(cudaMemcpy(dqkv.data(), d_dqkv, n_qkv * sizeof(floatX), cudaMemcpyDeviceToHost));
      size_t nonfinite = 0;
      for (floatX x : dqkv) nonfinite += !std::isfinite(float(x));
      EXPECT_EQ(nonfinite, 0u) << "dqkv has NaN/Inf";
      if (run == 0) {
        out0 = out;
        dqkv0 = dqkv;
        continue;
      }
      size_t d_out_n = 0, d_dq_n = 0;
      for (size_t i = 0; i < n_out; ++i) d_out_n += std::memcmp(&out[i], &out0[i], sizeof(floatX)) != 0;
      for (size_t i = 0; i < n_qkv; ++i)
        d_dq_n += std::memcmp(&dqkv[i], &dqkv0[i], sizeof(floatX)) != 0;
      EXPECT_EQ(d_out_n, 0u) << "HS " << s.HS << " run " << run << ": out differs";
      EXPECT_EQ(d_dq_n, 0u) << "HS " << s.HS << " run " << run << ": dqkv differs";
    }
    cudaFree(d_qkv);
    cudaFree(d_dqkv);
    cudaFree(d_out);
    cudaFree(d_dout);
    cudaFree(saved);
    cudaFree(scratch);
  }
}

}  // namespace
