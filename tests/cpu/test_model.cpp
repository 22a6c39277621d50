// Whole-model checks of the CPU reference GPT-2 (model/gpt_cpu.cpp):
//  - every parameter gradient against central finite differences, in double;
//  - naive and flash attention give the same loss and gradients (float);
//  - init is deterministic and follows the GPT-2 recipe;
//  - RoPE models: finite differences too, and no wpe;
//  - --recompute modes: what each forgets, and gradients equal to none's bit for bit;
//  - the KV cache (prefill + decode) gives the logits and tokens of full recomputation;
//  - sampling past the window (1-token prompt, prompt longer than the window, 3x the window).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "kernels/common.h"
#include "model/gpt_cpu.h"
#include "kernels/rng.h"
#include "train/sample.h"

namespace {

GPTConfig tiny_config() {
  GPTConfig c;
  c.max_seq_len = 8;
  c.vocab_size = 13;
  c.padded_vocab_size = pad_vocab(13);
  c.num_layers = 2;
  c.num_heads = 2;
  c.num_kv_heads = 2;
  c.channels = 8;
  return c;
}

void random_tokens(std::vector<int>& v, int V, uint64_t seed) {
  Rng rng(seed);
  for (int& t : v) t = (int)(rng.next_u64() % V);
}

// Compares analytic gradients of the mean loss with central differences on every parameter
// of every tensor (the model is small enough), reporting the worst relative error per tensor.
void check_model_gradients(const std::string& attn, int NKV, bool rope = false,
                           Recompute recompute = Recompute::kNone, MaskSpec mask = {}) {
  GPTConfig c = tiny_config();
  c.num_kv_heads = NKV;
  c.rope = rope;
  const int B = 2, T = 7;
  ModelOptions mo;
  mo.config = c;
  mo.B = B;
  mo.T = T;
  mo.attn = attn;
  mo.recompute = recompute;
  mo.mask = mask;
  GptCpu<double> model(mo);
  // Non-trivial LayerNorm/bias values so every path carries gradient.
  Rng rng(7);
  for (double& p : model.params) p += 0.05 * rng.normal();
  std::vector<int> in(B * T), tg(B * T);
  random_tokens(in, c.vocab_size, 1);
  random_tokens(tg, c.vocab_size, 2);
  if (mask.kind == MaskKind::kDocument)  // documents that start mid-window in each row
    in[2] = in[T + 4] = mask.eot_token(c.vocab_size);
  model.zero_grad();
  model.forward(in.data(), tg.data(), B, T);
  model.backward(1.0f);
  std::vector<double> analytic = model.grads;
  const double eps = 1e-5;
  const ParamLayout& lay = model.layout();
  for (int i = 0; i < kNumParamTensors; i++) {
    double worst = 0, norm_ref = 0, norm_diff = 0;
    for (size_t k = 0; k < lay.sizes[i]; k++) {
      size_t idx = lay.offsets[i] + k;
      // Padded vocabulary rows of wte and unused position rows have zero gradient by
      // construction; differences there are checked too (they must be 0).
      double save = model.params[idx];
      model.params[idx] = save + eps;
      model.forward(in.data(), tg.data(), B, T);
      double lp = model.last_loss();
      model.params[idx] = save - eps;
      model.forward(in.data(), tg.data(), B, T);
      double lm = model.last_loss();
      model.params[idx] = save;
      double fd = (lp - lm) / (2 * eps);
      double d = std::fabs(fd - analytic[idx]);
      worst = std::max(worst, d);
      norm_ref += fd * fd;
      norm_diff += d * d;
    }
    double rel = std::sqrt(norm_diff) / std::max(std::sqrt(norm_ref), 1e-12);
    std::printf("  %-9s max |fd - analytic| %.2e, relative L2 %.2e (tolerance 1e-6)\n",
                ParamLayout::name(i), worst, rel);
    EXPECT_LT(rel, 1e-6) << "tensor " << ParamLayout::name(i);
    EXPECT_LT(worst, 1e-7) << "tensor " << ParamLayout::name(i);
  }
}

}  // namespace

TEST(ModelGradients, FiniteDifferencesNaiveAttention) { check_model_gradients("naive", 2); }
TEST(ModelGradients, FiniteDifferencesFlashAttention) { check_model_gradients("flash", 2); }
TEST(ModelGradients, FiniteDifferencesMultiQuery) { check_model_gradients("flash", 1); }
TEST(ModelGradients, FiniteDifferencesRope) { check_model_gradients("flash", 1, true); }
TEST(ModelGradients, FiniteDifferencesRopeNaive) { check_model_gradients("naive", 2, true); }
// Under the document mask (with a window of 3), and through recompute with RoPE.
TEST(ModelGradients, FiniteDifferencesDocumentMaskWindow) {
  check_model_gradients("flash", 1, false, Recompute::kNone, {MaskKind::kDocument, 3, -1});
}
TEST(ModelGradients, FiniteDifferencesDocumentMaskRecomputeNaive) {
  check_model_gradients("naive", 2, true, Recompute::kLayer, {MaskKind::kDocument, 0, -1});
}
// Through a recompute mode's backward (model/recompute.h): the whole block remade from its input.
TEST(ModelGradients, FiniteDifferencesRecomputeLayer) {
  check_model_gradients("flash", 1, true, Recompute::kLayer);
}
// Around attention: ln1, qkv, RoPE and the MLP side remade, attention's backward on the kept
// output and LSE (flash) or P (naive).
TEST(ModelGradients, FiniteDifferencesRecomputeLayerButAttn) {
  check_model_gradients("flash", 1, true, Recompute::kLayerButAttn);
}
TEST(ModelGradients, FiniteDifferencesRecomputeLayerButAttnNaive) {
  check_model_gradients("naive", 2, false, Recompute::kLayerButAttn);
}

namespace {

// One forward + backward(0.5) of a fresh model, at a batch smaller than its allocation.
struct CpuStep {
  float loss;
  std::vector<float> grads;
};
CpuStep cpu_step(const ModelOptions& mo, const std::vector<int>& in, const std::vector<int>& tg,
                 int B, int T) {
  GptCpu<float> m(mo);
  CpuStep r;
  m.zero_grad();
  r.loss = m.forward(in.data(), tg.data(), B, T);
  m.backward(0.5f);
  r.grads = m.grads;
  return r;
}

const Recompute kRecomputeModes[] = {Recompute::kGelu, Recompute::kLayerButAttn, Recompute::kLayer};

}  // namespace

// --recompute: the CPU model forgets (NaN) what a mode does not keep and recomputes it in the
// backward with the same ops on the same inputs, so the loss and every gradient equal none's bit
// for bit (tolerance 0), with every CPU backend, learned and rotary positions, grouped-query
// attention, and a batch smaller than the model's allocation.
TEST(ModelRecompute, GradientsEqualNone) {
  for (const std::string& attn : cpu_attention_names())
    for (bool rope : {false, true}) {
      SCOPED_TRACE(attn + (rope ? " rope" : " learned"));
      ModelOptions mo;
      mo.config = tiny_config();
      mo.config.num_layers = 3;
      mo.config.num_kv_heads = 1;
      mo.config.rope = rope;
      mo.B = 3;
      mo.T = 8;
      mo.attn = attn;
      const int B = 2, T = 7;
      std::vector<int> in(B * T), tg(B * T);
      random_tokens(in, mo.config.vocab_size, 21);
      random_tokens(tg, mo.config.vocab_size, 22);
      const CpuStep none = cpu_step(mo, in, tg, B, T);
      for (Recompute r : kRecomputeModes) {
        mo.recompute = r;
        const CpuStep got = cpu_step(mo, in, tg, B, T);
        EXPECT_EQ(got.loss, none.loss) << recompute_name(r);
        EXPECT_TRUE(got.grads == none.grads) << recompute_name(r) << ": gradients differ from none";
      }
    }
}

// What each mode forgets after a forward with targets, in every layer but the last (the
// recompute.h table): NaN where it does not keep, values where it does. Without this the test
// above could pass with nothing forgotten and nothing recomputed.
TEST(ModelRecompute, ForgetsWhatItDoesNotKeep) {
  ModelOptions mo;
  mo.config = tiny_config();
  mo.config.num_layers = 3;
  mo.B = 2;
  mo.T = 7;
  mo.attn = "flash";
  std::vector<int> in(14), tg(14);
  random_tokens(in, mo.config.vocab_size, 23);
  random_tokens(tg, mo.config.vocab_size, 24);
  for (Recompute r : {Recompute::kNone, Recompute::kGelu, Recompute::kLayerButAttn,
                      Recompute::kLayer}) {
    SCOPED_TRACE(recompute_name(r));
    mo.recompute = r;
    GptCpu<float> m(mo);
    m.forward(in.data(), tg.data(), mo.B, mo.T);
    const RecomputeDepths d = recompute_depths(r, 3);
    for (int l = 0; l < 3; l++) {
      const auto a = m.acts(l);
      const bool last = l == 2;
      EXPECT_EQ(std::isnan(a.ln1[0]), !last && d.acts < 3) << "ln1 of layer " << l;
      EXPECT_EQ(std::isnan(a.qkv[0]), !last && d.acts < 3) << "qkv of layer " << l;
      EXPECT_EQ(std::isnan(a.fch[0]), !last && d.acts < 3) << "fch of layer " << l;
      EXPECT_EQ(std::isnan(a.atty[0]), !last && d.attn < 3) << "atty of layer " << l;
      EXPECT_EQ(std::isnan(a.att_saved[0]), !last && d.attn < 3) << "LSE of layer " << l;
      EXPECT_EQ(std::isnan(a.fch_gelu[0]), !last && d.fch_gelu < 3) << "fch_gelu of layer " << l;
      EXPECT_FALSE(std::isnan(a.residual3[0])) << "residual3 of layer " << l;  // always kept
    }
    m.forward(in.data(), nullptr, mo.B, mo.T);  // without targets (eval, prefill): all kept
    EXPECT_FALSE(std::isnan(m.acts(0).ln1[0]));
  }
}

TEST(Model, RopeHasNoPositionTable) {
  GPTConfig c = tiny_config();
  ParamLayout learned(c);
  c.rope = 1;
  ParamLayout rope(c);
  EXPECT_EQ(rope.sizes[P_WPE], 0u);
  EXPECT_EQ(learned.total - rope.total, (size_t)c.max_seq_len * c.channels);
}

namespace {

GPTConfig decode_config(bool rope, int NKV) {
  GPTConfig c = tiny_config();
  c.max_seq_len = 40;
  c.vocab_size = 50;
  c.padded_vocab_size = pad_vocab(50);
  c.channels = 32;
  c.num_heads = 4;
  c.num_kv_heads = NKV;
  c.rope = rope;
  return c;
}

// Logits of prefill + decode against a full forward over the same tokens, at every position.
void check_kv_cache_logits(bool rope, int NKV) {
  SCOPED_TRACE(std::string(rope ? "rope" : "learned") + " NKV=" + std::to_string(NKV));
  ModelOptions mo;
  mo.config = decode_config(rope, NKV);
  mo.B = 1;
  mo.T = 40;
  mo.attn = "flash";
  mo.kv_cache = 40;
  GptCpu<float> cached(mo), full(mo);
  Rng rng(11);
  for (float& p : cached.params) p += 0.05f * (float)rng.normal();
  full.params = cached.params;
  const int Vp = mo.config.padded_vocab_size, prompt = 9, total = 40;
  std::vector<int> toks(total);
  random_tokens(toks, mo.config.vocab_size, 5);
  std::vector<float> a(Vp), b(Vp);
  double worst = 0;
  for (int n = prompt; n <= total; n++) {
    if (n == prompt) cached.prefill(toks.data(), n, a.data());
    else cached.decode(toks[n - 1], a.data());
    full.forward(toks.data(), nullptr, 1, n);
    full.logits_at(n - 1, b.data());
    double d = 0, r = 0;
    for (int v = 0; v < Vp; v++) {
      d += (double)(a[v] - b[v]) * (a[v] - b[v]);
      r += (double)b[v] * b[v];
    }
    worst = std::max(worst, std::sqrt(d / r));
  }
  EXPECT_EQ(cached.cached_positions(), total);
  std::printf("  KV cache vs full forward, positions %d..%d: worst logits relative L2 %.2e "
              "(tolerance 1e-5)\n", prompt, total - 1, worst);
  EXPECT_LT(worst, 1e-5);
  EXPECT_THROW(cached.decode(toks[0], a.data()), flashgpt::Error);  // the cache is full
}

}  // namespace

TEST(KvCache, LogitsMatchFullForwardLearned) { check_kv_cache_logits(false, 4); }
TEST(KvCache, LogitsMatchFullForwardRopeGqa) { check_kv_cache_logits(true, 2); }

TEST(KvCache, SamplingGivesTheSameTokensAsRecompute) {
  for (bool rope : {false, true}) {
    ModelOptions mo;
    mo.config = decode_config(rope, 2);
    mo.B = 1;
    mo.T = 40;
    mo.attn = "flash";
    mo.kv_cache = 40;
    GptCpu<float> m(mo);
    Rng rng(12);
    for (float& p : m.params) p += 0.2f * (float)rng.normal();  // peakier logits
    const std::vector<int> prompt = {3, 1, 4, 1, 5};
    for (float temperature : {0.0f, 1.0f}) {
      std::vector<int> a = generate(m, prompt, 30, temperature, 0, 77, 40);
      std::vector<int> b = generate_kv(m, prompt, 30, temperature, 0, 77, 40);
      EXPECT_EQ(a, b) << (rope ? "rope" : "learned") << " temperature " << temperature;
    }
  }
}

TEST(Model, NaiveAndFlashAgree) {
  GPTConfig c = tiny_config();
  c.max_seq_len = 40;
  c.vocab_size = 50;
  c.padded_vocab_size = pad_vocab(50);
  c.channels = 32;
  c.num_heads = c.num_kv_heads = 4;
  const int B = 3, T = 37;
  ModelOptions mo;
  mo.config = c;
  mo.B = B;
  mo.T = T;
  mo.attn = "naive";
  GptCpu<float> naive(mo);
  mo.attn = "flash";
  GptCpu<float> flash(mo);
  std::vector<int> in(B * T), tg(B * T);
  random_tokens(in, c.vocab_size, 3);
  random_tokens(tg, c.vocab_size, 4);
  naive.zero_grad();
  flash.zero_grad();
  float ln = naive.forward(in.data(), tg.data(), B, T);
  float lf = flash.forward(in.data(), tg.data(), B, T);
  EXPECT_NEAR(ln, lf, 1e-5 * ln);
  naive.backward(1.0f);
  flash.backward(1.0f);
  double diff = 0, ref = 0;
  for (size_t i = 0; i < naive.grads.size(); i++) {
    diff += (double)(naive.grads[i] - flash.grads[i]) * (naive.grads[i] - flash.grads[i]);
    ref += (double)naive.grads[i] * naive.grads[i];
  }
  double rel = std::sqrt(diff / ref);
  std::printf("  naive vs flash: loss %.7f vs %.7f, gradient relative L2 %.2e (tolerance 1e-5)\n",
              ln, lf, rel);
  EXPECT_LT(rel, 1e-5);
  EXPECT_GT(ref, 0);
}

TEST(Model, InitIsDeterministicAndGpt2Style) {
  GPTConfig c = tiny_config();
  std::vector<float> a = gpt_init_params(c, 42), b = gpt_init_params(c, 42), d = gpt_init_params(c, 43);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, d);
  ParamLayout lay(c);
  for (size_t k = 0; k < lay.sizes[P_LN1W]; k++) EXPECT_EQ(a[lay.offsets[P_LN1W] + k], 1.0f);
  for (size_t k = 0; k < lay.sizes[P_QKVB]; k++) EXPECT_EQ(a[lay.offsets[P_QKVB] + k], 0.0f);
  // padded vocabulary rows stay zero
  for (size_t k = (size_t)c.vocab_size * c.channels; k < lay.sizes[P_WTE]; k++)
    EXPECT_EQ(a[lay.offsets[P_WTE] + k], 0.0f);
  // residual projections use std 0.02/sqrt(2L): check the sample std of a bigger model
  GPTConfig big = c;
  big.channels = 64;
  big.num_heads = big.num_kv_heads = 4;
  std::vector<float> p = gpt_init_params(big, 1);
  ParamLayout bl(big);
  auto sd = [&](int i) {
    double s = 0;
    for (size_t k = 0; k < bl.sizes[i]; k++) s += (double)p[bl.offsets[i] + k] * p[bl.offsets[i] + k];
    return std::sqrt(s / bl.sizes[i]);
  };
  EXPECT_NEAR(sd(P_FCW), 0.02, 0.001);
  EXPECT_NEAR(sd(P_FCPROJW), 0.02 / std::sqrt(2.0 * big.num_layers), 0.001);
}

TEST(Model, RejectsTokensOutsideVocabulary) {
  GPTConfig c = tiny_config();
  ModelOptions mo;
  mo.config = c;
  mo.B = 1;
  mo.T = 4;
  GptCpu<float> m(mo);
  std::vector<int> in = {1, 2, 13, 0}, tg = {1, 1, 1, 1};
  EXPECT_THROW(m.forward(in.data(), tg.data(), 1, 4), flashgpt::Error);
}

// ---- sampling past the window (train/sample.h) ----
// The window rule, written out here independently of sample.cpp: generate() draws each token
// from the last min(len, W) tokens; generate_kv() starts from the prompt's last min(P, W)
// tokens, grows its context by one per token, and when it already holds W tokens restarts
// from the last W/2 (at least 1). The reference runs a plain full forward over that context.
namespace {

std::vector<int> reference_generate(Model& full, const std::vector<int>& prompt, int n_new,
                                    float temperature, uint64_t seed, int W, bool kv_rule) {
  const int Vp = full.config().padded_vocab_size, V = full.config().vocab_size;
  std::vector<int> toks = prompt;
  std::vector<float> logits(Vp);
  Rng rng(seed);
  size_t ctx = std::min(prompt.size(), (size_t)W);
  for (int i = 0; i < n_new; i++) {
    if (!kv_rule) ctx = std::min(toks.size(), (size_t)W);
    full.forward(toks.data() + toks.size() - ctx, nullptr, 1, (int)ctx);
    full.logits_at((int)ctx - 1, logits.data());
    toks.push_back(sample_from_logits(logits.data(), V, temperature, 0, rng));
    if (kv_rule) ctx = ctx < (size_t)W ? ctx + 1 : std::max(1, W / 2);
  }
  return std::vector<int>(toks.begin() + prompt.size(), toks.end());
}

void check_sampling_past_window(bool rope, int W) {
  GPTConfig c = decode_config(rope, 2);
  c.max_seq_len = W;
  std::vector<float> params = gpt_init_params(c, 3);
  Rng noise(13);
  for (float& p : params) p += 0.2f * (float)noise.normal();  // peaky logits: no near ties
  ModelOptions full_opt;
  full_opt.config = c;
  full_opt.B = 1;
  full_opt.T = W;
  full_opt.attn = "auto";
  GptCpu<float> full(full_opt);
  full.set_params(params);
  const int n_new = 3 * W;
  for (int P : {1, 5, 2 * W + 3}) {  // 1 token, inside the window, longer than the window
    std::vector<int> prompt(P);
    random_tokens(prompt, c.vocab_size, 100 + P);
    for (bool kv : {true, false}) {
      SampleSizes sz = sample_model_sizes(P, n_new, W, kv);
      EXPECT_LE(sz.T, W);
      EXPECT_LE(sz.kv_cache, W);
      ModelOptions mo = full_opt;
      mo.T = sz.T;
      mo.kv_cache = sz.kv_cache;
      GptCpu<float> m(mo);  // sized exactly as `flashgpt sample` sizes it
      m.set_params(params);
      for (float temperature : {0.0f, 1.0f}) {
        SCOPED_TRACE(std::string(rope ? "rope" : "learned") + " W=" + std::to_string(W) +
                     " prompt " + std::to_string(P) + (kv ? " kv-cache" : " recompute") +
                     " temperature " + std::to_string(temperature));
        std::vector<int> got = kv ? generate_kv(m, prompt, n_new, temperature, 0, 5, W)
                                  : generate(m, prompt, n_new, temperature, 0, 5, W);
        ASSERT_EQ(got.size(), (size_t)n_new);
        EXPECT_EQ(got, reference_generate(full, prompt, n_new, temperature, 5, W, kv));
      }
    }
  }
}

}  // namespace

TEST(Sampling, PastTheWindowLearned) {
  check_sampling_past_window(false, 16);
  check_sampling_past_window(false, 1);  // a one-position model: every token restarts
}
TEST(Sampling, PastTheWindowRope) { check_sampling_past_window(true, 16); }

// Inside the window the KV cache and full recomputation see the same context: identical
// greedy tokens, from a 1-token prompt up to prompt + output = W + 1.
TEST(Sampling, KvCacheAndRecomputeAgreeInsideTheWindow) {
  for (bool rope : {false, true}) {
    GPTConfig c = decode_config(rope, 4);
    c.max_seq_len = 24;
    ModelOptions mo;
    mo.config = c;
    mo.B = 1;
    mo.T = 24;
    mo.kv_cache = 24;
    GptCpu<float> m(mo);
    Rng rng(21);
    for (float& p : m.params) p += 0.2f * (float)rng.normal();
    for (int P : {1, 7}) {
      std::vector<int> prompt(P);
      random_tokens(prompt, c.vocab_size, 40 + P);
      const int n_new = 24 + 1 - P;
      EXPECT_EQ(generate(m, prompt, n_new, 0.0f, 0, 1, 24), generate_kv(m, prompt, n_new, 0.0f, 0, 1, 24))
          << (rope ? "rope" : "learned") << " prompt " << P;
    }
  }
}

// A RoPE model trained with a sliding window W samples past its trained length from a ring of
// W cache rows (model/kv_cache.h), generated EOTs starting new documents: greedy tokens equal
// those of recomputing the whole sequence under the same mask at every step (no sliding).
TEST(Sampling, RingCacheGeneratesPastTheTrainedLength) {
  GPTConfig c = decode_config(true, 4);
  c.max_seq_len = 16;
  const MaskSpec mask{MaskKind::kDocument, 6, 3};  // token 3 ends documents: it occurs
  const int P = 5, n_new = 60, context = c.max_seq_len;
  const SampleSizes sz = sample_model_sizes(P, n_new, context, true, mask.window, 0);
  EXPECT_EQ(sz.kv_cache, mask.window);
  EXPECT_EQ(sz.T, P);  // the prompt's prefill only: the ring never restarts
  const ModelOptions mo = sample_model_options(c, sz, mask, context, "flash");
  GptCpu<float> ring(mo);
  Rng rng(23);
  for (float& p : ring.params) p += 0.2f * (float)rng.normal();
  ModelOptions full_opt = mo;
  full_opt.config.max_seq_len = full_opt.T = P + n_new;
  full_opt.kv_cache = 0;
  GptCpu<float> full(full_opt);
  full.params = ring.params;
  std::vector<int> prompt(P);
  random_tokens(prompt, c.vocab_size, 77);
  prompt[2] = mask.eot;  // the prompt's last document starts at its row 2
  const std::vector<int> got = generate_kv(ring, prompt, n_new, 0.0f, 0, 1, context);
  EXPECT_EQ(got, generate(full, prompt, n_new, 0.0f, 0, 1, P + n_new));
  int eots = 0;
  for (int t : got) eots += t == mask.eot;
  std::printf("  %d tokens from a %d-row ring past %d trained positions, %d generated EOTs\n",
              n_new, sz.kv_cache, c.max_seq_len, eots);
}

TEST(Sampling, ModelSizesReserveOnlyWhatTheRunReaches) {
  SampleSizes s = sample_model_sizes(3, 10, 131072, true);  // a short sample, a long model
  EXPECT_EQ(s.T, 3);
  EXPECT_EQ(s.kv_cache, 12);
  s = sample_model_sizes(3, 10, 131072, false);
  EXPECT_EQ(s.T, 12);
  EXPECT_EQ(s.kv_cache, 0);
  s = sample_model_sizes(2, 200, 128, true);  // the quick start's case: restarts at 64 tokens
  EXPECT_EQ(s.T, 64);
  EXPECT_EQ(s.kv_cache, 128);
  s = sample_model_sizes(500, 1, 128, true);  // a prompt longer than the window
  EXPECT_EQ(s.T, 128);
  EXPECT_EQ(s.kv_cache, 128);
  // A sliding window of 256 within a context of 1024: a ring of 256 rows; RoPE never restarts,
  // learned positions (1024 of them) restart when they end; a window wider than the context
  // is no ring.
  s = sample_model_sizes(2, 100000, 1024, true, 256, 0);
  EXPECT_EQ(s.T, 2);
  EXPECT_EQ(s.kv_cache, 256);
  s = sample_model_sizes(2, 5000, 1024, true, 256, 1024);
  EXPECT_EQ(s.T, 512);
  EXPECT_EQ(s.kv_cache, 256);
  s = sample_model_sizes(2, 5000, 128, true, 256, 0);
  EXPECT_EQ(s.T, 64);
  EXPECT_EQ(s.kv_cache, 128);
}
