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
// Every error is one line "flashgpt: error: ..." and a non-zero exit.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "bench/bench_attention.h"
#include "bench/bench_kernels.h"
#include "bench/profile.h"
#include "data/prepare.h"
#include "kernels/common.h"
#include "train/eval.h"
#include "train/export.h"
#include "train/options.h"
#include "train/sample.h"
#include "train/train.h"

static void usage() {
  std::printf(
      "usage: flashgpt <command> [options]   (flashgpt <command> --help for its options)\n"
      "  prepare          text files -> tokenizer.bin + train/val token shards\n"
      "  train            train a GPT-2 model (--device auto|cpu|cuda, --attn flash|naive|flash1)\n"
      "  sample           generate text from a checkpoint\n"
      "  eval             loss, perplexity and bits per byte of a checkpoint on token shards\n"
      "  export           write a checkpoint as a Hugging Face GPT-2 model (--format hf)\n"
      "  bench-attention  time attention backends on the GPU (CUDA builds)\n"
      "  bench-kernels    time the other kernels, decode and a d12 step on the GPU (CUDA builds)\n"
      "  profile          memory, step time and attention time vs context length, measured and\n"
      "                   predicted (--plan-only: the predicted table, no GPU needed)\n");
}

// Output that could not be written (a full disk, a closed pipe) is an error, not a success.
static int finish_stdout(int rc) {
  if (std::fflush(stdout) != 0 || std::ferror(stdout))
    THROW_ERROR("writing to standard output failed (%s); is the disk full or the pipe closed?",
                std::strerror(errno));
  return rc;
}

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help")) {
    usage();
    return argc < 2 ? 1 : 0;
  }
  std::string cmd = argv[1];
  try {
    if (cmd == "prepare") {
      PrepareOptions opt;
      if (!parse_prepare_options(argc - 1, argv + 1, opt)) return 0;
      prepare_corpus(opt);
      return finish_stdout(0);
    }
    if (cmd == "train") {
      TrainOptions opt;
      if (!parse_train_options(argc - 1, argv + 1, opt)) return 0;
      TrainResult r = run_train(opt);
      return finish_stdout(r.interrupted ? 128 + r.interrupted : 0);
    }
    if (cmd == "sample") {
      SampleOptions opt;
      if (!parse_sample_options(argc - 1, argv + 1, opt)) return 0;
      return finish_stdout(run_sample(opt));
    }
    if (cmd == "eval") {
      EvalOptions opt;
      if (!parse_eval_options(argc - 1, argv + 1, opt)) return 0;
      run_eval(opt);
      return finish_stdout(0);
    }
    if (cmd == "export") {
      ExportOptions opt;
      if (!parse_export_options(argc - 1, argv + 1, opt)) return 0;
      run_export(opt);
      return finish_stdout(0);
    }
    if (cmd == "bench-attention") return bench_attention_main(argc - 1, argv + 1);
    if (cmd == "bench-kernels") return bench_kernels_main(argc - 1, argv + 1);
    if (cmd == "profile") return profile_main(argc - 1, argv + 1);
    THROW_ERROR("unknown command '%s'; use prepare, train, sample, eval, export, bench-attention, "
                "bench-kernels or profile",
                cmd.c_str());
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "flashgpt: error: %s\n", describe_failure(cmd, e).c_str());
    return 1;
  }
}
