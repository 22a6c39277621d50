// options.cpp — cxxopts parsing and validation for every subcommand (options.h). The top of the
// file is what the parsers share: reading the command line (naming the flag of a bad value),
// get<T>, and the validators; then one parser per subcommand. Over 600 lines on purpose: the
// whole command line in one file (issue 10), most of it the eight option tables.
#include "train/options.h"

#include "model/model.h"

#include <cxxopts.hpp>
#include <algorithm>
#include <climits>
#include <cmath>
#include <iostream>
#include <new>
#include <sstream>

#include "data/prepare.h"
#include "kernels/attention/backends.h"
#include "kernels/attention/context_parallel.h"
#include "kernels/common.h"
#include "model/config.h"

namespace {

// ---------------------------------------------------------------------------------------------
// Reading a command line

// cxxopts names a bad value but not the flag that carried it: the flag on the command line
// whose value is `value` (--flag value, --flag=value, or one item of --flag a,b,c), else "".
std::string flag_carrying(const std::string& value, int argc, char** argv) {
  for (int i = 1; i < argc; i++) {
    const std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) continue;
    const size_t eq = arg.find('=');
    const std::string flag = eq == std::string::npos ? arg : arg.substr(0, eq);
    const std::string given = eq != std::string::npos ? arg.substr(eq + 1)
                              : i + 1 < argc        ? std::string(argv[i + 1])
                                                    : std::string();
    if (given == value || ("," + given + ",").find("," + value + ",") != std::string::npos)
      return flag;
  }
  return "";
}

// Parses argv (argv[0]: the subcommand `cmd`) into r. An unknown flag, a value of the wrong
// type or a stray argument throws one line naming it. False when --help was asked for: the
// help is printed and the command stops.
bool parse_command_line(cxxopts::Options& o, const char* cmd, int argc, char** argv,
                        cxxopts::ParseResult& r) {
  try {
    r = o.parse(argc, argv);
  } catch (const cxxopts::exceptions::incorrect_argument_type& e) {
    const std::string what = e.what();
    const size_t a = what.find(cxxopts::LQUOTE);
    const size_t b = a == std::string::npos ? a : what.find(cxxopts::RQUOTE, a + 1);
    if (b != std::string::npos) {
      const std::string value = what.substr(a + cxxopts::LQUOTE.size(), b - a - cxxopts::LQUOTE.size());
      const std::string flag = flag_carrying(value, argc, argv);
      if (!flag.empty())
        THROW_ERROR("%s: '%s' is not a valid value for %s; see `flashgpt %s --help`", cmd,
                    value.c_str(), flag.c_str(), cmd);
    }
    THROW_ERROR("%s: %s; see `flashgpt %s --help`", cmd, what.c_str(), cmd);
  } catch (const cxxopts::exceptions::exception& e) {
    THROW_ERROR("%s: %s; see `flashgpt %s --help`", cmd, e.what(), cmd);
  }
  if (r.count("help")) {
    std::cout << o.help() << std::endl;
    return false;
  }
  CHECK(r.unmatched().empty(), "%s: unexpected argument '%s'; see `flashgpt %s --help`", cmd,
        r.unmatched().front().c_str(), cmd);
  return true;
}

template <typename T>
T get(const cxxopts::ParseResult& r, const char* flag) {
  try {
    return r[flag].as<T>();
  } catch (const cxxopts::exceptions::exception& e) {
    THROW_ERROR("--%s: %s", flag, e.what());
  }
}

template <typename T>
std::string join(const std::vector<T>& v) {  // a list's default value: "a,b,c"
  std::string s;
  for (const T& x : v) {
    std::ostringstream item;
    item << x;
    s += (s.empty() ? "" : ",") + item.str();
  }
  return s;
}

// ---------------------------------------------------------------------------------------------
// Validators shared by the subcommands

// A count: "--flag must be at least MIN (got V)" and `note` (what 0 means, what to do).
void check_at_least(const char* flag, long long value, long long min, const char* note = "") {
  CHECK(value >= min, "%s must be at least %lld (got %lld)%s", flag, min, value, note);
}

// A list flag (--seq-lens 1024,4096): one or more items, each at least `min`.
void check_list_at_least(const char* flag, const std::vector<int>& values, int min) {
  CHECK(!values.empty(), "%s is empty; give one or more values", flag);
  for (int v : values) CHECK(v >= min, "%s: %d is not valid (must be at least %d)", flag, v, min);
}

// A list of --attn names (profile, bench-attention): one or more, each from the registry.
std::vector<std::string> parse_attn_list(const char* flag, const std::vector<std::string>& names) {
  CHECK(!names.empty(), "%s is empty; give one or more of %s", flag, attention_names_list().c_str());
  std::vector<std::string> out;
  for (const std::string& n : names) out.push_back(parse_attn(n, AttnAuto::refused));
  return out;
}

const char* const kDeviceHelp = "auto|cpu|cuda (auto = cuda when a GPU is present)";

// --device of train, sample and eval.
std::string check_device(const std::string& device) {
  CHECK(device == "auto" || device == "cpu" || device == "cuda",
        "--device '%s' is unknown; use auto, cpu or cuda", device.c_str());
  return device;
}

// --attn's help, from the registry: each backend with the head of its one-line summary.
std::string attn_help(AttnAuto autos) {
  std::string s;
  if (autos == AttnAuto::allowed)
    s = "auto (GPU: the first of " + attention_names_list() + " that supports the model; CPU: flash)";
  for (const AttnBackendSpec& spec : attention_specs()) {
    const std::string summary = spec.summary;
    s += (s.empty() ? "" : " | ") + std::string(spec.name) + " (" +
         summary.substr(0, summary.find(':')) + ")";
  }
  return s;
}

// B*T token positions of one forward pass must fit an int: the model counts them in one.
void check_tokens_per_pass(int B, int T, const char* seq_flag, const char* hint = "") {
  CHECK((int64_t)B * T <= INT_MAX, "--batch %d x %s %d = %lld tokens per forward pass is more "
        "than %d; lower --batch%s", B, seq_flag, T, (long long)B * T, INT_MAX, hint);
}

// --batch B and --seq-len T of train and eval: B >= 1; T >= 1, or 0 where the subcommand reads
// it as the model's maximum; B*T within an int.
enum class SeqLenZero { refused, model_max };
void check_batch_seq_len(int B, int T, SeqLenZero zero, const char* hint = "") {
  if (zero == SeqLenZero::model_max)
    check_at_least("--seq-len", T, 0, "; 0 = the model's maximum");
  else
    check_at_least("--seq-len", T, 1);
  check_at_least("--batch", B, 1);
  check_tokens_per_pass(B, T, "--seq-len", hint);
}

}  // namespace

PosEncoding parse_pos(const std::string& value) {
  if (value == "learned") return PosEncoding::learned;
  if (value == "rope") return PosEncoding::rope;
  THROW_ERROR("--pos '%s' is unknown; use learned or rope", value.c_str());
}

const char* pos_name(PosEncoding pos) { return pos == PosEncoding::rope ? "rope" : "learned"; }

std::string parse_attn(const std::string& value, AttnAuto autos) {
  if (value == "auto" && autos == AttnAuto::allowed) return value;
  return attention_spec(value).name;  // unknown (auto too, where refused): throws listing them
}

// ---------------------------------------------------------------------------------------------
// train

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
    ("attn", "attention: " + attn_help(AttnAuto::allowed), cxxopts::value<std::string>()->default_value(d.attn))
    ("device", kDeviceHelp, cxxopts::value<std::string>()->default_value(d.device))
    ("pos", "positions: learned (GPT-2's wpe, caps the context at --max-seq-len) | rope (rotary, no wpe)", cxxopts::value<std::string>()->default_value(pos_name(d.pos)))
    ("rope-theta", "RoPE base", cxxopts::value<float>()->default_value("10000"))
    ("recompute", "activation memory: none | gelu (recompute GELU in backward) | layer-but-attn (keep each block's input, attention output and LSE; recompute the rest, not attention) | layer (keep only each block's input)", cxxopts::value<std::string>()->default_value(recompute_name(d.recompute)))
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
    ("bench-steps", "timed steps in --bench (after the warm-up steps)", cxxopts::value<int>()->default_value("20"))
    ("bench-warmup", "untimed warm-up steps in --bench before the timed ones", cxxopts::value<int>()->default_value("3"))
    ("quiet", "print only eval lines and the summary")
    ("h,help", "this help");
  o.add_options("multi-GPU (one process per GPU; default from RANK/WORLD_SIZE/LOCAL_RANK, OMPI_COMM_WORLD_*, SLURM_*)")
    ("rank", "this process's rank (-1: from the environment, else 0)", cxxopts::value<int>()->default_value("-1"))
    ("world-size", "number of processes (-1: from the environment, else 1)", cxxopts::value<int>()->default_value("-1"))
    ("local-rank", "GPU index on this node, for cudaSetDevice (-1: from the environment, else the rank)", cxxopts::value<int>()->default_value("-1"))
    ("dist-init", "NCCL id exchange: file:///shared/path or tcp://host:port", cxxopts::value<std::string>())
    ("zero", "0 = plain data parallel, 1 = ZeRO-1 (AdamW state sharded)", cxxopts::value<int>()->default_value("0"))
    ("no-overlap", "all-reduce the gradients once after the backward, not per layer during it")
    ("dist-timeout", "seconds to wait for the other ranks (id exchange, collectives)", cxxopts::value<double>()->default_value("300"))
    ("cp", "context parallelism: split each sequence over N GPUs (zigzag ring attention, CUDA only; --seq-len >= 2N). world = dp x cp, rank = dp_index * cp + cp_index: a cp group is N consecutive ranks (one node's GPUs); --batch and --total-batch count each dp group's sequences once", cxxopts::value<int>()->default_value("1"));
  // clang-format on
  cxxopts::ParseResult r;
  if (!parse_command_line(o, "train", argc, argv, r)) return false;
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
  opt.attn = parse_attn(get<std::string>(r, "attn"), AttnAuto::allowed);
  opt.device = check_device(get<std::string>(r, "device"));
  opt.pos = parse_pos(get<std::string>(r, "pos"));
  opt.rope_theta = get<float>(r, "rope-theta");
  opt.recompute = parse_recompute(get<std::string>(r, "recompute"));
  opt.deterministic = r.count("deterministic") > 0;
  opt.classifier_chunk = get<int>(r, "classifier-chunk");
  CHECK(std::isfinite(opt.rope_theta) && opt.rope_theta > 1.0f,
        "--rope-theta must be a finite number greater than 1 (got %g)", opt.rope_theta);
  check_at_least("--classifier-chunk", opt.classifier_chunk, 0, "; 0 = 8192");
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
  opt.bench_warmup = get<int>(r, "bench-warmup");
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
  opt.cp = get<int>(r, "cp");
  check_at_least("--cp", opt.cp, 1, "; 1 = no context parallelism");
  CHECK(opt.cp == 1 || opt.device != "cpu", "--cp %d splits each sequence over %d GPUs (CUDA "
        "only); --device cpu has none: use --device cuda (or auto)", opt.cp, opt.cp);
  const CpGrid grid = cp_grid(opt.dist.rank, opt.dist.world_size, opt.cp);  // cp divides world
  CHECK(opt.dist.world_size == 1 || opt.device != "cpu",
        "--device cpu trains in one process; a world of %d needs --device cuda (or auto)",
        opt.dist.world_size);

  // Validation of single values; cross-checks against data and model happen in run_train.
  CHECK(opt.bench || !opt.data_dir.empty() || !opt.train_pattern.empty(),
        "train: no data; give --data DIR (made by `flashgpt prepare`) or --train-pattern GLOB");
  check_batch_seq_len(opt.batch, opt.seq_len, SeqLenZero::refused,
                      " (and use --total-batch for a bigger step)");
  check_at_least("--steps", opt.steps, 1);
  if (opt.cp > 1) (void)CpLayout(opt.cp, opt.seq_len);  // --seq-len >= 2 x --cp, before any work
  CHECK(opt.cp == 1 || !opt.deterministic,
        "--deterministic with --cp %d: the ring's backward adds dQ in arrival order; drop "
        "--deterministic or use --cp 1", opt.cp);
  check_at_least("--total-batch", opt.total_batch, 0, "; 0 = --batch x --seq-len");
  // One step over all ranks takes dp x batch x seq-len tokens per micro-step: the cp ranks of
  // a dp group share their sequences (dp = world without --cp).
  const int world = opt.dist.world_size, dp = grid.dp;
  int64_t micro = (int64_t)opt.batch * opt.seq_len * dp;
  if (opt.total_batch == 0) opt.total_batch = micro;
  if (world == 1)
    CHECK(opt.total_batch % micro == 0,
          "--total-batch %lld is not a multiple of --batch x --seq-len = %lld; make it one",
          (long long)opt.total_batch, (long long)micro);
  else if (opt.cp == 1)
    CHECK(opt.total_batch % micro == 0,
          "--total-batch %lld is not a multiple of --batch x --seq-len x world size = %d x %d x %d "
          "= %lld; make it one", (long long)opt.total_batch, opt.batch, opt.seq_len, world,
          (long long)micro);
  else
    CHECK(opt.total_batch % micro == 0,
          "--total-batch %lld is not a multiple of --batch x --seq-len x dp (world size %d / --cp "
          "%d) = %d x %d x %d = %lld; make it one", (long long)opt.total_batch, world, opt.cp,
          opt.batch, opt.seq_len, dp, (long long)micro);
  CHECK(opt.lr > 0 && opt.lr < 1, "--lr must be in (0, 1) (got %g)", opt.lr);
  check_at_least("--warmup", opt.warmup, 0);
  CHECK(opt.lr_final_frac >= 0 && opt.lr_final_frac <= 1, "--lr-final-frac must be in [0, 1] (got %g)",
        opt.lr_final_frac);
  CHECK(opt.weight_decay >= 0, "--weight-decay must be >= 0 (got %g)", opt.weight_decay);
  CHECK(opt.grad_clip >= 0, "--grad-clip must be >= 0 (got %g)", opt.grad_clip);
  check_at_least("--eval-every", opt.eval_every, 0, "; 0 = only at the end");
  check_at_least("--eval-steps", opt.eval_steps, 1);
  check_at_least("--sample-every", opt.sample_every, 0, "; 0 = off");
  check_at_least("--sample-tokens", opt.sample_tokens, 1);
  check_at_least("--checkpoint-every", opt.checkpoint_every, 0, "; 0 = only at the end");
  CHECK(!opt.resume || !opt.out_dir.empty(), "--resume needs --out DIR (where the checkpoints are)");
  CHECK(opt.checkpoint_every == 0 || !opt.out_dir.empty(),
        "--checkpoint-every needs --out DIR to write into");
  check_at_least("--bench-steps", opt.bench_steps, 1);
  check_at_least("--bench-warmup", opt.bench_warmup, 0);
  // 0 means "the preset's" only when the flag is absent: given, each must be a real size.
  for (const char* f : {"layers", "heads", "kv-heads", "channels", "max-seq-len"})
    if (r.count(f))
      check_at_least(("--" + std::string(f)).c_str(), get<int>(r, f), 1,
                     "; leave it out to use the preset's");
  if (r.count("vocab-size")) check_at_least("--vocab-size", opt.vocab_size, 2);
  CHECK(opt.total_batch / micro <= INT_MAX, "--total-batch %lld is %lld micro-steps of --batch x "
        "--seq-len%s, more than the %d one optimizer step can count; lower --total-batch",
        (long long)opt.total_batch, (long long)(opt.total_batch / micro),
        opt.cp > 1 ? " x dp" : world > 1 ? " x world size" : "", INT_MAX);
  // Decoupled weight decay multiplies each matrix by (1 - lr x wd) per step: at lr x wd >= 1
  // the weights flip sign and grow instead of decaying.
  CHECK((double)opt.lr * opt.weight_decay < 1.0, "--weight-decay %g with --lr %g scales the weights "
        "by 1 - lr x wd = %g per step, which does not decay them; use a value below %g (typical: "
        "0.1)", opt.weight_decay, opt.lr, 1.0 - (double)opt.lr * opt.weight_decay, 1.0 / opt.lr);
  return true;
}

// ---------------------------------------------------------------------------------------------
// sample, eval, export, prepare

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
    ("device", kDeviceHelp, cxxopts::value<std::string>()->default_value("auto"))
    ("attn", "attention for the prompt: " + attn_help(AttnAuto::allowed), cxxopts::value<std::string>()->default_value("auto"))
    ("context", "tokens the model sees at once (0 = the model's maximum; RoPE models may go beyond it); a longer prompt or output slides the window", cxxopts::value<int>()->default_value("0"))
    ("no-kv-cache", "recompute the whole context for every new token (no KV cache)")
    ("h,help", "this help");
  // clang-format on
  cxxopts::ParseResult r;
  if (!parse_command_line(o, "sample", argc, argv, r)) return false;
  CHECK(r.count("checkpoint"), "sample: --checkpoint FILE is required (a model_*.bin from train --out)");
  opt.checkpoint = get<std::string>(r, "checkpoint");
  if (r.count("tokenizer")) opt.tokenizer_path = get<std::string>(r, "tokenizer");
  opt.prompt = get<std::string>(r, "prompt");
  opt.tokens = get<int>(r, "tokens");
  opt.temperature = get<float>(r, "temperature");
  opt.top_k = get<int>(r, "top-k");
  opt.seed = get<uint64_t>(r, "seed");
  opt.device = check_device(get<std::string>(r, "device"));
  opt.attn = parse_attn(get<std::string>(r, "attn"), AttnAuto::allowed);
  opt.context = get<int>(r, "context");
  opt.kv_cache = r.count("no-kv-cache") == 0;
  CHECK(opt.tokens >= 1 && opt.tokens <= kMaxSampleTokens,
        "--tokens must be in [1, %d] (got %d): every generated id is kept in memory", kMaxSampleTokens,
        opt.tokens);
  check_at_least("--context", opt.context, 0, "; 0 = the model's maximum");
  CHECK(opt.temperature >= 0, "--temperature must be >= 0 (got %g)", opt.temperature);
  check_at_least("--top-k", opt.top_k, 0, "; 0 = all tokens");
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
    ("device", kDeviceHelp, cxxopts::value<std::string>()->default_value("auto"))
    ("attn", "attention: " + attn_help(AttnAuto::allowed), cxxopts::value<std::string>()->default_value("auto"))
    ("json", "also write the result as JSON to this file", cxxopts::value<std::string>())
    ("h,help", "this help");
  // clang-format on
  cxxopts::ParseResult r;
  if (!parse_command_line(o, "eval", argc, argv, r)) return false;
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
  opt.device = check_device(get<std::string>(r, "device"));
  opt.attn = parse_attn(get<std::string>(r, "attn"), AttnAuto::allowed);
  check_batch_seq_len(opt.batch, opt.seq_len, SeqLenZero::model_max);
  check_at_least("--steps", opt.steps, 0, "; 0 = the whole split");
  return true;
}

bool parse_export_options(int argc, char** argv, ExportOptions& opt) {
  cxxopts::Options o("export", "flashgpt export: write a checkpoint in another model format");
  // clang-format off
  o.add_options()
    ("checkpoint", "model: flashgpt or llm.c file, or Hugging Face GPT-2 directory", cxxopts::value<std::string>())
    ("out", "output directory (created if missing)", cxxopts::value<std::string>())
    ("format", "hf: Hugging Face GPT2LMHeadModel (model.safetensors + config.json)", cxxopts::value<std::string>()->default_value("hf"))
    ("h,help", "this help");
  // clang-format on
  cxxopts::ParseResult r;
  if (!parse_command_line(o, "export", argc, argv, r)) return false;
  CHECK(r.count("checkpoint"), "export: --checkpoint FILE is required (a model_*.bin from train --out)");
  CHECK(r.count("out"), "export: --out DIR is required");
  opt.checkpoint = get<std::string>(r, "checkpoint");
  opt.out_dir = get<std::string>(r, "out");
  opt.format = get<std::string>(r, "format");
  CHECK(opt.format == "hf", "--format '%s' is unknown; use hf (Hugging Face GPT-2)", opt.format.c_str());
  return true;
}

// The values themselves (vocabulary size, validation share) are checked by prepare_corpus,
// which tests and scripts also call directly.
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
  cxxopts::ParseResult r;
  if (!parse_command_line(o, "prepare", argc, argv, r)) return false;
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

// ---------------------------------------------------------------------------------------------
// profile, bench-attention, bench-kernels (bench/)

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

std::string describe_failure(const std::string& command, const std::exception& e) {
  if (dynamic_cast<const std::bad_alloc*>(&e))
    return flashgpt::strformat("%s ran out of host memory (an allocation failed); lower --batch, "
                               "--seq-len or the model size", command.c_str());
  return e.what();
}
