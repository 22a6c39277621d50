// options.cpp — cxxopts parsing and validation for the subcommands.
#include "train/options.h"

#include "model/model.h"

#include <cxxopts.hpp>
#include <climits>
#include <cmath>
#include <iostream>
#include <new>

#include "data/prepare.h"
#include "kernels/attention/backends.h"
#include "kernels/common.h"

namespace {

// cxxopts reports its own errors with exceptions; turn them into our one-line errors.
cxxopts::ParseResult parse_or_explain(cxxopts::Options& o, const char* cmd, int argc, char** argv) {
  try {
    return o.parse(argc, argv);
  } catch (const cxxopts::exceptions::incorrect_argument_type& e) {
    // cxxopts names the value but not the flag: find the flag that carried it.
    std::string what = e.what();
    for (int i = 1; i < argc; i++) {
      std::string a = argv[i];
      size_t eq = a.find('=');
      bool inline_value = a.rfind("--", 0) == 0 && eq != std::string::npos &&
                          what.find("‘" + a.substr(eq + 1) + "’") != std::string::npos;
      bool next_value = a.rfind("--", 0) == 0 && i + 1 < argc &&
                        what.find("‘" + std::string(argv[i + 1]) + "’") != std::string::npos;
      if (inline_value || next_value) {
        std::string flag = inline_value ? a.substr(0, eq) : a;
        std::string value = inline_value ? a.substr(eq + 1) : argv[i + 1];
        THROW_ERROR("%s: '%s' is not a valid value for %s; see `flashgpt %s --help`", cmd, value.c_str(),
                    flag.c_str(), cmd);
      }
    }
    THROW_ERROR("%s: %s; see `flashgpt %s --help`", cmd, what.c_str(), cmd);
  } catch (const cxxopts::exceptions::exception& e) {
    THROW_ERROR("%s: %s; see `flashgpt %s --help`", cmd, e.what(), cmd);
  }
}

template <typename T>
T get(const cxxopts::ParseResult& r, const char* name) {
  try {
    return r[name].as<T>();
  } catch (const cxxopts::exceptions::exception& e) {
    THROW_ERROR("--%s: %s", name, e.what());
  }
}

// Every subcommand's parse ends the same way: a stray argument is an error; --help prints the
// options and the command stops (returns true).
bool help_requested(cxxopts::Options& o, const cxxopts::ParseResult& r, const char* cmd) {
  CHECK(r.unmatched().empty(), "%s: unexpected argument '%s'; see `flashgpt %s --help`", cmd,
        r.unmatched()[0].c_str(), cmd);
  if (!r.count("help")) return false;
  std::cout << o.help() << std::endl;
  return true;
}

}  // namespace

bool parse_train_options(int argc, char** argv, TrainOptions& opt) {
  cxxopts::Options o("train", "flashgpt train: train a GPT-2 model on token shards");
  TrainOptions d;  // defaults for the help text
  // clang-format off
  o.add_options("data")
    ("data", "directory made by `flashgpt prepare` (train_*.bin, val_*.bin, tokenizer.bin)", cxxopts::value<std::string>())
    ("train-pattern", "glob of training shards (llm.c format), overrides --data", cxxopts::value<std::string>())
    ("val-pattern", "glob of validation shards", cxxopts::value<std::string>())
    ("tokenizer", "tokenizer file (flashgpt's, or llm.c's gpt2_tokenizer.bin) to decode samples", cxxopts::value<std::string>())
    ("vocab-size", "vocabulary size when there is no tokenizer and no --init", cxxopts::value<int>()->default_value("0"));
  o.add_options("model")
    ("model", "preset: tiny|d6|d12|d24|d36|d48 (d12 = GPT-2 124M)", cxxopts::value<std::string>()->default_value(d.model))
    ("layers", "override the preset's layers", cxxopts::value<int>()->default_value("0"))
    ("heads", "override the preset's attention heads", cxxopts::value<int>()->default_value("0"))
    ("kv-heads", "key/value heads (grouped-query attention); default = --heads", cxxopts::value<int>()->default_value("0"))
    ("channels", "override the preset's channels", cxxopts::value<int>()->default_value("0"))
    ("max-seq-len", "position-embedding rows (default: --seq-len)", cxxopts::value<int>()->default_value("0"))
    ("init", "start from this model: a flashgpt or llm.c (version 3/5) file, or a Hugging Face GPT-2 directory / .safetensors file", cxxopts::value<std::string>())
    ("attn", "attention: auto (GPU: the first of " + attention_names_list() + " that supports the model; CPU: flash) | flash3 (FlashAttention-3 schedule, sm_90a, GPU only) | flash (FlashAttention-2) | naive (saves P) | flash1 (FlashAttention-1 loop order) | scalar (fp32 CUDA cores, GPU only)", cxxopts::value<std::string>()->default_value(d.attn))
    ("device", "auto|cpu|cuda (auto = cuda when a GPU is present)", cxxopts::value<std::string>()->default_value(d.device))
    ("pos", "positions: learned (GPT-2's wpe, caps the context at --max-seq-len) | rope (rotary, no wpe)", cxxopts::value<std::string>()->default_value(d.pos))
    ("rope-theta", "RoPE base", cxxopts::value<float>()->default_value("10000"))
    ("recompute", "activation memory: none | gelu (recompute GELU in backward) | layer (keep only each block's input)", cxxopts::value<std::string>()->default_value(d.recompute))
    ("classifier-chunk", "rows of logits at once in the classifier (0 = 8192)", cxxopts::value<int>()->default_value("0"))
    ("deterministic", "bitwise-reproducible training on the GPU: flash and flash3 sum dQ in a fixed order (13-25% slower attention backward)");
  o.add_options("optimisation")
    ("seq-len", "sequence length T", cxxopts::value<int>()->default_value(std::to_string(d.seq_len)))
    ("batch", "micro-batch B (sequences per forward pass)", cxxopts::value<int>()->default_value(std::to_string(d.batch)))
    ("total-batch", "tokens per optimizer step (gradient accumulation when > batch*seq-len); 0 = batch*seq-len", cxxopts::value<int64_t>()->default_value("0"))
    ("steps", "optimizer steps", cxxopts::value<int>()->default_value(std::to_string(d.steps)))
    ("lr", "peak learning rate", cxxopts::value<float>()->default_value("6e-4"))
    ("warmup", "linear warm-up steps", cxxopts::value<int>()->default_value(std::to_string(d.warmup)))
    ("lr-final-frac", "cosine decay ends at lr * this", cxxopts::value<float>()->default_value("0.1"))
    ("weight-decay", "AdamW decoupled weight decay (matrices only)", cxxopts::value<float>()->default_value("0.1"))
    ("grad-clip", "clip the global gradient norm to this (0 = off)", cxxopts::value<float>()->default_value("1.0"))
    ("seed", "random seed (initialisation, data order, samples)", cxxopts::value<uint64_t>()->default_value("1337"))
    ("no-shuffle", "read the training shards in order");
  o.add_options("output")
    ("eval-every", "evaluate on val every N steps (0 = only at the end)", cxxopts::value<int>()->default_value(std::to_string(d.eval_every)))
    ("eval-steps", "validation batches per evaluation", cxxopts::value<int>()->default_value(std::to_string(d.eval_steps)))
    ("sample-every", "print a sample every N steps (0 = off)", cxxopts::value<int>()->default_value(std::to_string(d.sample_every)))
    ("sample-tokens", "tokens per sample", cxxopts::value<int>()->default_value(std::to_string(d.sample_tokens)))
    ("checkpoint-every", "write a checkpoint every N steps (and at the end) into --out", cxxopts::value<int>()->default_value("0"))
    ("out", "output directory for checkpoints (none without it)", cxxopts::value<std::string>())
    ("resume", "continue from the latest checkpoint in --out")
    ("log", "write one JSON object per step to this file", cxxopts::value<std::string>())
    ("bench", "benchmark: random tokens, no data; prints median ms/step, tokens/s, MFU")
    ("bench-steps", "timed steps in --bench (after 3 warm-up steps)", cxxopts::value<int>()->default_value("20"))
    ("quiet", "print only eval lines and the summary")
    ("h,help", "this help");
  o.add_options("multi-GPU (one process per GPU; default from RANK/WORLD_SIZE/LOCAL_RANK, OMPI_COMM_WORLD_*, SLURM_*)")
    ("rank", "this process's rank (-1: from the environment, else 0)", cxxopts::value<int>()->default_value("-1"))
    ("world-size", "number of processes (-1: from the environment, else 1)", cxxopts::value<int>()->default_value("-1"))
    ("local-rank", "GPU index on this node, for cudaSetDevice (-1: from the environment, else the rank)", cxxopts::value<int>()->default_value("-1"))
    ("dist-init", "NCCL id exchange: file:///shared/path or tcp://host:port", cxxopts::value<std::string>())
    ("zero", "0 = plain data parallel, 1 = ZeRO-1 (AdamW state sharded)", cxxopts::value<int>()->default_value("0"))
    ("no-overlap", "all-reduce the gradients once after the backward, not per layer during it")
    ("dist-timeout", "seconds to wait for the other ranks (id exchange, collectives)", cxxopts::value<double>()->default_value("300"));
  // clang-format on
  auto r = parse_or_explain(o, "train", argc, argv);
  if (help_requested(o, r, "train")) return false;
  if (r.count("data")) opt.data_dir = get<std::string>(r, "data");
  if (r.count("train-pattern")) opt.train_pattern = get<std::string>(r, "train-pattern");
  if (r.count("val-pattern")) opt.val_pattern = get<std::string>(r, "val-pattern");
  if (r.count("tokenizer")) opt.tokenizer_path = get<std::string>(r, "tokenizer");
  opt.vocab_size = get<int>(r, "vocab-size");
  opt.model = get<std::string>(r, "model");
  opt.layers = get<int>(r, "layers");
  opt.heads = get<int>(r, "heads");
  opt.kv_heads = get<int>(r, "kv-heads");
  opt.channels = get<int>(r, "channels");
  opt.max_seq_len = get<int>(r, "max-seq-len");
  opt.model_given = r.count("model") || r.count("layers") || r.count("heads") ||
                    r.count("kv-heads") || r.count("channels") || r.count("pos");
  if (r.count("init")) opt.init_path = get<std::string>(r, "init");
  opt.attn = get<std::string>(r, "attn");
  opt.device = get<std::string>(r, "device");
  opt.pos = get<std::string>(r, "pos");
  opt.rope_theta = get<float>(r, "rope-theta");
  opt.recompute = get<std::string>(r, "recompute");
  opt.deterministic = r.count("deterministic") > 0;
  opt.classifier_chunk = get<int>(r, "classifier-chunk");
  CHECK(opt.pos == "learned" || opt.pos == "rope", "--pos '%s' is unknown; use learned or rope",
        opt.pos.c_str());
  CHECK(std::isfinite(opt.rope_theta) && opt.rope_theta > 1.0f,
        "--rope-theta must be a finite number greater than 1 (got %g)", opt.rope_theta);
  validate_recompute(opt.recompute);
  CHECK(opt.classifier_chunk >= 0, "--classifier-chunk must be >= 0 (got %d)",
        opt.classifier_chunk);
  opt.seq_len = get<int>(r, "seq-len");
  opt.batch = get<int>(r, "batch");
  opt.total_batch = get<int64_t>(r, "total-batch");
  opt.steps = get<int>(r, "steps");
  opt.lr = get<float>(r, "lr");
  opt.warmup = get<int>(r, "warmup");
  opt.lr_final_frac = get<float>(r, "lr-final-frac");
  opt.weight_decay = get<float>(r, "weight-decay");
  opt.grad_clip = get<float>(r, "grad-clip");
  opt.seed = get<uint64_t>(r, "seed");
  opt.shuffle = r.count("no-shuffle") == 0;
  opt.eval_every = get<int>(r, "eval-every");
  opt.eval_steps = get<int>(r, "eval-steps");
  opt.sample_every = get<int>(r, "sample-every");
  opt.sample_tokens = get<int>(r, "sample-tokens");
  opt.checkpoint_every = get<int>(r, "checkpoint-every");
  if (r.count("out")) opt.out_dir = get<std::string>(r, "out");
  opt.resume = r.count("resume") > 0;
  if (r.count("log")) opt.log_path = get<std::string>(r, "log");
  opt.bench = r.count("bench") > 0;
  opt.bench_steps = get<int>(r, "bench-steps");
  opt.quiet = r.count("quiet") > 0;
  opt.zero = get<int>(r, "zero");
  opt.overlap_comm = r.count("no-overlap") == 0;
  opt.dist_timeout = get<double>(r, "dist-timeout");
  CHECK(opt.zero == 0 || opt.zero == 1, "--zero %d is not supported; use 0 or 1", opt.zero);
  CHECK(opt.dist_timeout > 0, "--dist-timeout must be > 0 seconds (got %g)", opt.dist_timeout);
  for (const char* f : {"rank", "world-size", "local-rank"})
    CHECK(!r.count(f) || get<int>(r, f) >= 0, "--%s must be >= 0 (got %d)", f, get<int>(r, f));
  opt.dist = resolve_dist_config(get<int>(r, "rank"), get<int>(r, "world-size"),
                                 get<int>(r, "local-rank"),
                                 r.count("dist-init") ? get<std::string>(r, "dist-init") : "");
  CHECK(opt.dist.world_size == 1 || opt.device != "cpu",
        "--device cpu trains in one process; a world of %d needs --device cuda (or auto)",
        opt.dist.world_size);

  // Validation of single values; cross-checks against data and model happen in run_train.
  CHECK(opt.bench || !opt.data_dir.empty() || !opt.train_pattern.empty(),
        "train: no data; give --data DIR (made by `flashgpt prepare`) or --train-pattern GLOB");
  CHECK(opt.seq_len >= 1, "--seq-len must be at least 1 (got %d)", opt.seq_len);
  CHECK(opt.batch >= 1, "--batch must be at least 1 (got %d)", opt.batch);
  CHECK(opt.steps >= 1, "--steps must be at least 1 (got %d)", opt.steps);
  CHECK(opt.total_batch >= 0, "--total-batch must be >= 0 (got %lld)", (long long)opt.total_batch);
  // One step over all ranks takes world x batch x seq-len tokens per micro-step.
  const int world = opt.dist.world_size;
  CHECK((int64_t)opt.batch * opt.seq_len <= INT_MAX, "--batch %d x --seq-len %d = %lld tokens per "
        "micro-step is more than %d; lower --batch (and use --total-batch for a bigger step)",
        opt.batch, opt.seq_len, (long long)opt.batch * opt.seq_len, INT_MAX);
  int64_t micro = (int64_t)opt.batch * opt.seq_len * world;
  if (opt.total_batch == 0) opt.total_batch = micro;
  if (world == 1)
    CHECK(opt.total_batch % micro == 0,
          "--total-batch %lld is not a multiple of --batch x --seq-len = %lld; make it one",
          (long long)opt.total_batch, (long long)micro);
  else
    CHECK(opt.total_batch % micro == 0,
          "--total-batch %lld is not a multiple of --batch x --seq-len x world size = %d x %d x %d "
          "= %lld; make it one", (long long)opt.total_batch, opt.batch, opt.seq_len, world,
          (long long)micro);
  CHECK(opt.lr > 0 && opt.lr < 1, "--lr must be in (0, 1) (got %g)", opt.lr);
  CHECK(opt.warmup >= 0, "--warmup must be >= 0 (got %d)", opt.warmup);
  CHECK(opt.lr_final_frac >= 0 && opt.lr_final_frac <= 1, "--lr-final-frac must be in [0, 1] (got %g)",
        opt.lr_final_frac);
  CHECK(opt.weight_decay >= 0, "--weight-decay must be >= 0 (got %g)", opt.weight_decay);
  CHECK(opt.grad_clip >= 0, "--grad-clip must be >= 0 (got %g)", opt.grad_clip);
  if (opt.attn != "auto") attention_spec(opt.attn);  // an unknown --attn throws, listing them
  CHECK(opt.device == "auto" || opt.device == "cpu" || opt.device == "cuda",
        "--device '%s' is unknown; use auto, cpu or cuda", opt.device.c_str());
  CHECK(opt.eval_every >= 0 && opt.eval_steps >= 1, "--eval-every must be >= 0 and --eval-steps >= 1");
  CHECK(opt.sample_every >= 0 && opt.sample_tokens >= 1,
        "--sample-every must be >= 0 and --sample-tokens >= 1");
  CHECK(opt.checkpoint_every >= 0, "--checkpoint-every must be >= 0");
  CHECK(!opt.resume || !opt.out_dir.empty(), "--resume needs --out DIR (where the checkpoints are)");
  CHECK(opt.checkpoint_every == 0 || !opt.out_dir.empty(),
        "--checkpoint-every needs --out DIR to write into");
  CHECK(opt.bench_steps >= 1, "--bench-steps must be at least 1");
  // 0 means "the preset's" only when the flag is absent: given, each must be a real size.
  for (const char* f : {"layers", "heads", "kv-heads", "channels", "max-seq-len"})
    CHECK(!r.count(f) || get<int>(r, f) >= 1, "--%s must be at least 1 (got %d); leave it out to "
          "use the preset's", f, get<int>(r, f));
  CHECK(!r.count("vocab-size") || opt.vocab_size >= 2, "--vocab-size must be at least 2 (got %d)",
        opt.vocab_size);
  CHECK(opt.total_batch / micro <= INT_MAX, "--total-batch %lld is %lld micro-steps of --batch x "
        "--seq-len%s, more than the %d one optimizer step can count; lower --total-batch",
        (long long)opt.total_batch, (long long)(opt.total_batch / micro),
        world > 1 ? " x world size" : "", INT_MAX);
  // Decoupled weight decay multiplies each matrix by (1 - lr x wd) per step: at lr x wd >= 1
  // the weights flip sign and grow instead of decaying.
  CHECK((double)opt.lr * opt.weight_decay < 1.0, "--weight-decay %g with --lr %g scales the weights "
        "by 1 - lr x wd = %g per step, which does not decay them; use a value below %g (typical: "
        "0.1)", opt.weight_decay, opt.lr, 1.0 - (double)opt.lr * opt.weight_decay, 1.0 / opt.lr);
  return true;
}

constexpr int kMaxSampleTokens = 100000000;

bool parse_sample_options(int argc, char** argv, SampleOptions& opt) {
  cxxopts::Options o("sample", "flashgpt sample: generate text from a checkpoint");
  // clang-format off
  o.add_options()
    ("checkpoint", "model: flashgpt or llm.c file, or Hugging Face GPT-2 directory", cxxopts::value<std::string>())
    ("tokenizer", "tokenizer file (default: tokenizer.bin beside the checkpoint)", cxxopts::value<std::string>())
    ("prompt", "text to continue", cxxopts::value<std::string>()->default_value(""))
    ("tokens", "tokens to generate", cxxopts::value<int>()->default_value("256"))
    ("temperature", "softmax temperature (0 = greedy)", cxxopts::value<float>()->default_value("1.0"))
    ("top-k", "sample among the k most likely tokens (0 = all)", cxxopts::value<int>()->default_value("0"))
    ("seed", "random seed", cxxopts::value<uint64_t>()->default_value("1337"))
    ("device", "auto|cpu|cuda (auto = cuda when a GPU is present)", cxxopts::value<std::string>()->default_value("auto"))
    ("attn", "attention for the prompt: auto (GPU: the first of " + attention_names_list() + " that supports the model; CPU: flash) or one of them", cxxopts::value<std::string>()->default_value("auto"))
    ("context", "tokens the model sees at once (0 = the model's maximum; RoPE models may go beyond it); a longer prompt or output slides the window", cxxopts::value<int>()->default_value("0"))
    ("no-kv-cache", "recompute the whole context for every new token (no KV cache)")
    ("h,help", "this help");
  // clang-format on
  auto r = parse_or_explain(o, "sample", argc, argv);
  if (help_requested(o, r, "sample")) return false;
  CHECK(r.count("checkpoint"), "sample: --checkpoint FILE is required (a model_*.bin from train --out)");
  opt.checkpoint = get<std::string>(r, "checkpoint");
  if (r.count("tokenizer")) opt.tokenizer_path = get<std::string>(r, "tokenizer");
  opt.prompt = get<std::string>(r, "prompt");
  opt.tokens = get<int>(r, "tokens");
  opt.temperature = get<float>(r, "temperature");
  opt.top_k = get<int>(r, "top-k");
  opt.seed = get<uint64_t>(r, "seed");
  opt.device = get<std::string>(r, "device");
  opt.attn = get<std::string>(r, "attn");
  opt.context = get<int>(r, "context");
  opt.kv_cache = r.count("no-kv-cache") == 0;
  CHECK(opt.tokens >= 1 && opt.tokens <= kMaxSampleTokens,
        "--tokens must be in [1, %d] (got %d): every generated id is kept in memory", kMaxSampleTokens,
        opt.tokens);
  CHECK(opt.context >= 0, "--context must be >= 0 (got %d); 0 = the model's maximum", opt.context);
  if (opt.attn != "auto") attention_spec(opt.attn);  // an unknown --attn throws, listing them
  CHECK(opt.temperature >= 0, "--temperature must be >= 0 (got %g)", opt.temperature);
  CHECK(opt.top_k >= 0, "--top-k must be >= 0 (got %d)", opt.top_k);
  CHECK(opt.device == "auto" || opt.device == "cpu" || opt.device == "cuda",
        "--device '%s' is unknown; use auto, cpu or cuda", opt.device.c_str());
  return true;
}

bool parse_eval_options(int argc, char** argv, EvalOptions& opt) {
  cxxopts::Options o("eval", "flashgpt eval: loss, perplexity and bits per byte of a checkpoint on token shards");
  // clang-format off
  o.add_options()
    ("checkpoint", "model: flashgpt or llm.c file, or Hugging Face GPT-2 directory", cxxopts::value<std::string>())
    ("data", "directory made by `flashgpt prepare`: its val_*.bin", cxxopts::value<std::string>())
    ("val-pattern", "glob of shards to evaluate on (overrides --data's)", cxxopts::value<std::string>())
    ("tokenizer", "for bits per byte (default: tokenizer.bin beside the checkpoint, else --data's)", cxxopts::value<std::string>())
    ("batch", "sequences per forward pass", cxxopts::value<int>()->default_value("8"))
    ("seq-len", "tokens per sequence (0 = the model's maximum)", cxxopts::value<int>()->default_value("0"))
    ("steps", "batches to evaluate (0 = the whole split)", cxxopts::value<int64_t>()->default_value("0"))
    ("device", "auto|cpu|cuda (auto = cuda when a GPU is present)", cxxopts::value<std::string>()->default_value("auto"))
    ("attn", "auto (GPU: the first of " + attention_names_list() + " that supports the model; CPU: flash) or one of them", cxxopts::value<std::string>()->default_value("auto"))
    ("json", "also write the result as JSON to this file", cxxopts::value<std::string>())
    ("h,help", "this help");
  // clang-format on
  auto r = parse_or_explain(o, "eval", argc, argv);
  if (help_requested(o, r, "eval")) return false;
  CHECK(r.count("checkpoint"), "eval: --checkpoint FILE is required (a model_*.bin from train --out)");
  CHECK(r.count("data") || r.count("val-pattern"),
        "eval: no data; give --data DIR (made by `flashgpt prepare`) or --val-pattern GLOB");
  opt.checkpoint = get<std::string>(r, "checkpoint");
  if (r.count("data")) opt.data_dir = get<std::string>(r, "data");
  if (r.count("val-pattern")) opt.val_pattern = get<std::string>(r, "val-pattern");
  if (r.count("tokenizer")) opt.tokenizer_path = get<std::string>(r, "tokenizer");
  if (r.count("json")) opt.json_path = get<std::string>(r, "json");
  opt.batch = get<int>(r, "batch");
  opt.seq_len = get<int>(r, "seq-len");
  opt.steps = get<int64_t>(r, "steps");
  opt.device = get<std::string>(r, "device");
  opt.attn = get<std::string>(r, "attn");
  CHECK(opt.batch >= 1, "--batch must be at least 1 (got %d)", opt.batch);
  CHECK(opt.seq_len >= 0, "--seq-len must be >= 0 (got %d); 0 = the model's maximum", opt.seq_len);
  CHECK(opt.steps >= 0, "--steps must be >= 0 (got %lld); 0 = the whole split", (long long)opt.steps);
  CHECK(opt.device == "auto" || opt.device == "cpu" || opt.device == "cuda",
        "--device '%s' is unknown; use auto, cpu or cuda", opt.device.c_str());
  if (opt.attn != "auto") attention_spec(opt.attn);  // an unknown --attn throws, listing them
  return true;
}

bool parse_export_options(int argc, char** argv, ExportOptions& opt) {
  cxxopts::Options o("export", "flashgpt export: write a checkpoint in another model format");
  // clang-format off
  o.add_options()
    ("checkpoint", "model file (flashgpt or llm.c)", cxxopts::value<std::string>())
    ("out", "output directory (created if missing)", cxxopts::value<std::string>())
    ("format", "hf: Hugging Face GPT2LMHeadModel (model.safetensors + config.json)", cxxopts::value<std::string>()->default_value("hf"))
    ("h,help", "this help");
  // clang-format on
  auto r = parse_or_explain(o, "export", argc, argv);
  if (help_requested(o, r, "export")) return false;
  CHECK(r.count("checkpoint"), "export: --checkpoint FILE is required (a model_*.bin from train --out)");
  CHECK(r.count("out"), "export: --out DIR is required");
  opt.checkpoint = get<std::string>(r, "checkpoint");
  opt.out_dir = get<std::string>(r, "out");
  opt.format = get<std::string>(r, "format");
  CHECK(opt.format == "hf", "--format '%s' is unknown; use hf (Hugging Face GPT-2)", opt.format.c_str());
  return true;
}

bool parse_prepare_options(int argc, char** argv, PrepareOptions& opt) {
  cxxopts::Options o("prepare", "flashgpt prepare: text files -> BPE tokenizer + token shards");
  // clang-format off
  o.add_options()
    ("input", "text file(s); repeat the flag or list them after it", cxxopts::value<std::vector<std::string>>())
    ("out", "output directory", cxxopts::value<std::string>())
    ("vocab-size", "BPE vocabulary size (257..65536)", cxxopts::value<int>()->default_value("4096"))
    ("val-fraction", "share of documents for validation", cxxopts::value<double>()->default_value("0.05"))
    ("shard-tokens", "tokens per shard file", cxxopts::value<size_t>()->default_value("100000000"))
    ("seed", "random seed for the train/val split", cxxopts::value<uint64_t>()->default_value("1337"))
    ("h,help", "this help");
  // clang-format on
  o.parse_positional({"input"});  // so `--input a.txt b.txt c.txt` takes all three
  o.show_positional_help();        // and --help still lists --input
  auto r = parse_or_explain(o, "prepare", argc, argv);
  if (help_requested(o, r, "prepare")) return false;
  CHECK(r.count("input"), "prepare: --input FILE [FILE...] is required");
  CHECK(r.count("out"), "prepare: --out DIR is required");
  opt.inputs = get<std::vector<std::string>>(r, "input");
  opt.out_dir = get<std::string>(r, "out");
  opt.vocab_size = get<int>(r, "vocab-size");
  opt.val_fraction = get<double>(r, "val-fraction");
  opt.shard_tokens = get<size_t>(r, "shard-tokens");
  opt.seed = get<uint64_t>(r, "seed");
  return true;
}

std::string describe_failure(const std::string& command, const std::exception& e) {
  if (dynamic_cast<const std::bad_alloc*>(&e))
    return flashgpt::strformat("%s ran out of host memory (an allocation failed); lower --batch, "
                               "--seq-len or the model size", command.c_str());
  return e.what();
}
