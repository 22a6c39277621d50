// test_ring_attention — context-parallel attention (ring_attention.cuh) against the CPU oracle
// of full attention, with the cp ranks as threads of this process:
//
//   RingShapes/RingAttentionGpu.Local/<backend>_cpN_B_T_NH_NKV_HS   N virtual ranks on one GPU
//       (LocalRingHub: the hops are device copies; N = 2, 3, 4)
//   RingShapes/RingAttentionGpu.Nccl/...   cp = N on N GPUs over NCCL (ncclCommInitAll, each
//       rank's communicator a DistComm: adopt_nccl_comm); skipped with fewer than N GPUs
//
// Each case, on fresh random inputs (FLASHGPT_SEED=<n> repeats them):
//   * the full sequence's qkv and dout are scattered to the cp ranks' zigzag chunks
//     (cp_scatter); each rank (one host thread) runs RingAttention::forward and ::backward; the
//     ranks' out, LSE and dqkv are gathered back (cp_gather) into the full sequence's order;
//   * reference: attention_flash_{forward,backward}_ref<float> of the full sequence; baseline:
//     the plain bf16 attention (plain_bf16_attention.h); the same rule as tests/gpu/test_flash.cu
//     (expect_calibrated: L2 and max error <= 2x the baseline's + the largest change of one
//     bf16 rounding) for out, dQ, dK, dV, and LSE max error <= 2e-4;
//   * out, LSE, dqkv and every ring buffer are filled with NaN first, so an unwritten element,
//     a block read before it arrived or a pair left out fails;
//   * the rank threads meet (RankBarrier) before the ring starts and before any frees: over
//     NCCL a rank still allocating, or one that throws mid-ring, leaves the other's kernels
//     spinning; past a deadline the test prints what each rank said and ends the process.
// Ragged T (odd lengths: chunk lengths differ, the second Q chunk starts at a row that is not a
// multiple of 8), GQA and MQA, HS 64 and 128, both ring backends; the causal mask, and the
// document mask and sliding windows (ring_case_name's _doc<mean length>, _W<window>), against
// the masked reference and baseline. On one GPU each rank's bytes sent equal cp_comm_bytes:
// under a mask, only the K/V rows some other rank's queries see travel.
//
// Run: ./build/test_gpu --gtest_filter='Ring*'
#include <nccl.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/attention/attention_ref.h"
#include "model/context_parallel.h"
#include "model/nccl_comm.cuh"
#include "model/ring_attention.cuh"
#include "tests/gpu/gpu_test.h"
#include "tests/gpu/plain_bf16_attention.h"

namespace {

struct RingCase {
  const char* backend;
  int cp, B, T, NH, NKV, HS;
  // The mask (mask.h): documents of mean doc_len (an end-of-text token at each position with
  // probability 1/doc_len; 0: none, the causal mask) and a sliding window (0: none).
  int doc_len = 0, window = 0;
};
std::string ring_case_name(const RingCase& c) {
  return std::string(c.backend) + "_cp" + std::to_string(c.cp) + "_B" + std::to_string(c.B) +
         "_T" + std::to_string(c.T) +
         "_NH" + std::to_string(c.NH) + "_NKV" + std::to_string(c.NKV) + "_HS" +
         std::to_string(c.HS) + (c.doc_len ? "_doc" + std::to_string(c.doc_len) : "") +
         (c.window ? "_W" + std::to_string(c.window) : "");
}

constexpr int kRankDeadlineS = 120;  // every case takes seconds; a stuck ring never ends

int gpu_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

class RingAttentionGpu : public GpuTest, public ::testing::WithParamInterface<RingCase> {
 protected:
  void check(bool nccl);
};

TEST_P(RingAttentionGpu, Local) { check(false); }
TEST_P(RingAttentionGpu, Nccl) { check(true); }

void RingAttentionGpu::check(bool nccl) {
  if (sizeof(floatX) != 2) GTEST_SKIP() << "the ring's kernels are bf16";
  const RingCase c = GetParam();
  if (nccl && gpu_count() < c.cp)
    GTEST_SKIP() << "NCCL: cp " << c.cp << " needs " << c.cp << " GPUs, this machine has "
                 << gpu_count();
  const int N = c.cp;
  const AttnShape s{c.B, c.T, c.NH, c.NKV, c.HS};
  const CpLayout L(N, c.T);
  const size_t H3 = size_t(s.NH) + 2 * s.NKV, QKV = H3 * s.HS, ldo = size_t(s.NH) * s.HS;
  const size_t n_qkv = size_t(s.B) * s.T * QKV, n_out = size_t(s.B) * s.T * ldo,
               n_lse = size_t(s.B) * s.NH * s.T;

  SEED_TRACE();
  std::vector<float> qkv, dout;
  random_attention_inputs(s, qkv, dout);
  // The mask of the whole (B, T) batch: every rank reads it at global positions.
  std::vector<int> doc_start;
  if (c.doc_len > 0) {
    std::mt19937_64 rng = test_rng();
    std::bernoulli_distribution eot(1.0 / c.doc_len);
    std::vector<int> tokens((size_t)s.B * s.T);
    for (int& t : tokens) t = eot(rng) ? 1 : 0;
    doc_start = document_starts(tokens.data(), s.B, s.T, 1);
  }
  const AttnMask host_mask{doc_start.empty() ? nullptr : doc_start.data(), c.window};
  const bool masked = !host_mask.is_causal();

  std::vector<std::unique_ptr<DistComm>> comms(N);  // rank r's, made and destroyed on GPU r
  std::unique_ptr<LocalRingHub> hub;
  if (nccl) {
    std::vector<ncclComm_t> raw(N);
    std::vector<int> devs(N);
    for (int r = 0; r < N; r++) devs[r] = r;
    ASSERT_EQ(ncclCommInitAll(raw.data(), N, devs.data()), ncclSuccess);
    for (int r = 0; r < N; r++) {
      CUDA_CHECK(cudaSetDevice(r));
      comms[r] = adopt_nccl_comm(raw[r], kRankDeadlineS);
    }
  } else {
    hub = std::make_unique<LocalRingHub>(N);
  }

  std::vector<float> out(n_out, NAN), lse(n_lse, NAN), dqkv(n_qkv, NAN);
  std::vector<std::string> errors(N);
  RankBarrier meet(N);
  auto rank_main = [&](int r) {
    // Every rank reaches both meeting points, even after an error (else the others would wait).
    int met = 0;
    auto meet_once = [&](int point) {
      while (met < point) {
        meet.arrive_and_wait();
        ++met;
      }
    };
    try {
      CUDA_CHECK(cudaSetDevice(nccl ? r : 0));
      const int Tl = L.local_len(r);
      const AttnShape local{s.B, Tl, s.NH, s.NKV, s.HS};
      auto attn = make_attention(c.backend);
      std::vector<float> q_l((size_t)s.B * Tl * QKV), do_l((size_t)s.B * Tl * ldo);
      cp_scatter(q_l.data(), qkv.data(), L, r, s.B, QKV);
      cp_scatter(do_l.data(), dout.data(), L, r, s.B, ldo);
      DeviceBuffer<floatX> d_qkv(q_l.size()), d_dout(do_l.size()), d_out(do_l.size()),
          d_dqkv(q_l.size());
      DeviceBuffer<float> d_lse((size_t)s.B * s.NH * Tl);
      DeviceBuffer<char> d_scratch(attn->scratch_bytes(local));
      const CpRingElems e = cp_ring_elems(L, s.B, s.NH, s.NKV, s.HS);
      DeviceBuffer<floatX> kv(2 * e.kv);
      DeviceBuffer<float> dkv(e.dkv_count * e.dkv), o_run(e.o_run);
      DeviceBuffer<int> d_doc(std::max<size_t>(doc_start.size(), 1));
      d_doc.upload(doc_start);
      kv.poison();
      for (auto* b : {&dkv, &o_run}) b->poison();
      d_out.poison();
      d_dqkv.poison();
      d_lse.poison();
      d_scratch.poison();
      d_qkv.upload(to_floatX(q_l));
      d_dout.upload(to_floatX(do_l));
      const RingBuffers rb = carve_ring_buffers(kv.ptr, dkv.ptr, o_run.ptr, e);
      cudaStream_t st;
      CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
      CUDA_CHECK(cudaDeviceSynchronize());
      meet_once(1);  // all buffers allocated and uploaded
      {
        RingAttention ring(L, r, nccl ? make_dist_ring_transport(*comms[r]) : hub->transport(r));
        ring.set_timing(true);
        ring.set_mask(AttnMask{doc_start.empty() ? nullptr : d_doc.ptr, c.window}, host_mask, s.B);
        ring.forward(*attn, d_out.ptr, d_lse.ptr, d_qkv.ptr, local, rb, st);
        ring.backward(*attn, d_dqkv.ptr, d_scratch.ptr, d_dout.ptr, d_qkv.ptr, d_out.ptr,
                      d_lse.ptr, local, rb, st);
        CUDA_CHECK(cudaStreamSynchronize(st));
        // One timed backend call per ring step each way, and waits only where there are hops.
        const RingStepTimes t = ring.take_times();
        EXPECT_EQ((int)t.fwd_ms.size(), N);
        EXPECT_EQ((int)t.bwd_ms.size(), N);
        // (A mask may empty every pair of a step: nothing runs in its interval.)
        for (int s = 0; s < (int)t.fwd_ms.size(); s++)
          EXPECT_TRUE(masked ? t.fwd_ms[s] >= 0.0 : t.fwd_ms[s] > 0.0) << "step " << s;
        for (int s = 0; s < (int)t.bwd_ms.size(); s++)
          EXPECT_TRUE(masked ? t.bwd_ms[s] >= 0.0 : t.bwd_ms[s] > 0.0) << "step " << s;
        EXPECT_GE(t.kv_wait_ms, 0.0);
        EXPECT_GE(t.dkv_wait_ms, 0.0);
        if (N == 1) EXPECT_EQ(t.wait_ms(), 0.0);
        EXPECT_TRUE(ring.take_times().fwd_ms.empty());  // read once
      }
      if (hub) {  // what this rank sent: the ring's hops, or (masks) only the blocks needed
        const CpCommBytes want =
            cp_comm_bytes(L, r, s.B, s.NKV, s.HS, sizeof(floatX), sizeof(float), &host_mask);
        EXPECT_EQ(hub->bytes_sent(r), want.forward + want.backward) << "rank " << r;
      }
      meet_once(2);  // every ring done before any rank frees
      CUDA_CHECK(cudaStreamDestroy(st));
      const std::vector<float> o_l = to_float(d_out.download()), dq_l = to_float(d_dqkv.download()),
                               l_l = d_lse.download();
      // Distinct rows per rank: the gathers do not overlap.
      cp_gather(out.data(), o_l.data(), L, r, s.B, ldo);
      cp_gather(dqkv.data(), dq_l.data(), L, r, s.B, QKV);
      cp_gather(lse.data(), l_l.data(), L, r, s.B * s.NH, 1);
    } catch (const std::exception& ex) {
      errors[r] = ex.what();
    }
    meet_once(2);
  };
  // Over NCCL a rank that throws mid-ring leaves its peer's kernel waiting forever, and the
  // peer's thread with it: the ranks get a deadline, past which the test prints what each rank
  // said and ends the process (a stuck thread cannot be joined) instead of hanging.
  std::mutex done_m;
  std::condition_variable done_cv;
  int done = 0;
  std::vector<std::thread> ranks;
  for (int r = 0; r < N; r++)
    ranks.emplace_back([&, r] {
      rank_main(r);
      std::lock_guard<std::mutex> lock(done_m);
      ++done;
      done_cv.notify_all();
    });
  {
    std::unique_lock<std::mutex> lock(done_m);
    if (!done_cv.wait_for(lock, std::chrono::seconds(kRankDeadlineS), [&] { return done == N; })) {
      std::fprintf(stderr, "[ FAILED   ] %s: %d of %d ranks still running after %d s (a rank that "
                   "failed mid-ring leaves its peer waiting); what the finished ranks said:\n",
                   ring_case_name(c).c_str(), N - done, N, kRankDeadlineS);
      for (int r = 0; r < N; r++)
        std::fprintf(stderr, "  rank %d: %s\n", r, errors[r].empty() ? "-" : errors[r].c_str());
      std::fflush(stderr);
      std::_Exit(1);
    }
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < N; r++) {
    if (!comms[r]) continue;
    CUDA_CHECK(cudaSetDevice(r));
    comms[r].reset();
  }
  hub.reset();
  for (int r = 0; r < N; r++) ASSERT_EQ(errors[r], "") << "rank " << r;
  CUDA_CHECK(cudaSetDevice(0));

  std::vector<float> out_ref(n_out), lse_ref(n_lse), dqkv_ref(n_qkv), out_b, dqkv_b;
  attention_flash_forward_ref<float>(out_ref.data(), lse_ref.data(), qkv.data(), s, 64, 64,
                                     host_mask);
  attention_flash_backward_ref<float>(dqkv_ref.data(), dout.data(), qkv.data(), out_ref.data(),
                                      lse_ref.data(), s, 64, 64, host_mask);
  const AttentionFloors floors = plain_bf16_attention(out_b, dqkv_b, qkv, dout, s, host_mask);

  std::printf("[ ring %s ] %s\n", nccl ? "nccl" : "local", ring_case_name(c).c_str());
  const int NH = s.NH, NKV = s.NKV;
  expect_calibrated("out", out, out_b, out_ref, floors.out);
  expect_calibrated("dQ", qkv_heads(dqkv, s, 0, NH), qkv_heads(dqkv_b, s, 0, NH),
                    qkv_heads(dqkv_ref, s, 0, NH), floors.dq);
  expect_calibrated("dK", qkv_heads(dqkv, s, NH, NH + NKV), qkv_heads(dqkv_b, s, NH, NH + NKV),
                    qkv_heads(dqkv_ref, s, NH, NH + NKV), floors.dk);
  expect_calibrated("dV", qkv_heads(dqkv, s, NH + NKV, NH + 2 * NKV),
                    qkv_heads(dqkv_b, s, NH + NKV, NH + 2 * NKV),
                    qkv_heads(dqkv_ref, s, NH + NKV, NH + 2 * NKV), floors.dv);
  const double mx = max_abs_error(lse, lse_ref);
  std::printf("  LSE max %.1e\n", mx);
  note_tolerance_share(mx, 2e-4);
  EXPECT_LE(mx, 2e-4) << "LSE max error (NaN: a row never written)";
}

// Ragged T everywhere but the first; T = 2 cp (one-token chunks); GQA and MQA; both head sizes;
// both backends with the hooks.
// flash3 runs its own TMA forward on each pair (three tensor maps per pair, the full pairs'
// ragged last K tile masked, the fp32 merge epilogue): the same shapes again for it.
const RingCase kRingCases[] = {
    {"flash", 2, 1, 256, 4, 4, 64},    {"flash", 2, 2, 517, 4, 2, 64},
    {"flash", 2, 1, 1000, 4, 1, 128},  {"flash", 2, 2, 4097, 2, 2, 128},
    {"flash3", 2, 1, 1031, 6, 2, 64},  {"flash", 2, 1, 4, 2, 2, 64},
    {"flash", 3, 2, 1001, 4, 2, 64},   {"flash", 3, 1, 6, 2, 1, 128},
    {"flash", 4, 1, 2051, 4, 4, 128},  {"flash3", 4, 2, 777, 4, 2, 64},
    {"flash3", 2, 1, 256, 4, 4, 64},   {"flash3", 2, 2, 517, 4, 2, 64},
    {"flash3", 2, 1, 1000, 4, 1, 128}, {"flash3", 2, 2, 4097, 2, 2, 128},
    {"flash3", 2, 1, 4, 2, 2, 64},     {"flash3", 3, 2, 1001, 4, 2, 64},
    {"flash3", 3, 1, 6, 2, 1, 128},    {"flash3", 4, 1, 2051, 4, 4, 128},
    // T 8200 at cp 2 (chunks of 2050): rank 1's full problem over both its Q chunks (4100
    // rows) runs flash3's HS 64 backward with dQ lagging a step (flash3_tiles.h kBwdDqLag), the
    // other pairs the step-by-step one.
    {"flash3", 2, 1, 8200, 2, 1, 64},
    // Masks (ring_attention.cuh: one problem per chunk pair the mask leaves, at global
    // positions): documents of mean 1 (every token its own: only the diagonal pairs run), 50,
    // 100, 300; windows of 1, 64, 256 and one longer than T; both together.
    {"flash", 2, 2, 1031, 4, 2, 64, 100, 0},   {"flash3", 2, 1, 2048, 4, 4, 128, 300, 0},
    {"flash", 3, 1, 1001, 4, 1, 64, 0, 64},    {"flash3", 4, 2, 2051, 4, 2, 64, 200, 256},
    {"flash", 4, 1, 1200, 2, 2, 128, 50, 1},   {"flash3", 3, 2, 777, 6, 2, 64, 1, 0},
    {"flash", 2, 1, 4096, 4, 4, 64, 0, 5000},  {"flash3", 2, 2, 517, 4, 2, 64, 40, 100},
    // Windows shorter than a chunk at cp 4: W - 1 rows of each rank's block go to its two
    // neighbours only (steps 1 and 3), step 2 exchanges nothing.
    {"flash3", 4, 1, 4099, 4, 2, 64, 0, 300},  {"flash", 4, 2, 1500, 2, 1, 128, 0, 100},
};
INSTANTIATE_TEST_SUITE_P(RingShapes, RingAttentionGpu, ::testing::ValuesIn(kRingCases),
                         [](const ::testing::TestParamInfo<RingCase>& i) {
                           return ring_case_name(i.param);
                         });

TEST(RingAttentionMisc, RefusesBackendsWithoutTheHooks) {
  // No GPU needed: the refusal comes before any launch.
  auto naive = make_attention("naive");
  EXPECT_FALSE(naive->supports_ring());
  if (sizeof(floatX) == 2) {
    EXPECT_TRUE(make_attention("flash")->supports_ring());
    EXPECT_TRUE(make_attention("flash3")->supports_ring());
  }
  try {
    AttnFwdProblem p{};
    naive->ring_forward(p, 0);
    ADD_FAILURE() << "naive ran a ring pair";
  } catch (const flashgpt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("--cp"), std::string::npos) << e.what();
  }
}

}  // namespace
