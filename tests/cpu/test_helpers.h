// test_helpers.h — small utilities shared by the CPU tests: temporary directories, argv
// building, and "this call throws flashgpt::Error whose message mentions X".
#pragma once
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "data/prepare.h"
#include "kernels/common.h"
#include "kernels/rng.h"
#include "model/checkpoint.h"
#include "train/options.h"
#include "train/train.h"

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/flashgpt_test_XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { std::system(("rm -rf '" + path + "'").c_str()); }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
};

// The whole of a text file ("" when it cannot be read).
inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// scripts/results_table.py CLAIM --out d RAWS, with an env.txt of a fake GPU written into d and
// the script's output in d/log; returns its exit status. Run from the repository root.
inline int run_results_table(const TempDir& d, const std::string& claim, const std::string& raws) {
  std::ofstream(d / "env.txt") << "gpu: Fake GPU\ndate: 2026-01-01\ncommit: abc1234\n";
  const std::string cmd = "python3 scripts/results_table.py " + claim + " --out " + d.path +
                          " --env " + (d / "env.txt") + " " + raws + " > " + (d / "log") + " 2>&1";
  return WEXITSTATUS(std::system(cmd.c_str()));
}

// The first lines of a d12 `flashgpt train` log at batch 1 x T (rotary, flash3, layer-but-attn),
// as the results_table.py collectors read them; mask is the device line's ("document mask").
inline std::string train_log_opening(long T, const char* mask) {
  const std::string t = std::to_string(T);
  return "model: L=12 C=768 NH=12 NKV=12 HS=64 V=4096 (padded 4096) maxT=" + t +
         ", rotary positions, 88.20M parameters\n"
         "device: Fake GPU | attention: flash3, " + std::string(mask) +
         " | recompute: layer-but-attn | batch 1 x " + t + ", 1 micro-steps -> " + t +
         " tokens/step\n";
}

struct Argv {
  std::vector<std::string> args;
  std::vector<char*> ptrs;
  explicit Argv(std::vector<std::string> a) : args(std::move(a)) {
    for (std::string& s : args) ptrs.push_back(&s[0]);
    ptrs.push_back(nullptr);
  }
  int argc() const { return (int)args.size(); }
  char** argv() { return ptrs.data(); }
};

// The options a train/options.h parser makes of args (argv[0], the subcommand, first); expects a
// parse that runs the command (no --help).
template <typename Options>
Options parsed(bool (*parse)(int, char**, Options&), std::vector<std::string> args) {
  Argv a(std::move(args));
  Options o;
  EXPECT_TRUE(parse(a.argc(), a.argv(), o));
  return o;
}

// What a parser prints for `args` (ending in --help), each whitespace run as one space (cxxopts
// wraps lines); expects it not to run the command.
template <typename Options>
std::string help_text(bool (*parse)(int, char**, Options&), std::vector<std::string> args) {
  Argv a(std::move(args));
  Options o;
  std::stringstream captured;
  std::streambuf* old = std::cout.rdbuf(captured.rdbuf());
  const bool ran = parse(a.argc(), a.argv(), o);
  std::cout.rdbuf(old);
  EXPECT_FALSE(ran);
  std::string text;
  for (char ch : captured.str())
    if (!(isspace((unsigned char)ch) && !text.empty() && text.back() == ' '))
      text += isspace((unsigned char)ch) ? ' ' : ch;
  return text;
}

// Runs fn, expects flashgpt::Error whose message contains `needle`; returns the message.
template <typename Fn>
std::string expect_error(Fn fn, const std::string& needle) {
  try {
    fn();
  } catch (const flashgpt::Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(needle), std::string::npos) << "message: " << msg << "\nexpected: " << needle;
    return msg;
  }
  ADD_FAILURE() << "no flashgpt::Error thrown (expected one mentioning '" << needle << "')";
  return "";
}

// A synthetic corpus with learnable structure: sentences from a small grammar, documents
// separated by "%" lines (the fortune format).
inline std::string synthetic_corpus(int docs, uint64_t seed) {
  const char* subj[] = {"the cat", "a dog", "my friend", "the old man", "every child", "the bird"};
  const char* verb[] = {"sees", "likes", "finds", "wants", "watches", "follows"};
  const char* obj[] = {"the ball", "a red apple", "the small house", "a green tree", "the river"};
  Rng rng(seed);
  std::string text;
  for (int d = 0; d < docs; d++) {
    int n = 2 + (int)(rng.next_u64() % 4);
    for (int s = 0; s < n; s++) {
      text += subj[rng.next_u64() % 6];
      text += " ";
      text += verb[rng.next_u64() % 6];
      text += " ";
      text += obj[rng.next_u64() % 5];
      text += ". ";
    }
    text += "\n%\n";
  }
  return text;
}


// The synthetic corpus prepared once per test binary (vocabulary 300, 10% validation):
// test_corpus_dir() is a --data directory for the trainer tests.
inline const std::string& test_corpus_dir() {
  struct Corpus {
    TempDir dir;
    std::string data;
    Corpus() {
      std::ofstream(dir / "corpus.txt") << synthetic_corpus(1500, 11);
      PrepareOptions p;
      p.inputs = {dir / "corpus.txt"};
      p.out_dir = dir / "data";
      p.vocab_size = 300;
      p.val_fraction = 0.1;
      p.quiet = true;
      prepare_corpus(p);
      data = p.out_dir;
    }
  };
  static Corpus c;
  return c.data;
}

// The small CPU run the file and bad-input tests share (L=2, C=64, T=32, batch 4 on
// test_corpus_dir(), no evaluation or samples during the run), with `extra` flags appended.
inline TrainOptions small_train_options(int steps, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {
      "train", "--data", test_corpus_dir(), "--model", "tiny", "--layers", "2", "--channels", "64",
      "--heads", "4", "--seq-len", "32", "--batch", "4", "--steps", std::to_string(steps), "--lr",
      "3e-3", "--warmup", "2", "--eval-every", "0", "--eval-steps", "2", "--sample-every", "0",
      "--device", "cpu", "--quiet"};
  args.insert(args.end(), extra.begin(), extra.end());
  Argv a(args);
  TrainOptions o;
  parse_train_options(a.argc(), a.argv(), o);
  return o;
}

// small_train_options(steps) trained into out_dir; returns its model file of the last step.
inline std::string train_small_model(const std::string& out_dir, int steps = 1) {
  TrainOptions o = small_train_options(steps);
  o.out_dir = out_dir;
  run_train(o);
  return model_checkpoint_path(out_dir, steps);
}
