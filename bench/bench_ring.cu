// bench_ring.cu — `flashgpt bench-attention --cp N`: the context-parallel ring
// (model/ring_attention.cuh) with N virtual ranks on this one GPU.
//
// The N ranks are host threads of this process, each with its own stream, buffers and
// RingAttention; their hops are device copies (LocalRingHub). They share one GPU, so the time
// of a ring step set is the sum of every rank's work plus what the ring adds: the split of the
// causal work into (chunk, chunk) problems, the fp32 running O and its merge, the dK/dV
// accumulators, the copies. Against the same backend on the whole sequence (the plain row of
// bench-attention), the ratio plain / ring is an upper bound on what N GPUs can reach
// (efficiency = tok/s(N GPUs) / (N x tok/s(1 GPU))): the real ring adds the wire and waits.
// Per measurement: `warmup` untimed rounds, then the median of `iters` rounds; a round is
// "every rank runs the op, every rank's stream drains", timed on the host.
#include <algorithm>
#include <chrono>
#include <thread>

#include "bench/bench_ring.h"
#include "bench/bench_util.cuh"
#include "model/context_parallel.h"
#include "model/ring_attention.cuh"

namespace {

struct RankBuffers {
  floatX *qkv, *dqkv, *out, *dout;
  float* lse;
  char* scratch;
  RingBuffers rb;
};

}  // namespace

RingTimes time_ring_virtual(const AttentionBackend& be, const AttnShape& s, int N, int warmup,
                            int iters) {
  RingTimes t;
  const CpLayout L(N, s.T);
  const CpRingElems e = cp_ring_elems(L, s.B, s.NH, s.NKV, s.HS);
  const size_t QKV = size_t(s.NH + 2 * s.NKV) * s.HS, ldo = size_t(s.NH) * s.HS;
  DeviceAllocs mem;
  std::vector<RankBuffers> rk(N);
  for (int r = 0; r < N; r++) {
    const int Tl = L.local_len(r);
    const AttnShape local{s.B, Tl, s.NH, s.NKV, s.HS};
    const size_t nq = size_t(s.B) * Tl * QKV, no = size_t(s.B) * Tl * ldo;
    RankBuffers& b = rk[r];
    b.qkv = mem.try_alloc<floatX>(nq);
    b.dqkv = mem.try_alloc<floatX>(nq);
    b.out = mem.try_alloc<floatX>(no);
    b.dout = mem.try_alloc<floatX>(no);
    b.lse = mem.try_alloc<float>(size_t(s.B) * s.NH * Tl);
    b.scratch = mem.try_alloc(be.scratch_bytes(local));
    floatX* kv = mem.try_alloc<floatX>(2 * e.kv);
    float* dkv = mem.try_alloc<float>(e.dkv_count * e.dkv);
    float* o_run = mem.try_alloc<float>(e.o_run);
    if (!b.qkv || !b.dqkv || !b.out || !b.dout || !b.lse || !b.scratch || !kv || !dkv || !o_run) {
      t.status = "OOM";
      return t;
    }
    b.rb = carve_ring_buffers(kv, dkv, o_run, e);
    fill_uniform(b.qkv, nq, 1234u + r, -1.5f, 1.5f);
    fill_uniform(b.dout, no, 5678u + r, -1.5f, 1.5f);
    t.extra_bytes += be.scratch_bytes(local) + size_t(s.B) * s.NH * Tl * 4 +
                     2 * e.kv * sizeof(floatX) + e.dkv_count * e.dkv * 4 + e.o_run * 4;
  }
  CUDA_CHECK(cudaDeviceSynchronize());

  LocalRingHub hub(N);
  RankBarrier bar(N);
  std::vector<std::string> errors(N);
  std::vector<double> f_ms, b_ms, fb_ms;
  auto rank_main = [&](int r) {
    try {
      int dev = 0;
      CUDA_CHECK(cudaGetDevice(&dev));
      cudaStream_t st;
      CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
      RingAttention ring(L, r, hub.transport(r));
      const RankBuffers& b = rk[r];
      const AttnShape local{s.B, L.local_len(r), s.NH, s.NKV, s.HS};
      auto fwd = [&] { ring.forward(be, b.out, b.lse, b.qkv, local, b.rb, st); };
      auto bwd = [&] {
        ring.backward(be, b.dqkv, b.scratch, b.dout, b.qkv, b.out, b.lse, local, b.rb, st);
      };
      auto rounds = [&](int which, std::vector<double>& ms) {
        for (int it = 0; it < warmup + iters; it++) {
          bar.arrive_and_wait();
          const auto t0 = std::chrono::steady_clock::now();
          if (which != 1) fwd();
          if (which != 0) bwd();
          CUDA_CHECK(cudaStreamSynchronize(st));
          bar.arrive_and_wait();
          if (r == 0 && it >= warmup)
            ms.push_back(std::chrono::duration<double, std::milli>(
                             std::chrono::steady_clock::now() - t0)
                             .count());
        }
      };
      rounds(0, f_ms);
      rounds(1, b_ms);  // on the last forward's out and LSE
      rounds(2, fb_ms);
      CUDA_CHECK(cudaStreamDestroy(st));
    } catch (const std::exception& ex) {
      errors[r] = ex.what();
    }
  };
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  std::vector<std::thread> threads;
  for (int r = 1; r < N; r++)
    threads.emplace_back([&, r] {
      cudaSetDevice(dev);
      rank_main(r);
    });
  rank_main(0);
  for (auto& th : threads) th.join();
  for (int r = 0; r < N; r++)
    if (!errors[r].empty()) {
      t.status = "error: rank " + std::to_string(r) + ": " + errors[r];
      return t;
    }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
  };
  t.fwd_ms = median(f_ms);
  t.bwd_ms = median(b_ms);
  t.fb_ms = median(fb_ms);
  t.status = "ok";
  return t;
}
