// options — the command line of the benchmark subcommands `profile`, `bench-attention` and
// `bench-kernels`: their options and cxxopts parsers. A bad value is one clear error line
// naming the flag before any work starts (the reading and validators the parsers share:
// model/cli_table.h, model/cli.h). train/main.cpp dispatches; each command (bench/profile.h,
// bench_attention.h, bench_kernels.h) receives its parsed struct and parses nothing itself.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/attention/mask.h"
#include "model/cli.h"
#include "model/recompute.h"

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
  // --mask, --window (kernels/attention/mask.h). The document mask needs documents: --data DIR
  // (the first windows of its training shards) or --doc-len N (random tokens with an
  // end-of-text token at each position with probability 1/N: documents of mean length N).
  MaskSpec mask;
  int doc_len = 0;
  std::string data_dir;
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
  float idle_ms = 0;       // the GPU left idle this long before each measurement (a burst)
  bool deterministic = false;
  MaskSpec mask;    // --mask, --window (kernels/attention/mask.h)
  int doc_len = 0;  // --doc-len: synthetic documents of this mean length (--mask document); 0: none
  // --cp N > 1: also time each backend's context-parallel ring (ring_attention.cuh) with N
  // virtual ranks on this one GPU (threads; the hops are device copies): the ring's compute
  // overhead against the whole-sequence backend, an upper bound on the efficiency of N GPUs.
  int cp = 1;
  std::string csv_path;  // "" = no CSV
};

struct BenchKernelsOptions {  // `flashgpt bench-kernels` (bench/bench_kernels.h)
  std::vector<std::string> only = {"kernels", "rope", "decode", "step", "tensor"};  // sections
  std::string attn = "naive";  // the step section's backend (parse_attn, no auto)
  int batch = 32;              // sequences of 1024 tokens in the step section
  bool tune_matmul = false;    // --tune-matmul: the products with timed cuBLASLt algorithms
};

// The parsers. argv[0] is the subcommand's name. A bad flag or value throws flashgpt::Error with
// one line naming the flag; false means --help was printed and the command stops.
bool parse_profile_options(int argc, char** argv, ProfileOptions& opt);
bool parse_bench_attention_options(int argc, char** argv, BenchAttentionOptions& opt);
bool parse_bench_kernels_options(int argc, char** argv, BenchKernelsOptions& opt);
