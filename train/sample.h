// sample — autoregressive generation from a model, and the `flashgpt sample` command.
//
// The window W: the most tokens the model sees at once. For learned positions it is at most
// the model's max_seq_len (its position table); for RoPE models any length (default: the
// length it was trained at; `sample --context` changes it).
//   generate()     full recompute: each new token re-runs the forward pass over the last W
//                  tokens of prompt + output (a window that slides by one token).
//   generate_kv()  the model's KV cache (Model::prefill / decode): the prompt's last min(P, W)
//                  tokens run once, then each new token is one position through every layer.
//                  When the cache holds W positions, the last kv_restart_tokens(W) = max(1,
//                  W/2) tokens are prefilled again at positions 0.. and decoding goes on (a
//                  window that jumps by W/2, so each restart costs one prefill of W/2 tokens).
//                  A model with a sliding window --window Wa <= W keeps a ring of its last Wa
//                  positions instead (model/kv_cache.h): no restart, O(Wa) memory, for as many
//                  tokens as its positions allow (RoPE: any number; learned: max_seq_len, then
//                  the restart above).
// The model's mask applies to both (the checkpoint's, or sample's --mask / --window): a
// generated end-of-text token starts a new document, which sees only itself and what follows.
// Inside the window (prompt + output <= W + 1 tokens) both see exactly the same context, so
// they give the same tokens up to rounding (tests/cpu/test_model.cpp: identical on the CPU;
// tests/gpu/test_train_gpu.cu). Past it they differ by design (slide by 1 vs jump by W/2).
#pragma once
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"
#include "kernels/rng.h"
#include "train/options.h"

// temperature 0 = greedy (argmax); top_k 0 = all V tokens. Only the V real tokens are drawn.
int sample_from_logits(const float* logits, int V, float temperature, int top_k, Rng& rng);

// Tokens prefilled again when a full KV cache of `window` positions restarts.
int kv_restart_tokens(int window);

// The model a sampler needs (ModelOptions.T, .kv_cache) for a prompt of `prompt` tokens,
// n_new new tokens and a window of `window` tokens; kv_cache 0 for generate(). Only what the
// run reaches is reserved: a short sample from a 128K-context model does not plan 128K rows.
// attn_window: the model's sliding window (0: none); max_positions: its learned positions
// (0: RoPE, no end).
struct SampleSizes {
  int T = 0;         // longest forward: generate()'s context, or generate_kv()'s prefill
  int kv_cache = 0;  // rows of KV cache (generate_kv() only)
};
SampleSizes sample_model_sizes(int64_t prompt, int64_t n_new, int window, bool kv_cache,
                               int attn_window = 0, int max_positions = 0);
// The model `flashgpt sample` makes of a checkpoint's config: one sequence, sized by `sizes`,
// under `mask`, with the window of `window` tokens (RoPE models: past max_seq_len too).
ModelOptions sample_model_options(const GPTConfig& cfg, const SampleSizes& sizes,
                                  const MaskSpec& mask, int window, const std::string& attn);

// model: made with ModelOptions sized by sample_model_sizes(prompt.size(), n_new, window,
// false) or larger. Returns the n_new new tokens; on_token sees each as it is drawn.
std::vector<int> generate(Model& model, const std::vector<int>& prompt, int n_new,
                          float temperature, int top_k, uint64_t seed, int window,
                          const std::function<void(int)>& on_token = nullptr);
// model: sized by sample_model_sizes(prompt.size(), n_new, window, true) or larger.
std::vector<int> generate_kv(Model& model, const std::vector<int>& prompt, int n_new,
                             float temperature, int top_k, uint64_t seed, int window,
                             const std::function<void(int)>& on_token = nullptr);

// The tokenizer of a model: `named` (--tokenizer) when given, else tokenizer.bin beside the
// checkpoint (model/checkpoint.h), else data_dir's tokenizer.bin; "" when there is none.
std::string find_model_tokenizer(const std::string& named, const std::string& checkpoint,
                                 const std::string& data_dir = "");

// `flashgpt sample`: the prompt and the generated text go to `out`; a failed write to it is an
// error (a full disk or a closed pipe must not look like success). Notes go to stderr.
int run_sample(const SampleOptions& opt, FILE* out = stdout);
