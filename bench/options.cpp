// options.cpp — cxxopts parsing and validation for the benchmark subcommands (options.h).
#include "bench/options.h"

#include <algorithm>
#include <cmath>

#include "kernels/attention/backends.h"
#include "kernels/common.h"
#include "model/config.h"

using cli::attn_help;
using cli::check_at_least;
using cli::check_list_at_least;
using cli::check_tokens_per_pass;
using cli::get;
using cli::join;
using cli::parse_attn_list;
using cli::parse_command_line;


int profile_batch(const ProfileOptions& opt, int T) {
  return opt.batch > 0 ? opt.batch : std::max(1, opt.tokens / T);
}

bool parse_profile_options(int argc, char** argv, ProfileOptions& opt) {
  cxxopts::Options o("profile",
                     "flashgpt profile: sweep the context length for a model and attention "
                     "backends; measured peak memory, step time and attention time beside the "
                     "memory plan and a roofline");
  const ProfileOptions d;
  // clang-format off
  o.add_options()
    ("model", "model preset: tiny|d6|d12|d24|d36|d48", cxxopts::value<std::string>()->default_value(d.model))
    ("attn", "attention backends, comma-separated: " + attn_help(AttnAuto::refused), cxxopts::value<std::vector<std::string>>()->default_value(join(d.attn)))
    ("seq-lens", "sequence lengths T, comma-separated", cxxopts::value<std::vector<int>>()->default_value(join(d.seq_lens)))
    ("tokens", "tokens per step: B = max(1, tokens / T)", cxxopts::value<int>()->default_value(std::to_string(d.tokens)))
    ("batch", "batch size B at every T (overrides --tokens); 0 = from --tokens", cxxopts::value<int>()->default_value("0"))
    ("warmup", "untimed training steps per point", cxxopts::value<int>()->default_value(std::to_string(d.warmup)))
    ("steps", "timed training steps per point (median reported)", cxxopts::value<int>()->default_value(std::to_string(d.steps)))
    ("recompute", "activation recomputation: " + recompute_names_list() + " (model/recompute.h)", cxxopts::value<std::string>()->default_value(recompute_name(d.recompute)))
    ("pos", "positions: rope (no parameters) | learned (a maxT x C table per point)", cxxopts::value<std::string>()->default_value(pos_name(d.pos)))
    ("cp", "context-parallel degree of `train --cp`: plan one GPU of a cp group, which holds T/cp tokens of each sequence (with --plan-only)", cxxopts::value<int>()->default_value(std::to_string(d.cp)))
    ("vocab", "vocabulary size", cxxopts::value<int>()->default_value(std::to_string(d.vocab)))
    ("out", "output directory (profile.csv, profile.json, PNG plots)", cxxopts::value<std::string>()->default_value(d.out_dir))
    ("plan-only", "print the predicted table only; no GPU needed")
    ("plot", "make the PNG plots with scripts/plot_profile.py (--plot=false: no plots)", cxxopts::value<bool>()->default_value("true"))
    ("gpu-memory", "GiB of device memory for --plan-only (0: the GPU's, else 80)", cxxopts::value<double>()->default_value("0"))
    ("max-step-seconds", "skip a backend's larger T once its predicted step time exceeds this", cxxopts::value<double>()->default_value("60"))
    ("seed", "random seed (parameters and tokens)", cxxopts::value<uint64_t>()->default_value(std::to_string(d.seed)))
    ("h,help", "this help");
  // clang-format on
  cxxopts::ParseResult r;
  if (!parse_command_line(o, "profile", argc, argv, r)) return false;
  opt.model = get<std::string>(r, "model");
  opt.attn = parse_attn_list("--attn", get<std::vector<std::string>>(r, "attn"));
  opt.seq_lens = get<std::vector<int>>(r, "seq-lens");
  opt.tokens = get<int>(r, "tokens");
  opt.batch = get<int>(r, "batch");
  opt.warmup = get<int>(r, "warmup");
  opt.steps = get<int>(r, "steps");
  opt.recompute = parse_recompute(get<std::string>(r, "recompute"));
  opt.pos = parse_pos(get<std::string>(r, "pos"));
  opt.cp = get<int>(r, "cp");
  opt.vocab = get<int>(r, "vocab");
  opt.out_dir = get<std::string>(r, "out");
  opt.plan_only = r.count("plan-only") > 0;
  opt.plot = get<bool>(r, "plot");
  opt.gpu_memory_gib = get<double>(r, "gpu-memory");
  opt.max_step_seconds = get<double>(r, "max-step-seconds");
  opt.seed = get<uint64_t>(r, "seed");
  opt.command_line = "flashgpt";
  for (int i = 0; i < argc; i++) opt.command_line += std::string(" ") + argv[i];

  check_list_at_least("--seq-lens", opt.seq_lens, 1);
  check_at_least("--tokens", opt.tokens, 1);
  check_at_least("--batch", opt.batch, 0, "; 0 = from --tokens");
  for (int T : opt.seq_lens) check_tokens_per_pass(profile_batch(opt, T), T, "--seq-lens");
  check_at_least("--cp", opt.cp, 1, "; 1 = no context parallelism");
  CHECK(opt.cp == 1 || opt.plan_only,
        "profile --cp %d plans one GPU of a cp group and needs --plan-only: measuring it takes %d "
        "GPUs (`scripts/launch.sh --gpus %d -- --bench --cp %d ...`, or bench-attention --cp %d "
        "for the ring on one GPU)", opt.cp, opt.cp, opt.cp, opt.cp, opt.cp);
  for (int T : opt.seq_lens)
    CHECK(T >= 2 * opt.cp, "--seq-lens: %d is shorter than 2 * --cp = %d: the zigzag split cuts "
          "each sequence into 2*cp chunks of at least one token; drop it or lower --cp", T,
          2 * opt.cp);
  check_at_least("--warmup", opt.warmup, 0);
  check_at_least("--steps", opt.steps, 1);
  check_at_least("--vocab", opt.vocab, 2);
  CHECK(!opt.out_dir.empty(), "profile: --out is empty; give a directory");
  CHECK(opt.gpu_memory_gib >= 0 && std::isfinite(opt.gpu_memory_gib),
        "--gpu-memory %g must be a number of GiB >= 0 (0: the GPU's)", opt.gpu_memory_gib);
  CHECK(opt.gpu_memory_gib <= kMaxGpuMemoryGiB,
        "--gpu-memory %g GiB is more than any GPU holds; give the device's memory in GiB "
        "(at most %.0f)", opt.gpu_memory_gib, kMaxGpuMemoryGiB);
  CHECK(opt.max_step_seconds > 0, "--max-step-seconds must be > 0 (got %g)", opt.max_step_seconds);
  gpt_preset(opt.model, opt.vocab, 1);  // throws naming --model
  return true;
}

bool parse_bench_attention_options(int argc, char** argv, BenchAttentionOptions& opt) {
  cxxopts::Options o("bench-attention",
                     "flashgpt bench-attention: time the GPU attention backends (forward, "
                     "backward, forward+backward; TFLOP/s and extra memory)");
  const BenchAttentionOptions d;
  // clang-format off
  o.add_options()
    ("backends", "attention backends, comma-separated: " + attn_help(AttnAuto::refused), cxxopts::value<std::vector<std::string>>()->default_value(join(d.backends)))
    ("hs", "head sizes", cxxopts::value<std::vector<int>>()->default_value(join(d.head_sizes)))
    ("seq-lens", "sequence lengths T", cxxopts::value<std::vector<int>>()->default_value(join(d.seq_lens)))
    ("tokens", "tokens per batch: B = max(1, tokens / T)", cxxopts::value<int>()->default_value(std::to_string(d.tokens)))
    ("causal", "1 causal, 0 not (our backends are causal only)", cxxopts::value<std::vector<int>>()->default_value(join(d.causal)))
    ("heads", "query heads NH (0: 12 for HS 64, 16 for HS 128, else C/HS with C = 768)", cxxopts::value<int>()->default_value("0"))
    ("kv-heads", "key/value heads NKV (0: = NH)", cxxopts::value<int>()->default_value("0"))
    ("warmup", "untimed runs before each measurement", cxxopts::value<int>()->default_value(std::to_string(d.warmup)))
    ("iters", "timed runs per measurement (median reported)", cxxopts::value<int>()->default_value(std::to_string(d.iters)))
    ("budget-ms", "at most this much GPU time per measurement (at least 3 runs)", cxxopts::value<float>()->default_value("3000"))
    ("warmup-ms", "untimed runs before each measurement until this much GPU time has passed (sustained-load clocks; 0: --warmup runs only)", cxxopts::value<float>()->default_value("500"))
    ("deterministic", "time the backward with --deterministic (dQ summed in a fixed order)")
    ("cp", "also time the context-parallel ring with this many virtual ranks on this one GPU (backends with ring hooks: flash, flash3)", cxxopts::value<int>()->default_value("1"))
    ("csv", "also write the results to this CSV file", cxxopts::value<std::string>()->default_value(""))
    ("h,help", "this help");
  // clang-format on
  cxxopts::ParseResult r;
  if (!parse_command_line(o, "bench-attention", argc, argv, r)) return false;
  opt.backends = parse_attn_list("--backends", get<std::vector<std::string>>(r, "backends"));
  opt.head_sizes = get<std::vector<int>>(r, "hs");
  opt.seq_lens = get<std::vector<int>>(r, "seq-lens");
  opt.causal = get<std::vector<int>>(r, "causal");
  opt.tokens = get<int>(r, "tokens");
  opt.heads = get<int>(r, "heads");
  opt.kv_heads = get<int>(r, "kv-heads");
  opt.warmup = get<int>(r, "warmup");
  opt.iters = get<int>(r, "iters");
  opt.budget_ms = get<float>(r, "budget-ms");
  opt.warmup_ms = get<float>(r, "warmup-ms");
  opt.deterministic = r.count("deterministic") > 0;
  opt.cp = get<int>(r, "cp");
  opt.csv_path = get<std::string>(r, "csv");
  check_at_least("--cp", opt.cp, 1);
  CHECK(opt.cp == 1 || !opt.deterministic,
        "--deterministic with --cp %d: the ring's backward adds dQ in arrival order; drop one",
        opt.cp);
  check_list_at_least("--hs", opt.head_sizes, 1);
  check_list_at_least("--seq-lens", opt.seq_lens, 1);
  CHECK(!opt.causal.empty(), "--causal is empty; give 1 and/or 0");
  for (int c : opt.causal) CHECK(c == 0 || c == 1, "--causal takes 1 and/or 0, not %d", c);
  check_at_least("--tokens", opt.tokens, 1);
  check_at_least("--heads", opt.heads, 0, "; 0 = from the head size");
  check_at_least("--kv-heads", opt.kv_heads, 0, "; 0 = --heads");
  check_at_least("--warmup", opt.warmup, 0);
  check_at_least("--iters", opt.iters, 1);
  CHECK(opt.budget_ms > 0, "--budget-ms must be > 0 (got %g)", opt.budget_ms);
  CHECK(opt.warmup_ms >= 0, "--warmup-ms must be >= 0 (got %g)", opt.warmup_ms);
  return true;
}

bool parse_bench_kernels_options(int argc, char** argv, BenchKernelsOptions& opt) {
  cxxopts::Options o("bench-kernels",
                     "flashgpt bench-kernels: time the model's kernels (besides attention), decode "
                     "attention and a d12 training step on the GPU");
  const BenchKernelsOptions d;
  // clang-format off
  o.add_options()
    ("only", "sections, comma-separated: " + join(d.only), cxxopts::value<std::vector<std::string>>()->default_value(join(d.only)))
    ("attn", "attention backend of the step section: " + attn_help(AttnAuto::refused), cxxopts::value<std::string>()->default_value(d.attn))
    ("batch", "sequences of 1024 tokens in the step section", cxxopts::value<int>()->default_value(std::to_string(d.batch)))
    ("h,help", "this help");
  // clang-format on
  cxxopts::ParseResult r;
  if (!parse_command_line(o, "bench-kernels", argc, argv, r)) return false;
  opt.only = get<std::vector<std::string>>(r, "only");
  opt.attn = parse_attn(get<std::string>(r, "attn"), AttnAuto::refused);
  opt.batch = get<int>(r, "batch");
  CHECK(!opt.only.empty(), "--only is empty; give one or more of %s", join(d.only).c_str());
  for (const std::string& s : opt.only)
    CHECK(std::find(d.only.begin(), d.only.end(), s) != d.only.end(),
          "--only '%s' is unknown; use one or more of %s", s.c_str(), join(d.only).c_str());
  check_at_least("--batch", opt.batch, 1);
  return true;
}

