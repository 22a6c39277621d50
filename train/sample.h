// sample — autoregressive generation from a model, and the `flashgpt sample` command.
// generate(): each new token re-runs the forward pass over the last max_context tokens (full
// recompute). generate_kv(): the model's KV cache (Model::prefill / decode): the prompt runs
// once, then each new token is one position through every layer. Same tokens for the same
// seed, up to rounding (tests/gpu/test_model.cu checks it).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"
#include "kernels/rng.h"
#include "train/options.h"

// temperature 0 = greedy (argmax); top_k 0 = all V tokens. Only the V real tokens are drawn.
int sample_from_logits(const float* logits, int V, float temperature, int top_k, Rng& rng);
std::vector<int> generate(Model& model, const std::vector<int>& prompt, int n_new,
                          float temperature, int top_k, uint64_t seed, int max_context,
                          const std::function<void(int)>& on_token = nullptr);
// model must have been made with ModelOptions.kv_cache >= the positions needed and T >= the
// prompt. When the cache is full, the last half of the window is prefilled again (positions
// restart at 0, as full recompute's sliding window does) and decoding goes on.
std::vector<int> generate_kv(Model& model, const std::vector<int>& prompt, int n_new,
                             float temperature, int top_k, uint64_t seed, int cache_len,
                             const std::function<void(int)>& on_token = nullptr);
int run_sample(const SampleOptions& opt);
