// sample.cpp — sampling and the `flashgpt sample` command.
#include "train/sample.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <sys/stat.h>

#include "data/tokenizer.h"
#include "kernels/common.h"
#include "model/checkpoint.h"

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

std::vector<int> generate(Model& model, const std::vector<int>& prompt, int n_new,
                          float temperature, int top_k, uint64_t seed, int max_context,
                          const std::function<void(int)>& on_token) {
  CHECK(!prompt.empty(), "generate: empty prompt");
  const GPTConfig& c = model.config();
  Rng rng(seed);
  std::vector<int> toks = prompt;
  std::vector<float> logits(c.padded_vocab_size);
  for (int i = 0; i < n_new; i++) {
    int T = std::min((int)toks.size(), max_context);
    model.forward(toks.data() + toks.size() - T, nullptr, 1, T);
    model.logits_at(T - 1, logits.data());
    int next = sample_from_logits(logits.data(), c.vocab_size, temperature, top_k, rng);
    toks.push_back(next);
    if (on_token) on_token(next);
  }
  return std::vector<int>(toks.begin() + prompt.size(), toks.end());
}

std::vector<int> generate_kv(Model& model, const std::vector<int>& prompt, int n_new,
                             float temperature, int top_k, uint64_t seed, int cache_len,
                             const std::function<void(int)>& on_token) {
  CHECK(!prompt.empty(), "generate: empty prompt");
  CHECK(cache_len >= 2, "generate: the KV cache needs at least 2 positions");
  const GPTConfig& c = model.config();
  Rng rng(seed);
  std::vector<int> toks = prompt;
  std::vector<float> logits(c.padded_vocab_size);
  const int n0 = std::min((int)toks.size(), cache_len);
  model.prefill(toks.data() + toks.size() - n0, n0, logits.data());
  for (int i = 0; i < n_new; i++) {
    int next = sample_from_logits(logits.data(), c.vocab_size, temperature, top_k, rng);
    toks.push_back(next);
    if (on_token) on_token(next);
    if (i + 1 == n_new) break;
    if (model.cached_positions() < cache_len) {
      model.decode(next, logits.data());
    } else {  // full: keep the last half of the window
      const int keep = cache_len / 2;
      model.prefill(toks.data() + toks.size() - keep, keep, logits.data());
    }
  }
  return std::vector<int>(toks.begin() + prompt.size(), toks.end());
}

static bool file_exists(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0;
}

int run_sample(const SampleOptions& opt) {
  GPTConfig cfg;
  std::vector<float> params;
  load_model_file(opt.checkpoint, cfg, params);
  std::string tok_path = opt.tokenizer_path;
  if (tok_path.empty()) {
    size_t slash = opt.checkpoint.find_last_of('/');
    tok_path = (slash == std::string::npos ? std::string(".") : opt.checkpoint.substr(0, slash)) +
               "/tokenizer.bin";
    CHECK(file_exists(tok_path), "sample: no tokenizer.bin beside '%s'; give --tokenizer FILE",
          opt.checkpoint.c_str());
  }
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
  CHECK(cfg.rope || (int)prompt.size() < cfg.max_seq_len,
        "sample: the prompt is %zu tokens but the model's context is %d; shorten --prompt",
        prompt.size(), cfg.max_seq_len);
  // The context: the model's learned positions, or for RoPE models whatever prompt + output need.
  const int need = (int)prompt.size() + opt.tokens;
  const int context = cfg.rope ? need : std::min(need, cfg.max_seq_len);
  ModelOptions mo;
  mo.config = cfg;
  mo.B = 1;
  mo.T = opt.kv_cache ? std::min((int)prompt.size(), context) : context;
  mo.kv_cache = opt.kv_cache ? context : 0;
  if (cfg.rope) mo.config.max_seq_len = std::max(cfg.max_seq_len, context);
  mo.attn = "flash";
  std::unique_ptr<Model> model = make_model(opt.device, mo);
  model->set_params(params);
  std::fputs(opt.prompt.c_str(), stdout);
  auto print = [&](int t) {
    std::string bytes = tok.decode_token(t);  // may hold NUL or half a UTF-8 char
    std::fwrite(bytes.data(), 1, bytes.size(), stdout);
    std::fflush(stdout);
  };
  if (opt.kv_cache)
    generate_kv(*model, prompt, opt.tokens, opt.temperature, opt.top_k, opt.seed, context, print);
  else
    generate(*model, prompt, opt.tokens, opt.temperature, opt.top_k, opt.seed, context, print);
  std::fputs("\n", stdout);
  return 0;
}
