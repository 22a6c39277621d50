// options.cpp — cxxopts parsing and validation for the training-side subcommands (options.h):
// the validators only they share (--device, --batch with --seq-len), then one parser per
// subcommand; the command-line reading and the validators the benchmarks share: model/cli_table.h
// and model/cli.h.
// Most of the file is the option tables, the whole command line of these five in one place.
#include "train/options.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <new>

#include "data/prepare.h"
#include "kernels/common.h"
#include "model/cli_table.h"
#include "model/config.h"
#include "model/context_parallel.h"

using cli::attn_help;
using cli::check_at_least;
using cli::check_tokens_per_pass;

namespace {

const char* const kDeviceHelp = "auto|cpu|cuda (auto = cuda when a GPU is present)";

// --device of train, sample and eval.
std::string check_device(const std::string& device) {
  CHECK(device == "auto" || device == "cpu" || device == "cuda",
        "--device '%s' is unknown; use auto, cpu or cuda", device.c_str());
  return device;
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

// The options sample and eval share: the model to load, its tokenizer, the device and backend.
template <typename Options>
cli::Table& add_checkpoint_options(cli::Table& t, Options& opt, const char* tokenizer_help,
                                   const std::string& attn_head) {
  return t.add("checkpoint", "model: flashgpt or llm.c file, or Hugging Face GPT-2 directory", opt.checkpoint)
      .add("tokenizer", tokenizer_help, opt.tokenizer_path)
      .add("device", kDeviceHelp, opt.device)
      .add("attn", attn_head + attn_help(AttnAuto::allowed), opt.attn);
}
template <typename Options>
void check_checkpoint_options(Options& opt, const char* cmd) {
  CHECK(!opt.checkpoint.empty(), "%s: --checkpoint FILE is required (a model_*.bin from train "
        "--out)", cmd);
  opt.device = check_device(opt.device);
  opt.attn = parse_attn(opt.attn, AttnAuto::allowed);
}

// --total-batch: whole micro-steps of `micro` tokens (--batch x --seq-len on each of the dp
// groups: the cp ranks of a dp group share their sequences; dp = world without --cp).
void check_total_batch(const TrainOptions& opt, int world, int dp, int64_t micro) {
  const std::string of =
      world == 1 ? std::string("--batch x --seq-len")
      : opt.cp == 1
          ? flashgpt::strformat("--batch x --seq-len x world size = %d x %d x %d", opt.batch,
                                opt.seq_len, world)
          : flashgpt::strformat("--batch x --seq-len x dp (world size %d / --cp %d) = %d x %d x %d",
                                world, opt.cp, opt.batch, opt.seq_len, dp);
  CHECK(opt.total_batch % micro == 0, "--total-batch %lld is not a multiple of %s = %lld; make "
        "it one", (long long)opt.total_batch, of.c_str(), (long long)micro);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// train

bool parse_train_options(int argc, char** argv, TrainOptions& opt) {
  cli::Table t(opt, "train", "flashgpt train: train a GPT-2 model on token shards");
  std::string pos = pos_name(opt.pos), recompute = recompute_name(opt.recompute), dist_init;
  int rank = -1, world_size = -1, local_rank = -1;
  t.add("data", "directory made by `flashgpt prepare` (train_*.bin, val_*.bin, tokenizer.bin)", opt.data_dir)
    .add("train-pattern", "glob of training shards (llm.c format), overrides --data", opt.train_pattern)
    .add("val-pattern", "glob of validation shards", opt.val_pattern)
    .add("tokenizer", "tokenizer file (flashgpt's, or llm.c's gpt2_tokenizer.bin) to decode samples", opt.tokenizer_path)
    .add("vocab-size", "vocabulary size when there is no tokenizer and no --init", opt.vocab_size)
    .add("model", "preset: tiny|d6|d12|d24|d36|d48 (d12 = GPT-2 124M)", opt.model)
    .add("layers", "override the preset's layers", opt.layers)
    .add("heads", "override the preset's attention heads", opt.heads)
    .add("kv-heads", "key/value heads (grouped-query attention); default = --heads", opt.kv_heads)
    .add("channels", "override the preset's channels", opt.channels)
    .add("max-seq-len", "position-embedding rows (default: --seq-len)", opt.max_seq_len)
    .add("init", "start from this model: a flashgpt or llm.c (version 3/5) file, or a Hugging Face GPT-2 directory / .safetensors file", opt.init_path)
    .add("attn", "attention: " + attn_help(AttnAuto::allowed), opt.attn)
    .add("pos", "positions: learned (GPT-2's wpe, caps the context at --max-seq-len) | rope (rotary, no wpe)", pos)
    .add("rope-theta", "RoPE base", opt.rope_theta)
    .add("recompute", "activation memory: none | gelu (recompute GELU in backward) | layer-but-attn (keep each block's input, attention output and LSE; recompute the rest, not attention) | layer (keep only each block's input)", recompute)
    .add("classifier-chunk", "rows of logits at once in the classifier (0 = 8192)", opt.classifier_chunk)
    .on("deterministic", "bitwise-reproducible training on the GPU: flash and flash3 sum dQ in a fixed order (the attention backward 6-22% slower with flash3, 11-15% with flash)", opt.deterministic)
    .on("tune-matmul", "time cuBLASLt's first 8 algorithms for each matrix product on its first call and keep the fastest (d12 B 32 x T 1024: +1.2%); another process may keep others, so runs and resumes are not bitwise repeatable", opt.tune_matmul)
    .on("no-cuda-graphs", "launch every kernel: by default a GPU run of one process without --cp replays each forward and backward as one CUDA graph after its first call of a shape, with the same bits (d12 B 4 x T 256: +10%; B 32 x T 1024: +0.6%)", opt.no_cuda_graphs);
  cli::add_mask_flags(t, opt.mask, "the --init / --resume model's, else causal with no window");
  t.add("device", kDeviceHelp, opt.device)
    .add("seq-len", "sequence length T", opt.seq_len)
    .add("batch", "micro-batch B (sequences per forward pass)", opt.batch)
    .add("total-batch", "tokens per optimizer step (gradient accumulation when > batch*seq-len); 0 = batch*seq-len", opt.total_batch)
    .add("steps", "optimizer steps (with --resume: where the run stops; the cosine still ends at the first run's --steps)", opt.steps)
    .add("lr", "peak learning rate", opt.lr)
    .add("warmup", "linear warm-up steps", opt.warmup)
    .add("lr-final-frac", "cosine decay ends at lr * this", opt.lr_final_frac)
    .add("weight-decay", "AdamW decoupled weight decay (matrices only)", opt.weight_decay)
    .add("grad-clip", "clip the global gradient norm to this (0 = off)", opt.grad_clip)
    .add("seed", "random seed (initialisation, data order, samples)", opt.seed)
    .on("no-shuffle", "read the training shards in order", opt.shuffle, false)
    .add("eval-every", "evaluate on val every N steps (0 = only at the end)", opt.eval_every)
    .add("eval-steps", "validation batches per evaluation", opt.eval_steps)
    .add("sample-every", "print a sample every N steps (0 = off)", opt.sample_every)
    .add("sample-tokens", "tokens per sample", opt.sample_tokens)
    .add("checkpoint-every", "write a checkpoint every N steps (and at the end) into --out", opt.checkpoint_every)
    .add("out", "output directory for checkpoints (none without it)", opt.out_dir)
    .on("resume", "continue the latest checkpoint in --out with its run's settings: a flag left out is the checkpoint's; a batch, seed or schedule flag given otherwise is refused; --steps and --attn may change", opt.resume)
    .add("log", "write one JSON object per step to this file", opt.log_path)
    .on("bench", "benchmark: random tokens, no data; prints median ms/step, tokens/s, MFU", opt.bench)
    .add("bench-steps", "timed steps in --bench (after the warm-up steps)", opt.bench_steps)
    .add("bench-warmup", "untimed warm-up steps in --bench before the timed ones", opt.bench_warmup)
    .on("quiet", "print only eval lines and the summary", opt.quiet)
    .add("rank", "this process's rank (-1: from the environment, else 0)", rank)
    .add("world-size", "number of processes (-1: from the environment, else 1)", world_size)
    .add("local-rank", "GPU index on this node, for cudaSetDevice (-1: from the environment, else the rank)", local_rank)
    .add("dist-init", "NCCL id exchange: file:///shared/path or tcp://host:port", dist_init)
    .add("zero", "0 = plain data parallel, 1 = ZeRO-1 (AdamW state sharded)", opt.zero)
    .on("no-overlap", "all-reduce the gradients once after the backward, not per layer during it", opt.overlap_comm, false)
    .add("dist-timeout", "seconds to wait for the other ranks (id exchange, collectives)", opt.dist_timeout)
    .add("cp", "context parallelism: split each sequence over N GPUs (zigzag ring attention, CUDA only; --seq-len >= 2N). world = dp x cp, rank = dp_index * cp + cp_index: a cp group is N consecutive ranks (one node's GPUs); --batch and --total-batch count each dp group's sequences once", opt.cp);
  t.section("data", "data")
      .section("model", "model")
      .section("seq-len", "optimisation")
      .section("eval-every", "output")
      .section("rank", "multi-GPU (one process per GPU; default from RANK/WORLD_SIZE/LOCAL_RANK, OMPI_COMM_WORLD_*, SLURM_*)");
  cxxopts::ParseResult r;
  if (!t.parse(argc, argv, &r)) return false;
  for (const cxxopts::KeyValue& kv : r.arguments()) opt.given.insert(kv.key());
  opt.model_given = r.count("model") || r.count("layers") || r.count("heads") ||
                    r.count("kv-heads") || r.count("channels") || r.count("pos");
  opt.attn = parse_attn(opt.attn, AttnAuto::allowed);
  opt.device = check_device(opt.device);
  opt.pos = parse_pos(pos);
  opt.recompute = parse_recompute(recompute);
  CHECK(std::isfinite(opt.rope_theta) && opt.rope_theta > 1.0f,
        "--rope-theta must be a finite number greater than 1 (got %g)", opt.rope_theta);
  check_at_least("--classifier-chunk", opt.classifier_chunk, 0, "; 0 = 8192");
  CHECK(opt.zero == 0 || opt.zero == 1, "--zero %d is not supported; use 0 or 1", opt.zero);
  CHECK(opt.dist_timeout > 0, "--dist-timeout must be > 0 seconds (got %g)", opt.dist_timeout);
  for (const auto& [flag, value] : {std::pair<const char*, int>{"rank", rank},
                                    {"world-size", world_size}, {"local-rank", local_rank}})
    CHECK(!r.count(flag) || value >= 0, "--%s must be >= 0 (got %d)", flag, value);
  opt.dist = resolve_dist_config(rank, world_size, local_rank, dist_init);
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
  CHECK(!(opt.deterministic && opt.tune_matmul),
        "--tune-matmul with --deterministic: timed algorithm choices differ between processes; "
        "drop one of them");
  CHECK(opt.cp == 1 || !opt.deterministic,
        "--deterministic with --cp %d: the ring's backward adds dQ in arrival order; drop "
        "--deterministic or use --cp 1", opt.cp);
  check_at_least("--total-batch", opt.total_batch, 0, "; 0 = --batch x --seq-len");
  // One step over all ranks takes dp x batch x seq-len tokens per micro-step: the cp ranks of
  // a dp group share their sequences (dp = world without --cp).
  const int world = opt.dist.world_size, dp = grid.dp;
  int64_t micro = (int64_t)opt.batch * opt.seq_len * dp;
  if (opt.total_batch == 0) opt.total_batch = micro;
  // With --resume the batch shape left out is the checkpoint's, known only then: run_train
  // checks it there (train/resume.h).
  if (!opt.resume) check_total_batch(opt, world, dp, micro);
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
  for (const auto& [flag, value] :
       {std::pair<const char*, int>{"layers", opt.layers}, {"heads", opt.heads},
        {"kv-heads", opt.kv_heads}, {"channels", opt.channels}, {"max-seq-len", opt.max_seq_len}})
    if (r.count(flag))
      check_at_least(("--" + std::string(flag)).c_str(), value, 1, "; leave it out to use the preset's");
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
  cli::Table t(opt, "sample", "flashgpt sample: generate text from a checkpoint");
  add_checkpoint_options(t, opt, "tokenizer file (default: tokenizer.bin beside the checkpoint)", "attention for the prompt: ")
    .add("prompt", "text to continue", opt.prompt)
    .add("tokens", "tokens to generate", opt.tokens)
    .add("temperature", "softmax temperature (0 = greedy)", opt.temperature)
    .add("top-k", "sample among the k most likely tokens (0 = all)", opt.top_k)
    .add("seed", "random seed", opt.seed)
    .add("context", "tokens the model sees at once (0 = the model's maximum; RoPE models may go beyond it); a longer prompt or output slides the window", opt.context)
    .on("no-kv-cache", "recompute the whole context for every new token (no KV cache)", opt.kv_cache, false);
  cli::add_mask_flags(t, opt.mask, "the checkpoint's");
  if (!t.parse(argc, argv)) return false;
  check_checkpoint_options(opt, "sample");
  CHECK(opt.tokens >= 1 && opt.tokens <= kMaxSampleTokens,
        "--tokens must be in [1, %d] (got %d): every generated id is kept in memory", kMaxSampleTokens,
        opt.tokens);
  check_at_least("--context", opt.context, 0, "; 0 = the model's maximum");
  CHECK(opt.temperature >= 0, "--temperature must be >= 0 (got %g)", opt.temperature);
  check_at_least("--top-k", opt.top_k, 0, "; 0 = all tokens");
  return true;
}

bool parse_eval_options(int argc, char** argv, EvalOptions& opt) {
  cli::Table t(opt, "eval", "flashgpt eval: loss, perplexity and bits per byte of a checkpoint on token shards");
  t.add("data", "directory made by `flashgpt prepare`: its val_*.bin", opt.data_dir)
    .add("val-pattern", "glob of shards to evaluate on (overrides --data's)", opt.val_pattern);
  add_checkpoint_options(t, opt, "for bits per byte (default: tokenizer.bin beside the checkpoint, else --data's)", "attention: ")
    .add("batch", "sequences per forward pass", opt.batch)
    .add("seq-len", "tokens per sequence (0 = the model's maximum)", opt.seq_len)
    .add("steps", "batches to evaluate (0 = the whole split)", opt.steps)
    .add("json", "also write the result as JSON to this file", opt.json_path);
  cli::add_mask_flags(t, opt.mask, "the checkpoint's");
  if (!t.parse(argc, argv)) return false;
  check_checkpoint_options(opt, "eval");
  CHECK(!opt.data_dir.empty() || !opt.val_pattern.empty(),
        "eval: no data; give --data DIR (made by `flashgpt prepare`) or --val-pattern GLOB");
  check_batch_seq_len(opt.batch, opt.seq_len, SeqLenZero::model_max);
  check_at_least("--steps", opt.steps, 0, "; 0 = the whole split");
  return true;
}

bool parse_export_options(int argc, char** argv, ExportOptions& opt) {
  cli::Table t(opt, "export", "flashgpt export: write a checkpoint in another model format");
  t.add("checkpoint", "model: flashgpt or llm.c file, or Hugging Face GPT-2 directory", opt.checkpoint)
    .add("out", "output directory (created if missing)", opt.out_dir)
    .add("format", "hf: Hugging Face GPT2LMHeadModel (model.safetensors + config.json)", opt.format);
  if (!t.parse(argc, argv)) return false;
  CHECK(!opt.checkpoint.empty(), "export: --checkpoint FILE is required (a model_*.bin from train --out)");
  CHECK(!opt.out_dir.empty(), "export: --out DIR is required");
  CHECK(opt.format == "hf", "--format '%s' is unknown; use hf (Hugging Face GPT-2)", opt.format.c_str());
  return true;
}

// The values themselves (vocabulary size, validation share) are checked by prepare_corpus,
// which tests and scripts also call directly.
bool parse_prepare_options(int argc, char** argv, PrepareOptions& opt) {
  cli::Table t(opt, "prepare", "flashgpt prepare: text files -> BPE tokenizer + token shards");
  t.add("input", "text file(s); repeat the flag or list them after it", opt.inputs)
    .add("out", "output directory", opt.out_dir)
    .add("vocab-size", "BPE vocabulary size (257..65536)", opt.vocab_size)
    .add("val-fraction", "share of documents for validation", opt.val_fraction)
    .add("shard-tokens", "tokens per shard file", opt.shard_tokens)
    .add("seed", "random seed for the train/val split", opt.seed);
  t.cxx().parse_positional({"input"});  // so `--input a.txt b.txt c.txt` takes all three
  t.cxx().show_positional_help();        // and --help still lists --input
  if (!t.parse(argc, argv)) return false;
  CHECK(!opt.inputs.empty(), "prepare: --input FILE [FILE...] is required");
  CHECK(!opt.out_dir.empty(), "prepare: --out DIR is required");
  return true;
}

std::string describe_failure(const std::string& command, const std::exception& e) {
  if (dynamic_cast<const std::bad_alloc*>(&e))
    return flashgpt::strformat("%s ran out of host memory (an allocation failed); lower --batch, "
                               "--seq-len or the model size", command.c_str());
  return e.what();
}
