// test_model_mask — the CPU model (model/gpt_cpu) under --mask document and --window
// (ModelOptions.mask, kernels/attention/mask.h). Windows of T = 80 rows span three of the CPU
// flash backend's 32-row tiles, so EMPTY, PARTIAL and FULL tiles all occur.
//
//   ModelMask.HidingNothingIsCausal       no EOT in the window (document mask) or a window >= T:
//                                         logits, loss and gradients bit for bit the causal ones
//   ModelMask.DocumentsDoNotSeeEachOther  EOTs at rows p1, p2: rows before p1 equal the causal
//                                         model's, later rows differ from them; and a document's
//                                         rows do not change, bit for bit, when the tokens of
//                                         the other documents change (positions stay the window's)
//   ModelMask.PackedEqualsEachAlone       RoPE model in double: the loss and logits of documents
//                                         packed under the document mask equal those of each
//                                         document run alone from position 0 (RoPE sees relative
//                                         positions only)
//   ModelMask.WindowBoundsTheContext      window W, L layers: row t does not change when tokens
//                                         before t - L(W-1) change, and does when the token at
//                                         t - L(W-1) changes
//   ModelMask.KvCacheFollowsTheMask       prefill + decode under the document mask and windows
//                                         (a ring of W cache rows, EOTs in the prompt and in
//                                         the decoded tokens) equal the masked forward's last
//                                         row at every step; RoPE past the trained length
// The finite-difference checks of the masked model are in test_model.cpp (ModelGradients).
// Run: build/test_cpu --gtest_filter='ModelMask*'
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/common.h"
#include "kernels/rng.h"
#include "model/gpt_cpu.h"

namespace {

constexpr int kT = 80;

GPTConfig mask_config(bool rope) {
  GPTConfig c;
  c.max_seq_len = kT;
  c.vocab_size = 50;  // EOT = 49
  c.padded_vocab_size = pad_vocab(50);
  c.num_layers = 2;
  c.num_heads = 2;
  c.num_kv_heads = 2;
  c.channels = 16;
  c.rope = rope;
  return c;
}

int eot(const GPTConfig& c) { return c.vocab_size - 1; }

// Random tokens that are never EOT.
std::vector<int> text_tokens(size_t n, const GPTConfig& c, uint64_t seed) {
  Rng rng(seed);
  std::vector<int> v(n);
  for (int& t : v) t = int(rng.next_u64() % uint64_t(eot(c)));
  return v;
}

// Parameters moved well off GPT-2's small init (the same for every model of a test), so that
// one token's influence on a distant row is far above float rounding.
template <typename real>
void perturb(GptCpu<real>& m) {
  Rng rng(9);
  for (real& p : m.params) p += real(0.2 * rng.normal());
}

ModelOptions options(const GPTConfig& c, int B, int T, MaskSpec mask,
                     const std::string& attn = "flash") {
  ModelOptions mo;
  mo.config = c;
  mo.B = B, mo.T = T;
  mo.attn = attn, mo.mask = mask;
  return mo;
}

// Logits of every row of batch row 0 after a forward of `in` (1, T).
template <typename real>
std::vector<std::vector<float>> all_logits(GptCpu<real>& m, const std::vector<int>& in) {
  const int T = int(in.size());
  m.forward(in.data(), nullptr, 1, T);
  std::vector<std::vector<float>> out(T, std::vector<float>(m.config().padded_vocab_size));
  for (int t = 0; t < T; t++) m.logits_at(t, out[t].data());
  return out;
}

const MaskSpec kCausal{};
const MaskSpec kDocument{MaskKind::kDocument, 0, -1};

TEST(ModelMask, HidingNothingIsCausal) {
  const GPTConfig c = mask_config(false);
  const int B = 2;
  const std::vector<int> in = text_tokens(B * kT, c, 1), tg = text_tokens(B * kT, c, 2);
  for (const std::string attn : {"flash", "naive", "flash1"}) {
    GptCpu<float> causal(options(c, B, kT, kCausal, attn));
    causal.zero_grad();
    const float loss = causal.forward(in.data(), tg.data(), B, kT);
    causal.backward(1.0f);
    for (const MaskSpec& m : {kDocument, MaskSpec{MaskKind::kCausal, kT, -1},
                              MaskSpec{MaskKind::kDocument, kT + 5, -1}}) {
      SCOPED_TRACE(attn + " " + describe_mask(m));
      GptCpu<float> masked(options(c, B, kT, m, attn));
      masked.zero_grad();
      EXPECT_EQ(masked.forward(in.data(), tg.data(), B, kT), loss);
      masked.backward(1.0f);
      EXPECT_EQ(masked.grads, causal.grads);
    }
  }
}

TEST(ModelMask, DocumentsDoNotSeeEachOther) {
  const GPTConfig c = mask_config(false);  // learned positions
  const int p1 = 29, p2 = 61;              // documents [0, 29), [29, 61), [61, 80)
  std::vector<int> in = text_tokens(kT, c, 3);
  in[p1] = in[p2] = eot(c);
  GptCpu<float> causal(options(c, 1, kT, kCausal)), doc(options(c, 1, kT, kDocument));
  perturb(causal);
  perturb(doc);
  const auto lc = all_logits(causal, in), ld = all_logits(doc, in);
  for (int t = 0; t < kT; t++) {
    if (t < p1) EXPECT_EQ(ld[t], lc[t]) << "row " << t << ": the first document is causal";
    else EXPECT_NE(ld[t], lc[t]) << "row " << t << " sees across its document's start";
  }
  // Change each document's tokens in turn: the other documents' rows stay bit for bit.
  const int starts[] = {0, p1, p2, kT};
  for (int d = 0; d < 3; d++) {
    std::vector<int> other = in;
    const std::vector<int> fresh = text_tokens(kT, c, 10 + d);
    for (int t = starts[d] + (d > 0); t < starts[d + 1]; t++) other[t] = fresh[t];  // keep EOT
    const auto lo = all_logits(doc, other);
    for (int t = 0; t < kT; t++) {
      const bool same_doc = t >= starts[d] && t < starts[d + 1];
      if (same_doc) continue;
      EXPECT_EQ(lo[t], ld[t]) << "row " << t << " changed with document " << d << "'s tokens";
    }
    EXPECT_NE(lo[starts[d + 1] - 1], ld[starts[d + 1] - 1]) << "document " << d << " unchanged";
  }
}

TEST(ModelMask, PackedEqualsEachAlone) {
  const GPTConfig c = mask_config(true);  // RoPE: no position table
  const int p = 37;                       // documents [0, 37) and [37, 80)
  std::vector<int> in = text_tokens(kT, c, 4), tg = text_tokens(kT, c, 5);
  in[0] = in[p] = eot(c);
  tg[p - 1] = eot(c);  // the first document's last row predicts the next EOT, as in a shard
  GptCpu<double> packed(options(c, 1, kT, kDocument)), alone(options(c, 1, kT, kCausal));
  perturb(packed);
  perturb(alone);
  packed.forward(in.data(), tg.data(), 1, kT);
  const double loss_packed = packed.last_loss();
  std::vector<std::vector<float>> lp(kT, std::vector<float>(c.padded_vocab_size));
  for (int t = 0; t < kT; t++) packed.logits_at(t, lp[t].data());
  double sum = 0, worst = 0;
  const int starts[] = {0, p, kT};
  for (int d = 0; d < 2; d++) {
    const int n = starts[d + 1] - starts[d];
    alone.forward(in.data() + starts[d], tg.data() + starts[d], 1, n);
    sum += alone.last_loss() * n;
    std::vector<float> la(c.padded_vocab_size);
    for (int t = 0; t < n; t++) {
      alone.logits_at(t, la.data());
      for (size_t v = 0; v < la.size(); v++)
        worst = std::max(worst, std::fabs(double(la[v]) - lp[starts[d] + t][v]));
    }
  }
  const double rel = std::fabs(loss_packed - sum / kT) / (sum / kT);
  std::printf("  packed loss %.15f, documents alone %.15f: relative difference %.1e (tol 1e-12); "
              "largest logit difference %.1e (tol 1e-5: logits_at rounds to float)\n",
              loss_packed, sum / kT, rel, worst);
  EXPECT_LE(rel, 1e-12);
  EXPECT_LE(worst, 1e-5);
}

TEST(ModelMask, WindowBoundsTheContext) {
  const GPTConfig c = mask_config(false);
  for (const MaskSpec& m :
       {MaskSpec{MaskKind::kCausal, 7, -1}, MaskSpec{MaskKind::kDocument, 33, -1}}) {
    SCOPED_TRACE(describe_mask(m));
    GptCpu<float> model(options(c, 1, kT, m));
    perturb(model);
    const std::vector<int> in = text_tokens(kT, c, 6);
    const auto base = all_logits(model, in);
    const int t = kT - 1, reach = c.num_layers * (m.window - 1);  // row t sees rows >= t - reach
    std::vector<int> far = in, near = in;
    const std::vector<int> fresh = text_tokens(kT, c, 7);
    for (int u = 0; u < t - reach; u++) far[u] = fresh[u];
    near[t - reach] = (in[t - reach] + 1) % eot(c);
    EXPECT_EQ(all_logits(model, far)[t], base[t]) << "row " << t << " sees beyond its window";
    EXPECT_NE(all_logits(model, near)[t], base[t]) << "row " << t << " misses row " << t - reach;
  }
}

// Generation under the mask: prefill a prompt, then decode tokens one at a time (EOTs among
// them start new documents); at every step the decoded logits equal the last row of a forward
// over the whole sequence so far under the same mask. With a window W the cache is a ring of W
// rows, so the sequence runs far past the cache (and, for RoPE, past the trained length);
// learned positions stop at max_seq_len (can_decode). In double: the cache path and the tiled
// forward differ only in the order of their sums.
TEST(ModelMask, KvCacheFollowsTheMask) {
  struct Case {
    bool rope;
    MaskSpec mask;
    int slots, total;  // KV cache rows; positions generated in all
  };
  for (const Case& k : {Case{true, MaskSpec{MaskKind::kDocument, 8, -1}, 8, 2 * kT},
                        Case{true, MaskSpec{MaskKind::kCausal, 5, -1}, 5, 60},
                        Case{false, MaskSpec{MaskKind::kDocument, 8, -1}, 8, kT},
                        Case{false, kDocument, kT, kT}}) {
    const GPTConfig c = mask_config(k.rope);
    SCOPED_TRACE(std::string(k.rope ? "rope " : "learned ") + describe_mask(k.mask));
    const int P = 12;
    std::vector<int> seq = text_tokens(k.total, c, 11);
    for (int t : {5, 13, 14, 30, 31 + k.mask.window, k.total - 3}) seq[t] = eot(c);  // EOTs
    ModelOptions full_opt = options(c, 1, k.total, k.mask);
    full_opt.config.max_seq_len = std::max(c.max_seq_len, k.total);  // RoPE: no table to outgrow
    ModelOptions cached_opt = options(c, 1, P, k.mask);
    cached_opt.kv_cache = k.slots;
    GptCpu<double> full(full_opt), cached(cached_opt);
    perturb(full);
    cached.params = full.params;
    std::vector<float> got(c.padded_vocab_size), want(c.padded_vocab_size);
    cached.prefill(seq.data(), P, got.data());
    double worst = 0;
    for (int n = P;; n++) {  // n positions in the cache; got: the logits of position n - 1
      full.forward(seq.data(), nullptr, 1, n);
      full.logits_at(n - 1, want.data());
      for (int v = 0; v < c.vocab_size; v++) worst = std::max(worst, std::fabs(double(got[v]) - want[v]));
      if (n == k.total) break;
      ASSERT_TRUE(cached.can_decode()) << "position " << n;
      cached.decode(seq[n], got.data());
    }
    EXPECT_LE(worst, 1e-6) << "decoded logits differ from the masked forward's";
    EXPECT_EQ(cached.cached_positions(), k.total);
    // Learned positions end at max_seq_len; a ring of RoPE positions goes on.
    EXPECT_EQ(cached.can_decode(), k.rope) << "after " << k.total << " positions";
    std::printf("  %s %s, %d cache rows, %d positions: max |decoded - forward| logit %.1e\n",
                k.rope ? "rope" : "learned", describe_mask(k.mask).c_str(), k.slots, k.total,
                worst);
  }
  // A bad window or end-of-text token is refused when the model is made.
  const GPTConfig c = mask_config(false);
  EXPECT_THROW(GptCpu<float>(options(c, 1, kT, MaskSpec{MaskKind::kCausal, -1, -1})),
               flashgpt::Error);
  EXPECT_THROW(GptCpu<float>(options(c, 1, kT, MaskSpec{MaskKind::kDocument, 0, 50})),
               flashgpt::Error);
}

}  // namespace
