#include "model/config.h"

#include "kernels/common.h"

std::vector<std::string> gpt_preset_names() { return {"tiny", "d6", "d12", "d24", "d36", "d48"}; }

GPTConfig gpt_preset(const std::string& name, int vocab_size, int max_seq_len) {
  GPTConfig c;
  c.vocab_size = vocab_size;
  c.padded_vocab_size = pad_vocab(vocab_size);
  c.max_seq_len = max_seq_len;
  struct P { const char* n; int L, C, NH; };
  static const P presets[] = {{"tiny", 4, 128, 4},   {"d6", 6, 384, 6},     {"d12", 12, 768, 12},
                              {"d24", 24, 1024, 16}, {"d36", 36, 1280, 20}, {"d48", 48, 1600, 25}};
  for (const P& p : presets) {
    if (name == p.n) {
      c.num_layers = p.L;
      c.channels = p.C;
      c.num_heads = p.NH;
      c.num_kv_heads = p.NH;
      return c;
    }
  }
  THROW_ERROR("--model '%s' is unknown; use one of tiny, d6, d12, d24, d36, d48", name.c_str());
}

void validate_config(const GPTConfig& c) {
  CHECK(c.num_layers >= 1, "--layers must be at least 1 (got %d)", c.num_layers);
  CHECK(c.num_heads >= 1, "--heads must be at least 1 (got %d)", c.num_heads);
  CHECK(c.channels >= 1, "--channels must be at least 1 (got %d)", c.channels);
  CHECK(c.channels % c.num_heads == 0, "--channels %d is not divisible by --heads %d; pick a multiple",
        c.channels, c.num_heads);
  CHECK(c.num_kv_heads >= 1 && c.num_heads % c.num_kv_heads == 0,
        "--kv-heads %d must divide --heads %d", c.num_kv_heads, c.num_heads);
  CHECK(c.vocab_size >= 2 && c.vocab_size <= c.padded_vocab_size,
        "vocabulary size %d is invalid (padded %d)", c.vocab_size, c.padded_vocab_size);
  CHECK(c.max_seq_len >= 1, "the model's maximum sequence length must be at least 1 (got %d)",
        c.max_seq_len);
}
