// options — the command line of the training-side subcommands, in one module: the options of
// `train`, `sample`, `eval`, `export` and `prepare`, and their cxxopts parsers (the reading and
// validators they share with the benchmarks' parsers, bench/options.h: model/cli_table.h). A bad
// value is one clear error line naming the flag before any work starts. train/main.cpp
// dispatches: each command (train/, data/prepare.h, bench/) receives its parsed struct and
// parses nothing itself.
#pragma once
#include <cstdint>
#include <exception>
#include <set>
#include <string>
#include <vector>

#include "model/cli.h"
#include "model/recompute.h"
#include "train/dist.h"

struct PrepareOptions;  // data/prepare.h

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
  bool tune_matmul = false;        // --tune-matmul: timed cuBLASLt algorithms (kernels/matmul.cuh)
  bool no_cuda_graphs = false;     // --no-cuda-graphs: every kernel launched, no graph replays
  // --mask, --window (kernels/attention/mask.h): left out, the --init or --resume model's, else
  // causal with no window
  MaskFlags mask;
  std::string device = "auto";     // auto | cpu | cuda
  // batch and schedule
  int seq_len = 256, batch = 8;
  int64_t total_batch = 0;  // tokens per optimizer step; 0 = batch*seq-len
  int steps = 500;
  float lr = 6e-4f, lr_final_frac = 0.1f, weight_decay = 0.1f, grad_clip = 1.0f;
  int warmup = 20;
  // The step where the cosine decay ends: 0 = --steps. --resume sets it to the checkpoint's
  // (--steps of the run's first start), so a longer resumed run keeps its schedule.
  int schedule_steps = 0;
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
  // The flags on the command line, without "--": --resume takes each setting whose flag is not
  // here from the checkpoint (train/resume.h).
  std::set<std::string> given;
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
  MaskFlags mask;   // --mask, --window: left out, the checkpoint's
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
  MaskFlags mask;     // --mask, --window: left out, the checkpoint's
};

struct ExportOptions {  // `flashgpt export` (train/export.h)
  std::string checkpoint, out_dir, format = "hf";
};

// The parsers. argv[0] is the subcommand's name. A bad flag or value throws flashgpt::Error with
// one line naming the flag; false means --help was printed and the command stops.
bool parse_train_options(int argc, char** argv, TrainOptions& opt);
bool parse_sample_options(int argc, char** argv, SampleOptions& opt);
bool parse_eval_options(int argc, char** argv, EvalOptions& opt);
bool parse_export_options(int argc, char** argv, ExportOptions& opt);
bool parse_prepare_options(int argc, char** argv, PrepareOptions& opt);

// The error line `main` prints for an exception out of a command (without "flashgpt: error: "):
// our errors as they are; a failed allocation says so and which flags lower the memory.
std::string describe_failure(const std::string& command, const std::exception& e);
