// test_model_cp — the CUDA model with context parallelism (ModelOptions.cp = 2) against the CPU
// reference model, on one GPU: the two cp ranks are threads of this process, each with its own
// model; their ring hops are device copies (LocalRingHub, ring_attention.cuh) and the loss's sum
// over the ranks goes through a host-side stand-in for the world communicator. Each rank's model
// is given the whole batch and keeps its own zigzag rows. No gradient all-reduce runs: the test
// averages the two ranks' gradients itself, which is what the all-reduce over dp x cp does
// (context_parallel.h: each rank seeds dloss = cp / (B*T)).
//
//   CudaModelCp.*MatchesCpu   rank 0 and rank 1 losses equal the CPU model's loss of the whole
//                             sequences; the mean of their gradients equals the CPU model's
//                             gradients, every tensor (wpe's rows at global positions, RoPE at
//                             global positions, the ring's dQ, dK, dV; under the document mask
//                             and a window, RopeDocumentMaskWindowMatchesCpu)
// Shapes: B = 3, ragged T = 31 (chunks 7, 8, 8, 8: each rank holds 15 or 16 rows, the second
// chunk at a row that is not a multiple of 8), GQA (NH 2, NKV 1, HS 64), flash (and flash3 once,
// where the GPU runs it), --recompute none and layer-but-attn and layer, learned and rotary positions.
// Tolerances: test_model.cu's (bf16 build: 5e-3 loss, 5e-2 gradients).
//
// Run (GPU machine): ./build/test_gpu --gtest_filter='CudaModelCp*'
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "model/ring_attention.cuh"
#include "model/dist_comm.h"
#include "model/gpt_cpu.h"
#include "model/gpt_cuda.cuh"
#include "model/layout.h"
#include "model/model.h"
#include "tests/gpu/gpu_test.h"

namespace {

constexpr double kGradTol = 5e-2, kLossTol = 5e-3;

// The world communicator of n ranks that are threads of this process: all_reduce_mean meets on
// the host; nothing else crosses ranks (no NCCL: nccl_comm() is null, which the model only
// needs for the gradient all-reduce this test does not call).
struct LocalWorld {
  explicit LocalWorld(int n) : n(n) {}
  int n, arrived = 0;
  long gen = 0;
  double sum = 0, result = 0;
  std::mutex m;
  std::condition_variable cv;
  float mean(float x) {
    std::unique_lock<std::mutex> lock(m);
    const long g = gen;
    sum += x;
    if (++arrived == n) {
      result = sum / n;
      sum = 0;
      arrived = 0;
      gen++;
      cv.notify_all();
    } else {
      cv.wait(lock, [&] { return gen != g; });
    }
    return (float)result;
  }
};

class LocalDistComm final : public DistComm {
 public:
  LocalDistComm(LocalWorld& w, int rank) : w_(w), rank_(rank) {}
  int rank() const override { return rank_; }
  int world() const override { return w_.n; }
  void* nccl_comm() const override { return nullptr; }
  void set_stream(void* stream) override { stream_ = static_cast<cudaStream_t>(stream); }
  float all_reduce_mean(float x) override { return w_.mean(x); }
  void send_recv(const std::vector<CommSpan>&, int, const std::vector<CommSpan>&, int,
                 void*) override {
    THROW_ERROR("internal: LocalDistComm has no point to point (the ring hops through the hub)");
  }
  void wait(void* stream, double) override {
    CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
  }
  void abort() override {}
  std::unique_ptr<DistComm> split(int, int) override {
    THROW_ERROR("internal: LocalDistComm cannot split");
  }

 private:
  LocalWorld& w_;
  int rank_;
  cudaStream_t stream_ = nullptr;
};

double rel_l2(const float* got, const float* ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    if (!std::isfinite(got[i])) return INFINITY;
    const double e = (double)got[i] - ref[i];
    num += e * e;
    den += (double)ref[i] * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

ModelOptions cp_options(bool rope, Recompute rc) {
  ModelOptions o;
  o.config.vocab_size = 100;
  o.config.padded_vocab_size = pad_vocab(100);
  o.config.max_seq_len = 32;
  o.config.num_layers = 2;
  o.config.num_heads = 2;
  o.config.num_kv_heads = 1;
  o.config.channels = 128;
  o.config.rope = rope ? 1 : 0;
  o.B = 3;
  o.T = 31;
  o.attn = "flash";
  o.recompute = rc;
  o.seed = base_seed() % 100000;
  return o;
}

void check_cp2(const ModelOptions& o) {
  SEED_TRACE();
  if (sizeof(floatX) != 2) GTEST_SKIP() << "the ring is bf16";
  const int N = 2, B = o.B, T = o.T, V = o.config.vocab_size;
  std::mt19937_64 rng(base_seed() + 11);
  std::uniform_int_distribution<int> tok(0, V - 1);
  std::vector<int> inp((size_t)B * T), tgt((size_t)B * T);
  for (int& x : inp) x = tok(rng);
  for (int& x : tgt) x = tok(rng);
  if (o.mask.kind == MaskKind::kDocument) {  // documents of ~6 tokens, EOT = V - 1
    std::bernoulli_distribution eot(1.0 / 6);
    for (int& x : inp)
      if (eot(rng)) x = V - 1;
  }

  ModelOptions oc = o;
  oc.attn = "flash";  // the CPU flash loop
  auto cpu = make_cpu_model(oc);
  cpu->zero_grad();
  const float loss_cpu = cpu->forward(inp.data(), tgt.data(), B, T);
  cpu->backward(0.5f);
  const std::vector<float> g_cpu(dynamic_cast<GptCpu<float>*>(cpu.get())->grads.begin(),
                                 dynamic_cast<GptCpu<float>*>(cpu.get())->grads.end());

  LocalWorld world(N);
  LocalRingHub hub(N);
  std::vector<float> loss(N, NAN);
  std::vector<std::vector<float>> grads(N);
  std::vector<std::string> errors(N);
  auto rank_main = [&](int r) {
    try {
      CUDA_CHECK(cudaSetDevice(0));
      LocalDistComm comm(world, r);
      std::unique_ptr<RingTransport> transport = hub.transport(r);
      ModelOptions orr = o;
      orr.cp = N;
      orr.cp_rank = r;
      orr.comm = &comm;
      orr.cp_transport = transport.get();
      orr.overlap_comm = false;  // no gradient all-reduce: the test averages
      auto m = make_cuda_model(orr);
      m->zero_grad();
      loss[r] = m->forward(inp.data(), tgt.data(), B, T);  // the model keeps its own rows
      m->backward(0.5f);
      cuda_model_get_grads(*m, grads[r]);
    } catch (const std::exception& e) {
      errors[r] = e.what();
    }
  };
  std::thread t1(rank_main, 1);
  rank_main(0);
  t1.join();
  for (int r = 0; r < N; r++) ASSERT_EQ(errors[r], "") << "rank " << r;

  std::printf("cp 2 (%s, recompute %s, %s mask): loss cpu %.6f, ranks %.6f %.6f\n",
              o.config.rope ? "rope" : "learned", recompute_name(o.recompute),
              describe_mask(o.mask).c_str(), loss_cpu, loss[0], loss[1]);
  EXPECT_EQ(loss[0], loss[1]) << "the ranks report different losses";
  EXPECT_WITHIN(std::fabs(loss[0] - loss_cpu) / std::fabs(loss_cpu), kLossTol);
  ASSERT_EQ(grads[0].size(), g_cpu.size());
  std::vector<float> mean(g_cpu.size());
  for (size_t i = 0; i < mean.size(); i++) mean[i] = 0.5f * (grads[0][i] + grads[1][i]);
  ParamLayout layout(o.config);
  for (int i = 0; i < kNumParamTensors; i++) {
    const size_t off = layout.offsets[i], n = layout.sizes[i];
    if (n == 0) continue;
    const double e = rel_l2(mean.data() + off, g_cpu.data() + off, n);
    std::printf("  grad %-9s n=%-7zu rel_l2 %.2e (tol %.0e, %5.1f%%)\n", ParamLayout::name(i), n,
                e, kGradTol, 100 * e / kGradTol);
    EXPECT_WITHIN(e, kGradTol) << ParamLayout::name(i);
  }
}

// Positions (learned wpe rows, or RoPE) at global positions, with what the backward keeps or
// recomputes.
class CudaModelCp : public GpuTest {};
TEST_F(CudaModelCp, LearnedPositionsMatchCpu) { check_cp2(cp_options(false, Recompute::kNone)); }
TEST_F(CudaModelCp, RopeMatchesCpu) { check_cp2(cp_options(true, Recompute::kNone)); }
TEST_F(CudaModelCp, RopeRecomputeLayerButAttnMatchesCpu) { check_cp2(cp_options(true, Recompute::kLayerButAttn)); }
TEST_F(CudaModelCp, LearnedRecomputeLayerMatchesCpu) { check_cp2(cp_options(false, Recompute::kLayer)); }

// --tune-matmul with two ranks on one GPU: each rank's thread times its own candidates, and an
// accumulating product's scratch is stream-ordered, so one rank's tuning never waits for the
// other rank's stream (which may be waiting for this one's ring hop).
TEST_F(CudaModelCp, TunedMatmulMatchesCpu) {
  ModelOptions o = cp_options(true, Recompute::kNone);
  o.tune_matmul = true;
  check_cp2(o);
}

// The document mask and a window through the ring: each rank's model reads the whole batch's
// document starts at global positions and skips the chunk pairs they empty.
TEST_F(CudaModelCp, RopeDocumentMaskWindowMatchesCpu) {
  ModelOptions o = cp_options(true, Recompute::kLayerButAttn);
  o.mask = MaskSpec{MaskKind::kDocument, 9, -1};
  check_cp2(o);
}

// flash3 (sm_90a only): its own forward and backward kernels on every ring pair.
TEST_F(CudaModelCp, Flash3RopeRecomputeLayerMatchesCpu) {
  ModelOptions o = cp_options(true, Recompute::kLayer);
  o.attn = "flash3";
  const std::string why = attention_unsupported_reason(attention_spec("flash3"),
                                                       AttnShape{o.B, o.T, 2, 1, 64}, sizeof(floatX));
  if (!why.empty()) GTEST_SKIP() << "flash3: " << why;
  check_cp2(o);
}

}  // namespace
