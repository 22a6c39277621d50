// cli — what the parsers of every subcommand share: train/options.cpp (prepare, train, sample,
// eval, export) and bench/options.cpp (profile, bench-attention, bench-kernels). Here the values
// the model and the attention registry define (--attn, --pos, --batch x --seq-len) and their
// validators, so that each says the same thing wherever it runs; the reading of a command line
// (cxxopts) is cli_table.h, which only the parsers include. A bad value throws flashgpt::Error
// with one line naming the flag, before any work starts. It sits in model/ because both train/
// and bench/ build on the model, and neither includes the other.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "kernels/attention/mask.h"

// --pos: how the model knows where a token stands.
enum class PosEncoding {
  learned,  // GPT-2's position table wpe (max_seq_len, C): caps the context at --max-seq-len
  rope,     // rotary embeddings on Q and K: no table, any length
};
PosEncoding parse_pos(const std::string& value);  // unknown: throws naming --pos
const char* pos_name(PosEncoding pos);            // "learned" | "rope"

// --attn values are backend names from the CUDA-free registry (kernels/attention/backends.h),
// validated here once, or "auto" where the subcommand takes it (the first backend that
// supports the model: attention_auto). A validated string rather than a closed enum: a backend
// is added by one spec line in the registry, and the options, the help text and the model
// learn it from there with no edit here.
enum class AttnAuto { allowed, refused };
std::string parse_attn(const std::string& value, AttnAuto autos);  // unknown: throws listing names

// --mask and --window as given on a command line whose model carries its own (train with
// --init or --resume, eval, sample: model/checkpoint.h records them). A flag left out is the
// model's.
struct MaskFlags {
  std::optional<MaskKind> kind;
  std::optional<int> window;
  MaskSpec over(const MaskSpec& model) const;  // the model's, each given flag replacing its part
  bool given() const { return kind || window; }
};

namespace cli {

// A count: "--flag must be at least MIN (got V)" and `note` (what 0 means, what to do).
void check_at_least(const char* flag, long long value, long long min, const char* note = "");
// A list flag (--seq-lens 1024,4096): one or more items, each at least `min`.
void check_list_at_least(const char* flag, const std::vector<int>& values, int min);
// A list of --attn names (profile, bench-attention): one or more, each from the registry.
std::vector<std::string> parse_attn_list(const char* flag, const std::vector<std::string>& names);
// --attn's help, from the registry: each backend with the head of its one-line summary.
std::string attn_help(AttnAuto autos);
// B*T token positions of one forward pass must fit an int: the model counts them in one.
void check_tokens_per_pass(int B, int T, const char* seq_flag, const char* hint = "");

}  // namespace cli
