// flashgpt — one program, subcommands:
//   flashgpt prepare --input FILE... --out DIR     text -> BPE tokenizer + token shards
//   flashgpt train --data DIR [options]            train a GPT-2 (CPU or CUDA)
//   flashgpt sample --checkpoint FILE [options]    generate text
//   flashgpt eval --checkpoint FILE --data DIR     loss, perplexity, bits per byte on shards
//   flashgpt export --checkpoint FILE --out DIR    Hugging Face GPT-2 (model.safetensors + config.json)
//   flashgpt bench-attention [options]             time the attention backends (CUDA builds)
//   flashgpt bench-kernels [options]               time the model's other kernels (CUDA builds)
//   flashgpt profile [options]                     memory and speed vs context length, measured
//                                                  and predicted (--plan-only: no GPU needed)
// Each subcommand's options are parsed by train/options.cpp (prepare, train, sample, eval,
// export) or bench/options.cpp (profile and the benchmarks); main dispatches. Every error is
// one line "flashgpt: error: ..." and a non-zero exit.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>

#include "bench/bench_attention.h"
#include "bench/bench_kernels.h"
#include "bench/options.h"
#include "bench/profile.h"
#include "data/prepare.h"
#include "kernels/common.h"
#include "train/eval.h"
#include "train/export.h"
#include "train/options.h"
#include "train/sample.h"
#include "train/train.h"

namespace {

void usage() {
  std::printf(
      "usage: flashgpt <command> [options]   (flashgpt <command> --help for its options)\n"
      "  prepare          text files -> tokenizer.bin + train/val token shards\n"
      "  train            train a GPT-2 model (--device auto|cpu|cuda, --attn auto or a backend)\n"
      "  sample           generate text from a checkpoint\n"
      "  eval             loss, perplexity and bits per byte of a checkpoint on token shards\n"
      "  export           write a checkpoint as a Hugging Face GPT-2 model (--format hf)\n"
      "  bench-attention  time attention backends on the GPU (CUDA builds)\n"
      "  bench-kernels    time the other kernels, decode and a d12 step on the GPU (CUDA builds)\n"
      "  profile          memory, step time and attention time vs context length, measured and\n"
      "                   predicted (--plan-only: the predicted table, no GPU needed)\n");
}

// Output that could not be written (a full disk, a closed pipe) is an error, not a success.
int finish_stdout(int rc) {
  if (std::fflush(stdout) != 0 || std::ferror(stdout))
    THROW_ERROR("writing to standard output failed (%s); is the disk full or the pipe closed?",
                std::strerror(errno));
  return rc;
}

// One subcommand: parse its options (false: --help was printed), then run it on them. Its exit
// status: what `run` returns when that is an int, else 0 (failures throw).
template <typename Options, typename Run>
int dispatch(bool (*parse)(int, char**, Options&), int argc, char** argv, Run run) {
  Options opt;
  if (!parse(argc, argv, opt)) return 0;
  if constexpr (std::is_same_v<decltype(run(opt)), int>) {
    return finish_stdout(run(opt));
  } else {
    run(opt);
    return finish_stdout(0);
  }
}

// `flashgpt train`: 128 + the signal when SIGINT or SIGTERM stopped it (after its checkpoint).
int train_command(const TrainOptions& o) {
  const TrainResult r = run_train(o);
  return r.interrupted ? 128 + r.interrupted : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help")) {
    usage();
    return argc < 2 ? 1 : 0;
  }
  const std::string cmd = argv[1];
  const int n = argc - 1;  // the subcommand's argv: its name, then its options
  char** sub = argv + 1;
  try {
    if (cmd == "prepare") return dispatch(parse_prepare_options, n, sub, prepare_corpus);
    if (cmd == "train") return dispatch(parse_train_options, n, sub, train_command);
    if (cmd == "sample") return dispatch(parse_sample_options, n, sub, [](auto& o) { return run_sample(o); });
    if (cmd == "eval") return dispatch(parse_eval_options, n, sub, [](auto& o) { return run_eval(o); });
    if (cmd == "export") return dispatch(parse_export_options, n, sub, [](auto& o) { run_export(o); });
    if (cmd == "bench-attention") return dispatch(parse_bench_attention_options, n, sub, run_bench_attention);
    if (cmd == "bench-kernels") return dispatch(parse_bench_kernels_options, n, sub, run_bench_kernels);
    if (cmd == "profile") return dispatch(parse_profile_options, n, sub, [](auto& o) { return run_profile(o); });
    THROW_ERROR("unknown command '%s'; use prepare, train, sample, eval, export, bench-attention, "
                "bench-kernels or profile",
                cmd.c_str());
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "flashgpt: error: %s\n", describe_failure(cmd, e).c_str());
    return 1;
  }
}
