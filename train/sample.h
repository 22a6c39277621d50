// sample — autoregressive generation from a model, and the `flashgpt sample` command.
// Each new token re-runs the forward pass over the last max_context tokens (no KV cache yet).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"
#include "model/rng.h"
#include "train/options.h"

// temperature 0 = greedy (argmax); top_k 0 = all V tokens. Only the V real tokens are drawn.
int sample_from_logits(const float* logits, int V, float temperature, int top_k, Rng& rng);
std::vector<int> generate(Model& model, const std::vector<int>& prompt, int n_new,
                          float temperature, int top_k, uint64_t seed, int max_context,
                          const std::function<void(int)>& on_token = nullptr);
// "auto" picks cuda when a device is present. Prints nothing.
std::unique_ptr<Model> make_model(const std::string& device, const ModelOptions& opt);
int run_sample(const SampleOptions& opt);
