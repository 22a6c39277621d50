// options.cpp — cxxopts parsing and validation for the benchmark subcommands (options.h).
#include "bench/options.h"

#include <algorithm>
#include <cmath>

#include "kernels/attention/backends.h"
#include "kernels/common.h"
#include "model/cli_table.h"
#include "model/config.h"

using cli::attn_help;
using cli::check_at_least;
using cli::check_list_at_least;
using cli::check_tokens_per_pass;
using cli::join;
using cli::parse_attn_list;


namespace {

const char* const kDocLenHelp =
    "with --mask document: random documents of this mean length in tokens (an end-of-text token "
    "at each position with probability 1/N); 0 = none";

// --doc-len N (and profile's --data DIR): the documents the document mask needs, and nothing
// without it. reads_data: the command takes --data.
void check_document_source(const MaskSpec& mask, int doc_len, bool reads_data, bool data_given) {
  cli::check_at_least("--doc-len", doc_len, 0, "; 0 = no synthetic documents");
  const bool document = mask.kind == MaskKind::kDocument;
  CHECK(!document || doc_len > 0 || data_given, "--mask document needs documents: give %s"
        "--doc-len N (random documents of mean length N)",
        reads_data ? "--data DIR (its training shards') or " : "");
  CHECK(document || (doc_len == 0 && !data_given), "%s documents to --mask document; with --mask "
        "%s it changes nothing: drop it", data_given ? "--data gives" : "--doc-len gives",
        mask_kind_name(mask.kind));
}

}  // namespace

int profile_batch(const ProfileOptions& opt, int T) {
  return opt.batch > 0 ? opt.batch : std::max(1, opt.tokens / T);
}

bool parse_profile_options(int argc, char** argv, ProfileOptions& opt) {
  cli::Table t(opt, "profile",
               "flashgpt profile: sweep the context length for a model and attention backends; "
               "measured peak memory, step time and attention time beside the memory plan and a "
               "roofline");
  std::string recompute = recompute_name(opt.recompute), pos = pos_name(opt.pos);
  t.add("model", "model preset: tiny|d6|d12|d24|d36|d48", opt.model)
    .add("attn", "attention backends, comma-separated: " + attn_help(AttnAuto::refused), opt.attn)
    .add("seq-lens", "sequence lengths T, comma-separated", opt.seq_lens)
    .add("tokens", "tokens per step: B = max(1, tokens / T)", opt.tokens)
    .add("batch", "batch size B at every T (overrides --tokens); 0 = from --tokens", opt.batch)
    .add("warmup", "untimed training steps per point", opt.warmup)
    .add("steps", "timed training steps per point (median reported)", opt.steps)
    .add("cp", "context-parallel degree of `train --cp`: plan one GPU of a cp group, which holds T/cp tokens of each sequence (with --plan-only)", opt.cp)
    .add("vocab", "vocabulary size", opt.vocab)
    .add("out", "output directory (profile.csv, profile.json, PNG plots)", opt.out_dir)
    .on("plan-only", "print the predicted table only; no GPU needed", opt.plan_only)
    .add("plot", "make the PNG plots with scripts/plot_profile.py (--plot=false: no plots)", opt.plot)
    .add("gpu-memory", "GiB of device memory for --plan-only (0: the GPU's, else 80)", opt.gpu_memory_gib)
    .add("max-step-seconds", "skip a backend's larger T once its predicted step time exceeds this", opt.max_step_seconds)
    .add("seed", "random seed (parameters and tokens)", opt.seed)
    .add("recompute", "activation recomputation: " + recompute_names_list() + " (model/recompute.h)", recompute)
    .add("pos", "positions: rope (no parameters) | learned (a maxT x C table per point)", pos);
  cli::add_mask_flags(t, opt.mask);
  t.add("doc-len", kDocLenHelp, opt.doc_len)
    .add("data", "with --mask document: the documents of this directory's training shards (made by `flashgpt prepare`, or llm.c's: train_*.bin) instead of --doc-len's", opt.data_dir);
  if (!t.parse(argc, argv)) return false;
  opt.attn = parse_attn_list("--attn", opt.attn);
  opt.recompute = parse_recompute(recompute);
  opt.pos = parse_pos(pos);
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
  check_document_source(opt.mask, opt.doc_len, true, !opt.data_dir.empty());
  CHECK(opt.data_dir.empty() || opt.doc_len == 0, "--data and --doc-len both give documents; "
        "drop one");
  CHECK(opt.cp == 1 || opt.mask.is_causal(), "profile --cp %d --mask %s: the plan of a cp rank "
        "counts the causal work; drop --mask or --cp", opt.cp, describe_mask(opt.mask).c_str());
  return true;
}

bool parse_bench_attention_options(int argc, char** argv, BenchAttentionOptions& opt) {
  cli::Table t(opt, "bench-attention",
               "flashgpt bench-attention: time the GPU attention backends (forward, backward, "
               "forward+backward; TFLOP/s and extra memory)");
  t.add("backends", "attention backends, comma-separated: " + attn_help(AttnAuto::refused), opt.backends)
    .add("hs", "head sizes", opt.head_sizes)
    .add("seq-lens", "sequence lengths T", opt.seq_lens)
    .add("tokens", "tokens per batch: B = max(1, tokens / T)", opt.tokens)
    .add("causal", "1 causal, 0 not (our backends are causal only)", opt.causal)
    .add("heads", "query heads NH (0: 12 for HS 64, 16 for HS 128, else C/HS with C = 768)", opt.heads)
    .add("kv-heads", "key/value heads NKV (0: = NH)", opt.kv_heads)
    .add("warmup", "untimed runs before each measurement", opt.warmup)
    .add("iters", "timed runs per measurement (median reported)", opt.iters)
    .add("budget-ms", "at most this much GPU time per measurement (at least 3 runs)", opt.budget_ms)
    .add("warmup-ms", "untimed runs before each measurement until this much GPU time has passed (sustained-load clocks; 0: --warmup runs only)", opt.warmup_ms)
    .add("idle-ms", "leave the GPU idle this long before each measurement, so that it starts at its idle clock (a burst, as published attention benchmarks time; use with --warmup-ms 0)", opt.idle_ms)
    .on("deterministic", "time the backward with --deterministic (dQ summed in a fixed order)", opt.deterministic)
    .add("cp", "also time the context-parallel ring with this many virtual ranks on this one GPU (backends with ring hooks: flash, flash3)", opt.cp)
    .add("csv", "also write the results to this CSV file", opt.csv_path);
  cli::add_mask_flags(t, opt.mask);
  t.add("doc-len", kDocLenHelp, opt.doc_len);
  if (!t.parse(argc, argv)) return false;
  check_document_source(opt.mask, opt.doc_len, false, false);
  opt.backends = parse_attn_list("--backends", opt.backends);
  check_at_least("--cp", opt.cp, 1);
  CHECK(opt.cp == 1 || opt.mask.is_causal(),
        "--cp %d with --mask document or --window: bench-attention times the ring with the causal "
        "mask only; drop --cp or the mask", opt.cp);
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
  CHECK(opt.idle_ms >= 0, "--idle-ms must be >= 0 (got %g)", opt.idle_ms);
  return true;
}

bool parse_bench_kernels_options(int argc, char** argv, BenchKernelsOptions& opt) {
  const BenchKernelsOptions d;
  cli::Table t(opt, "bench-kernels",
               "flashgpt bench-kernels: time the model's kernels (besides attention), decode "
               "attention and a d12 training step on the GPU");
  t.add("only", "sections, comma-separated: " + join(d.only), opt.only)
    .add("attn", "attention backend of the step section: " + attn_help(AttnAuto::refused), opt.attn)
    .add("batch", "sequences of 1024 tokens in the step section", opt.batch)
    .on("tune-matmul", "the products (kernels and step sections) as `train --tune-matmul` runs them", opt.tune_matmul);
  if (!t.parse(argc, argv)) return false;
  opt.attn = parse_attn(opt.attn, AttnAuto::refused);
  CHECK(!opt.only.empty(), "--only is empty; give one or more of %s", join(d.only).c_str());
  for (const std::string& s : opt.only)
    CHECK(std::find(d.only.begin(), d.only.end(), s) != d.only.end(),
          "--only '%s' is unknown; use one or more of %s", s.c_str(), join(d.only).c_str());
  check_at_least("--batch", opt.batch, 1);
  return true;
}

