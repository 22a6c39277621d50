// config — GPT-2 architecture hyper-parameters and the named presets.
#pragma once
#include <string>
#include <vector>

struct GPTConfig {
  int max_seq_len = 0;        // maxT: rows of the position embedding
  int vocab_size = 0;         // V: real tokens
  int padded_vocab_size = 0;  // Vp: V rounded up to a multiple of 128 (tensor-core friendly)
  int num_layers = 0;         // L
  int num_heads = 0;          // NH query heads
  int num_kv_heads = 0;       // NKV key/value heads (== NH unless grouped-query attention)
  int channels = 0;           // C = NH * HS
  int rope = 0;               // 0: learned positions (wpe, maxT rows); 1: rotary (RoPE, no wpe)
  float rope_theta = 10000.0f;  // RoPE base (kernels/rope.h)
  int head_size() const { return channels / num_heads; }
  int qkv_channels() const { return (num_heads + 2 * num_kv_heads) * head_size(); }
};

inline int pad_vocab(int V) { return (V + 127) / 128 * 128; }

// Presets, as in llm.c (depth d; channels 64*d up to d24, then GPT-2 sizes):
//   tiny: L=4  C=128  NH=4  (for the CPU quick start and tests)
//   d6:   L=6  C=384  NH=6
//   d12:  L=12 C=768  NH=12  (GPT-2 124M)
//   d24:  L=24 C=1024 NH=16  (GPT-2 350M)
//   d36:  L=36 C=1280 NH=20  (GPT-2 774M)
//   d48:  L=48 C=1600 NH=25  (GPT-2 1558M)
// Throws flashgpt::Error naming --model for an unknown name.
GPTConfig gpt_preset(const std::string& name, int vocab_size, int max_seq_len);
std::vector<std::string> gpt_preset_names();
// Checks every field for consistency (NH divides C, NKV divides NH, ...); throws naming the flag.
void validate_config(const GPTConfig& c);
