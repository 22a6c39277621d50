// eval.cpp — see eval.h.
#include "train/eval.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <memory>

#include "data/files.h"
#include "data/tokenizer.h"
#include "kernels/common.h"
#include "model/checkpoint.h"
#include "model/hf_gpt2.h"
#include "model/json.h"
#include "model/output_files.h"
#include "train/options.h"
#include "train/sample.h"

void eval_batches(Model& model, DataLoader& loader, int64_t n, int B, int T,
                  const std::vector<int>* token_bytes, EvalSums& sums) {
  std::vector<int> inputs((size_t)B * T), targets((size_t)B * T);
  for (int64_t i = 0; i < n; i++) {
    loader.next_batch(inputs.data(), targets.data());
    const double loss = model.forward(inputs.data(), targets.data(), B, T);
    sums.loss_sum += loss * B * T;
    sums.tokens += (int64_t)B * T;
    sums.batches++;
    if (token_bytes)
      for (int t : targets) sums.bytes += (*token_bytes)[t];
  }
}

EvalResult run_eval(const EvalOptions& opt, FILE* out) {
  if (!opt.json_path.empty()) check_output_path(opt.json_path, "--json", OutputKind::EvalJson);
  GPTConfig cfg;
  std::vector<float> params;
  load_any_model(opt.checkpoint, cfg, params);
  // The tokenizer, for bits per byte: named, beside the checkpoint, or the data's.
  const std::string tok_path = find_model_tokenizer(opt.tokenizer_path, opt.checkpoint,
                                                    opt.data_dir);
  std::string pattern = opt.val_pattern;
  if (pattern.empty()) {
    CHECK(is_directory(opt.data_dir), "--data '%s' is not a directory; run `flashgpt prepare` "
          "first", opt.data_dir.c_str());
    pattern = opt.data_dir + "/val_*.bin";
  }
  // The checkpoint's mask unless --mask / --window say otherwise; documents end at the
  // tokenizer's end-of-text token.
  MaskSpec mask = opt.mask.over(read_any_model_mask(opt.checkpoint));
  std::vector<int> token_bytes;
  if (!tok_path.empty()) {
    Tokenizer tok = Tokenizer::load(tok_path);
    mask.eot = tok.eot_token();
    CHECK(tok.vocab_size() == cfg.vocab_size, "eval: tokenizer '%s' has %d tokens but the "
          "checkpoint's vocabulary is %d; give the tokenizer the model was trained with "
          "(--tokenizer)", tok_path.c_str(), tok.vocab_size(), cfg.vocab_size);
    token_bytes.resize(cfg.vocab_size);
    for (int t = 0; t < cfg.vocab_size; t++)
      token_bytes[t] = t == tok.eot_token() ? 0 : (int)tok.decode_token(t).size();
  }
  validate_mask_spec(mask, cfg.vocab_size);
  const int B = opt.batch, T = opt.seq_len > 0 ? opt.seq_len : cfg.max_seq_len;
  CHECK(T <= cfg.max_seq_len || cfg.rope, "--seq-len %d is longer than the model's %d learned "
        "positions; lower --seq-len", T, cfg.max_seq_len);
  DataLoader loader(pattern, opt.val_pattern.empty() ? "--data" : "--val-pattern", B, T,
                    cfg.vocab_size, false, 0);
  const int64_t all = loader.batches_per_epoch();
  CHECK(opt.steps <= all, "--steps %lld is more than the %lld batches of %d x %d tokens in '%s'; "
        "drop --steps to evaluate all of it", (long long)opt.steps, (long long)all, B, T,
        pattern.c_str());
  const int64_t n = opt.steps > 0 ? opt.steps : all;

  ModelOptions mo;
  mo.config = cfg;
  if (cfg.rope) mo.config.max_seq_len = std::max(cfg.max_seq_len, T);
  mo.B = B;
  mo.T = T;
  mo.attn = opt.attn;
  mo.mask = mask;
  std::unique_ptr<Model> model = make_model(opt.device, mo);
  model->set_params(params);
  EvalResult r;
  eval_batches(*model, loader, n, B, T, token_bytes.empty() ? nullptr : &token_bytes, r.sums);
  r.loss = r.sums.mean_loss();
  r.perplexity = std::exp(r.loss);
  if (r.sums.bytes > 0) r.bits_per_byte = r.sums.loss_sum / std::log(2.0) / r.sums.bytes;

  std::fprintf(out, "eval: %s on %s (%s, %s mask): %lld batches x %d x %d = %lld tokens | loss "
               "%.6f | perplexity %.3f | %s\n", opt.checkpoint.c_str(), pattern.c_str(),
               model->device_name(), describe_mask(mask).c_str(), (long long)n, B, T,
               (long long)r.sums.tokens, r.loss,
               r.perplexity, r.bits_per_byte >= 0
                   ? flashgpt::strformat("%.4f bits/byte", r.bits_per_byte).c_str()
                   : "bits/byte: no tokenizer");
  CHECK(std::fflush(out) == 0 && !std::ferror(out), "eval: writing the result failed (%s)",
        std::strerror(errno));
  if (!opt.json_path.empty()) {
    std::string j = "{\"producer\": " + json_quote(kEvalJsonProducer);
    j += ", \"checkpoint\": " + json_quote(opt.checkpoint) + ", \"data\": " + json_quote(pattern);
    j += ", \"device\": " + json_quote(model->device_name());
    j += flashgpt::strformat(", \"mask\": %s, \"window\": %d",
                             json_quote(mask_kind_name(mask.kind)).c_str(), mask.window);
    j += flashgpt::strformat(", \"batches\": %lld, \"batch\": %d, \"seq_len\": %d, \"tokens\": %lld",
                             (long long)n, B, T, (long long)r.sums.tokens);
    j += flashgpt::strformat(", \"loss\": %.9g, \"perplexity\": %.9g", r.loss, r.perplexity);
    if (r.bits_per_byte >= 0)
      j += flashgpt::strformat(", \"bytes\": %lld, \"bits_per_byte\": %.9g, \"tokenizer\": %s",
                               (long long)r.sums.bytes, r.bits_per_byte, json_quote(tok_path).c_str());
    else
      j += ", \"bits_per_byte\": null";
    j += "}\n";
    write_file_atomically(opt.json_path, [&](FILE* f) {
      return std::fwrite(j.data(), 1, j.size(), f) == j.size();
    });
  }
  return r;
}
