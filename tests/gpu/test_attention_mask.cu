// test_attention_mask — document masks and sliding windows (kernels/attention/mask.h) on every
// GPU attention backend whose spec runs them (spec.no_masks == nullptr), against the masked CPU
// oracle, so a backend that claims masks is tested the day it is registered.
//
//   AttentionMaskGpu/Whole.Matches/<case>   whole sequences, each mask-capable backend: out,
//       dQ, dK, dV; flash and flash3 also with --deterministic (bitwise equal over two runs)
//   AttentionMaskGpu/Pairs.Matches/<case>   the problem form (attention.cuh AttnFwdProblem,
//       AttnBwdProblem) of the backends with ring hooks: the sequence cut into chunks, every
//       (Q chunk, K chunk) pair one problem at its global positions (q_pos0, k_pos0; pairs
//       that the mask empties, and Q tiles that see none of a pair's keys, included), merged
//       into the running (O, LSE) and the fp32 dK/dV accumulators as the ring does
//   AttentionMaskGpu.Refusals                flash1 refuses masks with one line (no GPU needed)
//
// Cases: documents of length 1; boundaries on, and one row either side of, the tile edges
// (64, 128, 192 = flash3's Br at HS 64); one document spanning the window; a window that starts
// mid-document (the rows before the first end-of-text continue an earlier one); random
// documents; windows 1, 63-65, 127-129, 191-193 and larger than T, with and without documents;
// T 1, 17, 127, 1000, 4097; GQA; HS 64 and 128.
// Each case, on fresh random inputs (FLASHGPT_SEED=<n> repeats them):
//   * reference: attention_naive_{forward,backward}_ref<float> with the mask (double inside),
//     LSE from attention_flash_forward_ref; baseline: the plain bf16 attention with the mask
//     (plain_bf16_attention.h); the rule: expect_calibrated (tests/test_common.h), LSE max error
//     <= 2e-4 as in test_flash.cu;
//   * out, dqkv, saved and scratch (and every ring buffer) are filled with NaN first.
//
// Run (GPU machine): ./build/test_gpu --gtest_filter='AttentionMaskGpu*'
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention/attention.cuh"
#include "kernels/attention/attention_ref.h"
#include "kernels/attention/mask.h"
#include "tests/gpu/gpu_test.h"
#include "tests/gpu/plain_bf16_attention.h"

namespace {

constexpr int kEot = 3;  // the end-of-text id of the test tokens (any id: only where they are)

enum class Docs {
  kNone,     // no document mask (the window alone)
  kOne,      // one document spanning the window (no end-of-text)
  kLength1,  // every token an end-of-text: documents of one token
  kTiles,    // documents on the tile edges 128 and 192, then one row either side of 64, 192
  kMid,      // the window starts mid-document: the first end-of-text at T / 3
  kRandom,   // an end-of-text with probability 1/40 per token
};
const char* docs_name(Docs d) {
  switch (d) {
    case Docs::kNone: return "nodocs";
    case Docs::kOne: return "onedoc";
    case Docs::kLength1: return "len1";
    case Docs::kTiles: return "tileedges";
    case Docs::kMid: return "middoc";
    default: return "random";
  }
}

struct MaskCase {
  Docs docs;
  int window;
  AttnShape s;
};
std::string mask_case_name(const MaskCase& c) {
  return std::string(docs_name(c.docs)) + "_W" + std::to_string(c.window) + "_B" +
         std::to_string(c.s.B) + "_T" + std::to_string(c.s.T) + "_NH" + std::to_string(c.s.NH) +
         "_NKV" + std::to_string(c.s.NKV) + "_HS" + std::to_string(c.s.HS);
}

void PrintTo(const MaskCase& c, std::ostream* os) { *os << mask_case_name(c); }

// The tokens of the case (B, T) -> doc_start (B, T) (mask.h document_starts); empty for kNone.
std::vector<int> case_document_starts(const MaskCase& c, std::mt19937_64& rng) {
  if (c.docs == Docs::kNone) return {};
  const int B = c.s.B, T = c.s.T;
  std::vector<int> tok(size_t(B) * T, 0);
  std::bernoulli_distribution random_eot(1.0 / 40);
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      bool eot = false;
      switch (c.docs) {
        case Docs::kLength1: eot = true; break;
        case Docs::kTiles:  // first half: documents that fill tiles; then one row off them
          eot = t < T / 2 ? t % 128 == 0 || t % 192 == 0
                          : t % 64 == 1 || t % 64 == 63 || t % 192 == 191;
          break;
        case Docs::kMid: eot = t == T / 3 + b || (t > T / 3 + b && random_eot(rng)); break;
        case Docs::kRandom: eot = random_eot(rng); break;
        default: break;
      }
      tok[size_t(b) * T + t] = eot ? kEot : 0;
    }
  return document_starts(tok.data(), B, T, kEot);
}

// The oracle and the plain bf16 baseline of one case, on the inputs the GPU sees.
struct Reference {
  std::vector<float> qkv, dout;          // inputs (bf16-rounded)
  std::vector<int> doc_start;            // host (B, T), empty: no documents
  AttnMask host_mask;                    // over doc_start
  std::vector<float> out, dqkv, lse;     // oracle
  std::vector<float> bf_out, bf_dqkv;    // baseline
  AttentionFloors floors;
};
Reference make_reference(const MaskCase& c) {
  Reference r;
  random_attention_inputs(c.s, r.qkv, r.dout);
  std::mt19937_64 rng = test_rng();
  rng.discard(1000003);  // documents from another part of the stream than the inputs
  r.doc_start = case_document_starts(c, rng);
  r.host_mask = AttnMask{r.doc_start.empty() ? nullptr : r.doc_start.data(), c.window};
  const AttnShape s = c.s;
  const size_t n_qkv = r.qkv.size(), n_out = r.dout.size();
  std::vector<float> P(size_t(s.B) * s.NH * s.T * s.T);
  r.out.resize(n_out);
  r.dqkv.resize(n_qkv);
  r.lse.resize(size_t(s.B) * s.NH * s.T);
  attention_naive_forward_ref<float>(r.out.data(), P.data(), r.qkv.data(), s, r.host_mask);
  attention_naive_backward_ref<float>(r.dqkv.data(), r.dout.data(), r.qkv.data(), P.data(), s,
                                      r.host_mask);
  std::vector<float> flash_out(n_out);
  attention_flash_forward_ref<float>(flash_out.data(), r.lse.data(), r.qkv.data(), s, 64, 64,
                                     r.host_mask);
  r.floors = plain_bf16_attention(r.bf_out, r.bf_dqkv, r.qkv, r.dout, s, r.host_mask);
  return r;
}

// out, dQ, dK, dV of one result against the reference.
void expect_matches(const Reference& r, const AttnShape& s, const std::vector<float>& out,
                    const std::vector<float>& dqkv, const std::string& who) {
  const int NH = s.NH, NKV = s.NKV;
  expect_calibrated(who + " out", out, r.bf_out, r.out, r.floors.out);
  expect_calibrated(who + " dQ", qkv_heads(dqkv, s, 0, NH), qkv_heads(r.bf_dqkv, s, 0, NH),
                    qkv_heads(r.dqkv, s, 0, NH), r.floors.dq);
  expect_calibrated(who + " dK", qkv_heads(dqkv, s, NH, NH + NKV),
                    qkv_heads(r.bf_dqkv, s, NH, NH + NKV), qkv_heads(r.dqkv, s, NH, NH + NKV),
                    r.floors.dk);
  expect_calibrated(who + " dV", qkv_heads(dqkv, s, NH + NKV, NH + 2 * NKV),
                    qkv_heads(r.bf_dqkv, s, NH + NKV, NH + 2 * NKV),
                    qkv_heads(r.dqkv, s, NH + NKV, NH + 2 * NKV), r.floors.dv);
}

// The mask-capable backends of this build.
std::vector<std::string> mask_backends() {
  std::vector<std::string> names;
  MaskSpec doc;
  doc.kind = MaskKind::kDocument;
  for (const AttnBackendSpec& spec : attention_specs())
    if (attention_unsupported_reason(spec, {1, 64, 2, 2, 64}, sizeof(floatX), doc).empty())
      names.push_back(spec.name);
  return names;
}

// ---------------------------------------------------------------------------------------------
// Whole sequences through the AttentionBackend interface.

struct WholeRun {
  std::vector<floatX> out, dqkv;
};
WholeRun run_whole(const AttentionBackend& be, const Reference& r, const AttnShape& s,
                   bool deterministic) {
  DeviceBuffer<floatX> d_qkv(r.qkv.size()), d_dqkv(r.qkv.size()), d_out(r.dout.size()),
      d_dout(r.dout.size());
  DeviceBuffer<char> saved(be.saved_bytes(s)), scratch(be.scratch_bytes(s));
  DeviceBuffer<int> d_doc(std::max<size_t>(r.doc_start.size(), 1));
  d_qkv.upload(to_floatX(r.qkv));
  d_dout.upload(to_floatX(r.dout));
  if (!r.doc_start.empty()) d_doc.upload(r.doc_start);
  d_out.poison(), d_dqkv.poison(), saved.poison(), scratch.poison();
  const AttnMask mask{r.doc_start.empty() ? nullptr : d_doc.ptr, r.host_mask.window};
  be.forward({d_out.ptr, saved.ptr, scratch.ptr, d_qkv.ptr, s, mask}, 0);
  CUDA_CHECK(cudaDeviceSynchronize());
  scratch.poison();  // forward and backward share scratch; nothing may carry over
  be.backward({d_dqkv.ptr, scratch.ptr, d_dout.ptr, d_qkv.ptr, d_out.ptr, saved.ptr, s,
               deterministic, mask},
              0);
  CUDA_CHECK(cudaDeviceSynchronize());
  return {d_out.download(), d_dqkv.download()};
}

class Whole : public GpuTest, public ::testing::WithParamInterface<MaskCase> {};

TEST_P(Whole, Matches) {
  const MaskCase& c = GetParam();
  SEED_TRACE();
  const Reference r = make_reference(c);
  const std::vector<std::string> names = mask_backends();
  ASSERT_FALSE(names.empty());
  std::printf("[%s]\n", mask_case_name(c).c_str());
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    std::unique_ptr<AttentionBackend> be = make_attention(name);
    ASSERT_EQ(be->unsupported_reason(c.s, r.host_mask.spec()), "");
    const WholeRun run = run_whole(*be, r, c.s, false);
    expect_matches(r, c.s, to_float(run.out), to_float(run.dqkv), name);
    if (be->spec().deterministic_mode) {
      const WholeRun d1 = run_whole(*be, r, c.s, true), d2 = run_whole(*be, r, c.s, true);
      expect_matches(r, c.s, to_float(d1.out), to_float(d1.dqkv), name + " --deterministic");
      EXPECT_EQ(0, std::memcmp(d1.dqkv.data(), d2.dqkv.data(), d1.dqkv.size() * sizeof(floatX)))
          << "--deterministic with a mask: the backward is not bitwise reproducible";
    }
  }
}

std::vector<MaskCase> whole_cases() {
  std::vector<MaskCase> c;
  const AttnShape gqa64{2, 1000, 4, 2, 64}, gqa128{1, 1000, 4, 1, 128};
  // Documents alone: length 1, on and around the tile edges, one spanning, mid-document.
  c.push_back({Docs::kLength1, 0, {2, 127, 4, 2, 64}});
  c.push_back({Docs::kLength1, 0, {3, 17, 6, 3, 128}});
  c.push_back({Docs::kTiles, 0, gqa64});
  c.push_back({Docs::kTiles, 0, gqa128});
  c.push_back({Docs::kOne, 0, {1, 1000, 2, 2, 64}});
  c.push_back({Docs::kMid, 0, {2, 1000, 2, 2, 128}});
  c.push_back({Docs::kMid, 0, {3, 1, 2, 1, 64}});
  c.push_back({Docs::kRandom, 0, {1, 4097, 2, 1, 64}});
  // Windows alone: 1, the tile sizes +- 1 (flash's 64 and 128, flash3's 128 and 192), > T.
  for (int W : {1, 63, 64, 65, 127, 128, 129, 191, 192, 193})
    c.push_back({Docs::kNone, W, W % 2 ? gqa64 : gqa128});
  c.push_back({Docs::kNone, 1000, {2, 127, 3, 3, 64}});
  // Both: a window inside documents, one document longer than the window, ragged T.
  c.push_back({Docs::kRandom, 100, {2, 1000, 6, 3, 64}});
  c.push_back({Docs::kRandom, 5, {2, 17, 2, 2, 128}});
  c.push_back({Docs::kTiles, 192, gqa64});
  c.push_back({Docs::kOne, 64, gqa128});
  c.push_back({Docs::kMid, 300, {1, 4097, 2, 2, 128}});
  return c;
}
INSTANTIATE_TEST_SUITE_P(AttentionMaskGpu, Whole, ::testing::ValuesIn(whole_cases()),
                         [](const ::testing::TestParamInfo<MaskCase>& i) {
                           return mask_case_name(i.param);
                         });

// ---------------------------------------------------------------------------------------------
// The problem form: every (Q chunk, K chunk) pair of a sequence, at its global positions.

// Chunk boundaries of T (not multiples of 8 or of a tile): 0 = b0 < b1 < ... < T.
std::vector<int> chunk_bounds(int T) {
  std::vector<int> b = {0};
  for (int x : {T / 4 + 3, T / 2 + 1, (3 * T) / 4 - 5})
    if (x > b.back() && x < T) b.push_back(x);
  b.push_back(T);
  return b;
}

class Pairs : public GpuTest, public ::testing::WithParamInterface<MaskCase> {};

TEST_P(Pairs, Matches) {
  if (sizeof(floatX) != 2) GTEST_SKIP() << "the problem form is bf16 (the ring's kernels)";
  const MaskCase& c = GetParam();
  const AttnShape s = c.s;
  SEED_TRACE();
  const Reference r = make_reference(c);
  const std::vector<int> bounds = chunk_bounds(s.T);
  const int n = int(bounds.size()) - 1, NH = s.NH, NKV = s.NKV, HS = s.HS, B = s.B, T = s.T;
  const size_t ld = size_t(NH + 2 * NKV) * HS, ldo = size_t(NH) * HS, ldkv = size_t(NKV) * HS;
  const auto bf = [](const floatX* x) { return reinterpret_cast<const __nv_bfloat16*>(x); };
  std::printf("[%s] %d chunks\n", mask_case_name(c).c_str(), n);
  for (const std::string& name : mask_backends()) {
    std::unique_ptr<AttentionBackend> be = make_attention(name);
    if (!be->supports_ring()) continue;
    SCOPED_TRACE(name);
    DeviceBuffer<floatX> d_qkv(r.qkv.size()), d_dout(r.dout.size()), d_out(r.dout.size()),
        d_dqkv(r.qkv.size());
    DeviceBuffer<float> o_run(r.dout.size()), lse(r.lse.size()), dk(size_t(B) * T * ldkv),
        dv(size_t(B) * T * ldkv);
    DeviceBuffer<char> scratch(be->scratch_bytes(s));
    DeviceBuffer<int> d_doc(std::max<size_t>(r.doc_start.size(), 1));
    d_qkv.upload(to_floatX(r.qkv));
    d_dout.upload(to_floatX(r.dout));
    if (!r.doc_start.empty()) d_doc.upload(r.doc_start);
    o_run.poison(), lse.poison(), d_dqkv.poison(), scratch.poison();
    CUDA_CHECK(cudaMemset(dk.ptr, 0, dk.bytes()));
    CUDA_CHECK(cudaMemset(dv.ptr, 0, dv.bytes()));
    // What the forward and the backward problem of pair (Q chunk qc, K chunk kc) share: Q, K,
    // V in place in qkv, the shape, the mask at the chunks' global positions.
    auto set_pair = [&](auto& p, int qc, int kc) {
      p.mask = AttnMask{r.doc_start.empty() ? nullptr : d_doc.ptr, c.window};
      p.mask_T = T;
      p.q_pos0 = bounds[qc], p.k_pos0 = bounds[kc];
      p.q = bf(d_qkv.ptr) + size_t(p.q_pos0) * ld;
      p.k = bf(d_qkv.ptr) + size_t(p.k_pos0) * ld + size_t(NH) * HS;
      p.v = bf(d_qkv.ptr) + size_t(p.k_pos0) * ld + size_t(NH + NKV) * HS;
      p.q_ld = p.kv_ld = ld;
      p.q_bs = p.kv_bs = size_t(T) * ld;
      p.B = B, p.NH = NH, p.NKV = NKV, p.HS = HS;
      p.Tq = bounds[qc + 1] - bounds[qc], p.Tk = bounds[kc + 1] - bounds[kc];
      p.causal = qc == kc;  // (the mask replaces it)
    };
    // Forward: each Q chunk against every K chunk in order, the first overwriting.
    for (int qc = 0; qc < n; qc++)
      for (int kc = 0; kc < n; kc++) {
        AttnFwdProblem p{};
        set_pair(p, qc, kc);
        p.lse = lse.ptr + p.q_pos0;
        p.lse_T = T;
        p.o_run = o_run.ptr + size_t(p.q_pos0) * ldo;
        p.o_ld = ldo, p.o_bs = size_t(T) * ldo;
        p.merge = kc > 0;
        be->ring_forward(p, 0);
      }
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> out = o_run.download(), l = lse.download();
    // The backward from the merged LSE and the bf16 O (D = rowsum(dO o O)), as the ring does.
    d_out.upload(to_floatX(out));
    be->ring_backward_begin(scratch.ptr, d_dout.ptr, d_out.ptr, s, 0);
    for (int qc = 0; qc < n; qc++)
      for (int kc = 0; kc < n; kc++) {
        AttnBwdProblem p{};
        set_pair(p, qc, kc);
        p.dout = bf(d_dout.ptr) + size_t(p.q_pos0) * ldo;
        p.do_ld = ldo, p.do_bs = size_t(T) * ldo;
        p.lse = lse.ptr + p.q_pos0;
        p.D = be->ring_D(scratch.ptr, s) + p.q_pos0;
        p.lse_T = T;
        p.dq_accum = be->ring_dq_accum(scratch.ptr, s);
        p.dq_T = T, p.dq_row0 = p.q_pos0;
        p.dk_acc = dk.ptr + size_t(p.k_pos0) * ldkv;
        p.dv_acc = dv.ptr + size_t(p.k_pos0) * ldkv;
        p.dkv_ld = ldkv, p.dkv_bs = size_t(T) * ldkv;
        be->ring_backward(p, 0);
      }
    be->ring_backward_end(d_dqkv.ptr, scratch.ptr, s, 0);
    CUDA_CHECK(cudaDeviceSynchronize());
    // dqkv: dQ from the ring's conversion, dK and dV from the fp32 accumulators.
    std::vector<float> dqkv = to_float(d_dqkv.download());
    const std::vector<float> hk = dk.download(), hv = dv.download();
    for (size_t bt = 0; bt < size_t(B) * T; bt++)
      for (size_t e = 0; e < ldkv; e++) {
        dqkv[bt * ld + size_t(NH) * HS + e] = hk[bt * ldkv + e];
        dqkv[bt * ld + size_t(NH + NKV) * HS + e] = hv[bt * ldkv + e];
      }
    expect_matches(r, s, out, dqkv, name + " pairs");
    const double mx = max_abs_error(l, r.lse);
    std::printf("  %s pairs LSE max %.1e\n", name.c_str(), mx);
    note_tolerance_share(mx, 2e-4);
    EXPECT_LE(mx, 2e-4) << "LSE max error (NaN: a row never written)";
  }
}

std::vector<MaskCase> pair_cases() {
  return {
      {Docs::kRandom, 0, {2, 1031, 4, 2, 64}},   {Docs::kMid, 150, {1, 1031, 4, 1, 128}},
      {Docs::kNone, 129, {1, 777, 2, 2, 64}},    {Docs::kTiles, 0, {1, 777, 2, 2, 128}},
      {Docs::kLength1, 0, {1, 17, 2, 1, 64}},
  };
}
INSTANTIATE_TEST_SUITE_P(AttentionMaskGpu, Pairs, ::testing::ValuesIn(pair_cases()),
                         [](const ::testing::TestParamInfo<MaskCase>& i) {
                           return mask_case_name(i.param);
                         });

// No GPU needed: the refusal comes from the spec before any launch.
TEST(AttentionMaskGpu, Refusals) {
  MaskSpec doc;
  doc.kind = MaskKind::kDocument;
  const std::vector<std::string> names = mask_backends();
  for (const std::string& n : attention_names()) {
    const std::string why = make_attention(n)->unsupported_reason({1, 64, 2, 2, 64}, doc);
    if (std::find(names.begin(), names.end(), n) != names.end()) continue;
    EXPECT_FALSE(why.empty()) << n;
    EXPECT_EQ(why.find('\n'), std::string::npos) << n << ": one line";
  }
  if (sizeof(floatX) == 2) {
    EXPECT_NE(std::find(names.begin(), names.end(), "flash3"), names.end());
    EXPECT_NE(std::find(names.begin(), names.end(), "flash"), names.end());
  }
  EXPECT_NE(std::find(names.begin(), names.end(), "naive"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "scalar"), names.end());
  EXPECT_EQ(std::find(names.begin(), names.end(), "flash1"), names.end());
}

}  // namespace
