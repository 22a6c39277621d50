// sample.cpp — sampling and the `flashgpt sample` command (the window rule is in sample.h).
#include "train/sample.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <numeric>

#include "data/files.h"
#include "data/tokenizer.h"
#include "kernels/common.h"
#include "model/checkpoint.h"
#include "model/hf_gpt2.h"

int sample_from_logits(const float* logits, int V, float temperature, int top_k, Rng& rng) {
  if (temperature == 0.0f) return (int)(std::max_element(logits, logits + V) - logits);
  std::vector<int> idx(V);
  std::iota(idx.begin(), idx.end(), 0);
  int k = (top_k > 0 && top_k < V) ? top_k : V;
  if (k < V)
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                      [&](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  double mx = -INFINITY;
  for (int i = 0; i < k; i++) mx = std::max(mx, (double)logits[idx[i]]);
  std::vector<double> p(k);
  double sum = 0;
  for (int i = 0; i < k; i++) sum += p[i] = std::exp((logits[idx[i]] - mx) / temperature);
  double u = rng.uniform() * sum, acc = 0;
  for (int i = 0; i < k; i++) {
    acc += p[i];
    if (u < acc) return idx[i];
  }
  return idx[k - 1];
}

int kv_restart_tokens(int window) { return std::max(1, window / 2); }

SampleSizes sample_model_sizes(int64_t prompt, int64_t n_new, int window, bool kv_cache,
                               int attn_window, int max_positions) {
  CHECK(prompt >= 1 && n_new >= 1 && window >= 1,
        "internal: sample sizes for prompt %lld, %lld new tokens, window %d", (long long)prompt,
        (long long)n_new, window);
  SampleSizes s;
  // The last token drawn is never fed back: the longest context is prompt + n_new - 1.
  const int64_t longest = prompt + n_new - 1;
  if (!kv_cache) {
    s.T = (int)std::min<int64_t>(window, longest);
    return s;
  }
  const int64_t first = std::min<int64_t>(prompt, window);  // the first prefill
  // A ring of the model's sliding window (model/kv_cache.h) decodes on until the positions end
  // (max_positions; 0: never); a plain cache until it holds `window` positions. Then the cache
  // restarts.
  const bool ring = attn_window > 0 && attn_window <= window && longest > attn_window;
  const bool restarts = ring ? max_positions > 0 && longest > max_positions : longest > window;
  s.T = (int)std::max<int64_t>(first, restarts ? kv_restart_tokens(window) : 0);
  s.kv_cache = ring ? attn_window : (int)std::min<int64_t>(window, longest);
  return s;
}

ModelOptions sample_model_options(const GPTConfig& cfg, const SampleSizes& sizes,
                                  const MaskSpec& mask, int window, const std::string& attn) {
  ModelOptions mo;
  mo.config = cfg;
  mo.B = 1;
  mo.T = sizes.T;
  mo.kv_cache = sizes.kv_cache;
  mo.mask = mask;
  mo.attn = attn;
  // RoPE has no position table: a window past the trained length only needs more table rows.
  if (cfg.rope) mo.config.max_seq_len = std::max(cfg.max_seq_len, window);
  return mo;
}

namespace {

// What generate() and generate_kv() share: the checks, the RNG, prompt + output so far and the
// logits of the next position.
struct Generation {
  const std::vector<int>& prompt;
  Rng rng;
  std::vector<int> toks;
  std::vector<float> logits;
  int V;
  Generation(const Model& model, const std::vector<int>& prompt_, uint64_t seed, int window)
      : prompt(prompt_), rng(seed), toks(prompt_), logits(model.config().padded_vocab_size),
        V(model.config().vocab_size) {
    CHECK(!prompt.empty(), "generate: empty prompt");
    CHECK(window >= 1, "generate: the window must hold at least 1 token (got %d)", window);
  }
  // Draws the next token from `logits` and appends it.
  int draw(float temperature, int top_k, const std::function<void(int)>& on_token) {
    const int next = sample_from_logits(logits.data(), V, temperature, top_k, rng);
    toks.push_back(next);
    if (on_token) on_token(next);
    return next;
  }
  std::vector<int> output() const {
    return std::vector<int>(toks.begin() + prompt.size(), toks.end());
  }
};

}  // namespace

std::vector<int> generate(Model& model, const std::vector<int>& prompt, int n_new,
                          float temperature, int top_k, uint64_t seed, int window,
                          const std::function<void(int)>& on_token) {
  Generation g(model, prompt, seed, window);
  for (int i = 0; i < n_new; i++) {
    const int T = (int)std::min<size_t>(g.toks.size(), (size_t)window);
    model.forward(g.toks.data() + g.toks.size() - T, nullptr, 1, T);
    model.logits_at(T - 1, g.logits.data());
    g.draw(temperature, top_k, on_token);
  }
  return g.output();
}

std::vector<int> generate_kv(Model& model, const std::vector<int>& prompt, int n_new,
                             float temperature, int top_k, uint64_t seed, int window,
                             const std::function<void(int)>& on_token) {
  Generation g(model, prompt, seed, window);
  const int n0 = (int)std::min<size_t>(g.toks.size(), (size_t)window);
  model.prefill(g.toks.data() + g.toks.size() - n0, n0, g.logits.data());
  for (int i = 0; i < n_new; i++) {
    const int next = g.draw(temperature, top_k, on_token);
    if (i + 1 == n_new) break;
    if (model.can_decode()) {
      model.decode(next, g.logits.data());
    } else {  // the cache is full or the positions end: restart from the window's last half
      const int keep = kv_restart_tokens(window);
      model.prefill(g.toks.data() + g.toks.size() - keep, keep, g.logits.data());
    }
  }
  return g.output();
}

std::string find_model_tokenizer(const std::string& named, const std::string& checkpoint,
                                 const std::string& data_dir) {
  if (!named.empty()) return named;
  const std::string beside = tokenizer_beside(checkpoint);
  if (file_exists(beside)) return beside;
  if (!data_dir.empty() && file_exists(data_dir + "/tokenizer.bin")) return data_dir + "/tokenizer.bin";
  return "";
}

int run_sample(const SampleOptions& opt, FILE* out) {
  GPTConfig cfg;
  std::vector<float> params;
  load_any_model(opt.checkpoint, cfg, params);
  const std::string tok_path = find_model_tokenizer(opt.tokenizer_path, opt.checkpoint);
  CHECK(!tok_path.empty(), "sample: no tokenizer.bin beside '%s'; give --tokenizer FILE",
        opt.checkpoint.c_str());
  Tokenizer tok = Tokenizer::load(tok_path);
  CHECK(tok.vocab_size() == cfg.vocab_size,
        "sample: tokenizer '%s' has %d tokens but the checkpoint's vocabulary is %d; give the "
        "tokenizer the model was trained with", tok_path.c_str(), tok.vocab_size(), cfg.vocab_size);
  std::vector<int> prompt = {tok.eot_token()};
  if (!opt.prompt.empty()) {
    CHECK(tok.can_encode(), "sample: tokenizer '%s' can only decode (llm.c format); drop --prompt",
          tok_path.c_str());
    std::vector<int> p = tok.encode(opt.prompt);
    prompt.insert(prompt.end(), p.begin(), p.end());
  }
  const int window = opt.context > 0 ? opt.context : cfg.max_seq_len;
  CHECK(cfg.rope || window <= cfg.max_seq_len,
        "sample: --context %d is longer than the model's %d learned positions; lower --context "
        "(only --pos rope models can look further than they were trained)", window,
        cfg.max_seq_len);
  if (prompt.size() > (size_t)window)
    std::fprintf(stderr, "sample: the prompt is %zu tokens, longer than the model's window of %d; "
                 "it sees the last %d\n", prompt.size(), window, window);
  // The checkpoint's mask unless --mask / --window say otherwise; documents end at the
  // tokenizer's end-of-text token, which a generated one is too.
  MaskSpec mask = opt.mask.over(read_any_model_mask(opt.checkpoint));
  mask.eot = tok.eot_token();
  validate_mask_spec(mask, cfg.vocab_size);
  const int max_positions = cfg.rope ? 0 : cfg.max_seq_len;
  const SampleSizes sizes = sample_model_sizes((int64_t)prompt.size(), opt.tokens, window,
                                               opt.kv_cache, mask.window, max_positions);
  if (opt.kv_cache && mask.window > 0 && !cfg.rope &&
      (int64_t)prompt.size() + opt.tokens - 1 > cfg.max_seq_len)
    std::fprintf(stderr, "sample: the model's %d learned positions end before the %lld tokens "
                 "of prompt and output; from there the window restarts with its last %d tokens "
                 "(a --pos rope model with --window generates on in O(window) memory)\n",
                 cfg.max_seq_len, (long long)prompt.size() + opt.tokens, kv_restart_tokens(window));
  std::unique_ptr<Model> model =
      make_model(opt.device, sample_model_options(cfg, sizes, mask, window, opt.attn));
  model->set_params(params);
  std::fputs(opt.prompt.c_str(), out);
  auto print = [&](int t) {
    std::string bytes = tok.decode_token(t);  // may hold NUL or half a UTF-8 char
    std::fwrite(bytes.data(), 1, bytes.size(), out);
    std::fflush(out);
    CHECK(!std::ferror(out), "sample: writing the text failed (%s); is the disk full or the pipe "
          "closed?", std::strerror(errno));
  };
  if (opt.kv_cache)
    generate_kv(*model, prompt, opt.tokens, opt.temperature, opt.top_k, opt.seed, window, print);
  else
    generate(*model, prompt, opt.tokens, opt.temperature, opt.top_k, opt.seed, window, print);
  std::fputs("\n", out);
  CHECK(std::fflush(out) == 0 && !std::ferror(out),
        "sample: writing the text failed (%s); is the disk full or the pipe closed?",
        std::strerror(errno));
  return 0;
}
