// options — the command line of every flashgpt subcommand, in one module: the options of
// `train`, `sample`, `eval`, `export`, `prepare`, `profile`, `bench-attention` and
// `bench-kernels`, their cxxopts parsers, and the validators they share (--device, --attn,
// --pos, --batch and --seq-len). A bad value is one clear error line naming the flag before any
// work starts. train/main.cpp dispatches: each command (train/, data/prepare.h, bench/)
// receives its parsed struct and parses nothing itself.
#pragma once
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "model/recompute.h"
#include "train/dist.h"

struct PrepareOptions;  // data/prepare.h

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

struct TrainOptions {
  // data
  std::string data_dir;        // --data DIR: DIR/train_*.bin, DIR/val_*.bin, DIR/tokenizer.bin
  std::string train_pattern;   // --train-pattern (llm.c shard glob); overrides --data's
  std::string val_pattern;     // --val-pattern
  std::string tokenizer_path;  // --tokenizer (ours or llm.c's GPT-2 file)
  int vocab_size = 0;          // --vocab-size: only when there is neither tokenizer nor --init
  // model
  std::string model = "tiny";
  bool model_given = false;  // --model or an override was on the command line
  int layers = 0, heads = 0, kv_heads = 0, channels = 0, max_seq_len = 0;  // 0: preset's
  std::string init_path;       // --init FILE (llm.c or flashgpt model file)
  std::string attn = "auto";   // parse_attn: a registry name or auto
  PosEncoding pos = PosEncoding::learned;
  float rope_theta = 10000.0f;
  Recompute recompute = Recompute::kNone;  // --recompute (model/recompute.h)
  int classifier_chunk = 0;        // --classifier-chunk rows (0 = 8192)
  bool deterministic = false;      // --deterministic: bitwise-reproducible attention backward
  std::string device = "auto";     // auto | cpu | cuda
  // batch and schedule
  int seq_len = 256, batch = 8;
  int64_t total_batch = 0;  // tokens per optimizer step; 0 = batch*seq-len
  int steps = 500;
  float lr = 6e-4f, lr_final_frac = 0.1f, weight_decay = 0.1f, grad_clip = 1.0f;
  int warmup = 20;
  // eval, sampling, checkpoints, logging
  int eval_every = 100, eval_steps = 10, sample_every = 200, sample_tokens = 64;
  int checkpoint_every = 0;
  std::string out_dir, log_path;
  bool resume = false;
  uint64_t seed = 1337;
  bool shuffle = true;
  // benchmark mode: random tokens, no data files
  bool bench = false;
  int bench_steps = 20;
  int bench_warmup = 3;  // untimed steps before them (allocators, caches, autotuning)
  bool quiet = false;  // fewer lines (tests)
  // multi-GPU (train/dist.h): resolved from --rank/--world-size/--local-rank/--dist-init and
  // the environment (torchrun, mpirun, srun)
  DistConfig dist;
  int zero = 0;               // --zero 1: shard the AdamW state over the ranks (ZeRO-1)
  bool overlap_comm = true;   // --no-overlap: one all-reduce after the backward instead
  double dist_timeout = 300;  // --dist-timeout seconds: id exchange and waits on collectives
  // --cp N: context parallelism, each sequence split over N GPUs (CUDA only). world = dp x cp,
  // rank = dp_index * cp + cp_index (train/dist.h: cp_grid); --batch and --total-batch count
  // sequences and tokens once per dp group.
  int cp = 1;
};

struct SampleOptions {  // `flashgpt sample` (train/sample.h)
  std::string checkpoint, tokenizer_path, prompt, device = "auto";
  std::string attn = "auto";  // parse_attn: a registry name or auto
  int tokens = 256, top_k = 0;
  int context = 0;  // --context: the window in tokens; 0 = the model's max_seq_len
  float temperature = 1.0f;
  uint64_t seed = 1337;
  bool kv_cache = true;  // --no-kv-cache: recompute the whole context for every token
};

struct EvalOptions {  // `flashgpt eval` (train/eval.h)
  std::string checkpoint, data_dir, val_pattern, tokenizer_path, json_path;
  std::string device = "auto";
  std::string attn = "auto";  // parse_attn: a registry name or auto
  int batch = 8;
  int seq_len = 0;    // 0: the model's max_seq_len
  int64_t steps = 0;  // batches; 0: the whole split
};

struct ExportOptions {  // `flashgpt export` (train/export.h)
  std::string checkpoint, out_dir, format = "hf";
};

struct ProfileOptions {  // `flashgpt profile` (bench/profile.h says what each does)
  std::string model = "d12";
  std::vector<std::string> attn = {"flash3", "flash", "naive"};  // parse_attn names, no auto
  std::vector<int> seq_lens = {1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072};
  int tokens = 16384;  // per step; B = max(1, tokens / T)
  int batch = 0;       // > 0: overrides --tokens
  int warmup = 1, steps = 3;
  Recompute recompute = Recompute::kNone;
  // rope by default: learned positions would add a (maxT, C) table per point, mixing a
  // position-table effect into a sweep about attention (bench/profile.h).
  PosEncoding pos = PosEncoding::rope;
  int cp = 1;  // --cp: plan and measure one GPU of a cp group (ModelOptions cp_rank 0)
  int vocab = 50257;
  std::string out_dir = "runs/profile";
  bool plan_only = false;
  bool plot = true;           // run scripts/plot_profile.py at the end
  double gpu_memory_gib = 0;  // --plan-only capacity; 0: the GPU's, else 80
  double max_step_seconds = 60;
  uint64_t seed = 1337;
  std::string command_line;  // for the CSV/JSON metadata
};
// Batch size of a profile point at sequence length T: --batch, else max(1, --tokens / T).
int profile_batch(const ProfileOptions& opt, int T);
// The largest --gpu-memory (1 PiB): far beyond any device, and within what a byte count holds.
constexpr double kMaxGpuMemoryGiB = double(1 << 20);

struct BenchAttentionOptions {  // `flashgpt bench-attention` (bench/bench_attention.h)
  std::vector<std::string> backends = {"naive", "flash"};  // parse_attn names, no auto
  std::vector<int> head_sizes = {64, 128};                 // --hs
  std::vector<int> seq_lens = {512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072};
  std::vector<int> causal = {1};  // 1 and/or 0 (0 rows are reported skipped: causal only)
  int tokens = 16384;             // per batch: B = max(1, tokens / T)
  int heads = 0;                  // NH; 0: 12 for HS 64, 16 for HS 128, else 768 / HS
  int kv_heads = 0;               // NKV; 0: NH
  int warmup = 5, iters = 20;
  float budget_ms = 3000;  // GPU time per measurement at the most (at least 3 runs)
  float warmup_ms = 500;   // untimed GPU time before each measurement (bench_attention.cu: why)
  bool deterministic = false;
  // --cp N > 1: also time each backend's context-parallel ring (ring_attention.cuh) with N
  // virtual ranks on this one GPU (threads; the hops are device copies): the ring's compute
  // overhead against the whole-sequence backend, an upper bound on the efficiency of N GPUs.
  int cp = 1;
  std::string csv_path;  // "" = no CSV
};

struct BenchKernelsOptions {  // `flashgpt bench-kernels` (bench/bench_kernels.h)
  std::vector<std::string> only = {"kernels", "rope", "decode", "step"};  // sections
  std::string attn = "naive";  // the step section's backend (parse_attn, no auto)
  int batch = 32;              // sequences of 1024 tokens in the step section
};

// The parsers. argv[0] is the subcommand's name. A bad flag or value throws flashgpt::Error with
// one line naming the flag; false means --help was printed and the command stops.
bool parse_train_options(int argc, char** argv, TrainOptions& opt);
bool parse_sample_options(int argc, char** argv, SampleOptions& opt);
bool parse_eval_options(int argc, char** argv, EvalOptions& opt);
bool parse_export_options(int argc, char** argv, ExportOptions& opt);
bool parse_prepare_options(int argc, char** argv, PrepareOptions& opt);
bool parse_profile_options(int argc, char** argv, ProfileOptions& opt);
bool parse_bench_attention_options(int argc, char** argv, BenchAttentionOptions& opt);
bool parse_bench_kernels_options(int argc, char** argv, BenchKernelsOptions& opt);

// The error line `main` prints for an exception out of a command (without "flashgpt: error: "):
// our errors as they are; a failed allocation says so and which flags lower the memory.
std::string describe_failure(const std::string& command, const std::exception& e);
