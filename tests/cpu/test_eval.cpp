// flashgpt eval (train/eval.cpp): its loss is train's val loss on the same windows; its token
// and byte counts and the whole-split batch count against an independent reading of the shard;
// bits per byte from them; the JSON file and what it may replace; bad input.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>

#include "data/files.h"
#include "data/shards.h"
#include "data/tokenizer.h"
#include "model/checkpoint.h"
#include "model/json.h"
#include "tests/cpu/test_helpers.h"
#include "train/eval.h"
#include "train/options.h"
#include "train/train.h"

namespace {

TrainOptions eval_train_options() {
  TrainOptions o = small_train_options(6);
  o.eval_steps = 5;
  return o;
}

EvalOptions parse_eval(std::vector<std::string> args) {
  args.insert(args.begin(), "eval");
  return parsed(parse_eval_options, args);
}

EvalResult eval_quietly(const EvalOptions& e) {
  std::unique_ptr<FILE, int (*)(FILE*)> sink(std::tmpfile(), std::fclose);
  return run_eval(e, sink.get());
}

}  // namespace

TEST(Eval, LossIsTrainsValLossAndBytesAreCounted) {
  TempDir out;
  TrainOptions o = eval_train_options();
  o.out_dir = out.path;
  TrainResult tr = run_train(o);
  const std::string ckpt = model_checkpoint_path(out.path, 6);
  EvalOptions e = parse_eval({"--checkpoint", ckpt, "--data", test_corpus_dir(), "--batch", "4",
                              "--seq-len", "32", "--steps", "5", "--device", "cpu", "--json",
                              out / "eval.json"});
  EvalResult r = eval_quietly(e);
  std::printf("  train's val loss %.7f, eval %.7f, %.4f bits/byte\n", tr.val_losses.back(), r.loss,
              r.bits_per_byte);
  EXPECT_NEAR(r.loss, tr.val_losses.back(), 1e-6 * r.loss);
  EXPECT_EQ(r.sums.tokens, 5 * 4 * 32);
  // Bytes: the targets of the first 20 windows of the (single) val shard, read here directly.
  std::vector<uint16_t> val = read_shard(test_corpus_dir() + "/val_000000.bin");
  Tokenizer tok = Tokenizer::load(test_corpus_dir() + "/tokenizer.bin");
  int64_t bytes = 0;
  for (int w = 0; w < 20; w++)
    for (int t = 1; t <= 32; t++) {
      const int id = val[(size_t)w * 32 + t];
      bytes += id == tok.eot_token() ? 0 : (int64_t)tok.decode_token(id).size();
    }
  EXPECT_EQ(r.sums.bytes, bytes);
  EXPECT_NEAR(r.bits_per_byte, r.loss * r.sums.tokens / std::log(2.0) / bytes, 1e-9);
  // The JSON file holds the same numbers.
  Json j = parse_json(read_file_bytes(out / "eval.json", "eval.json"), "eval.json");
  ASSERT_EQ(j.kind, Json::Object);
  EXPECT_NEAR(j.find("loss")->number, r.loss, 1e-8);
  EXPECT_NEAR(j.find("bits_per_byte")->number, r.bits_per_byte, 1e-8);
  EXPECT_EQ((int64_t)j.find("tokens")->number, r.sums.tokens);
  EXPECT_EQ(j.find("checkpoint")->str, ckpt);

  // No --steps: the whole split, every full batch of every shard once.
  e.steps = 0;
  e.json_path = "";
  EvalResult all = eval_quietly(e);
  EXPECT_EQ(all.sums.batches, (int64_t)((val.size() - 1) / 32) / 4);
  // --batch 1 scores every window; the loss is the mean over tokens either way.
  e.batch = 1;
  e.steps = 20;
  EvalResult one = eval_quietly(e);
  EXPECT_NEAR(one.loss, r.loss, 1e-5 * r.loss);
}

TEST(Eval, BadInput) {
  TempDir out;
  TrainOptions o = eval_train_options();
  o.steps = 1;
  o.out_dir = out.path;
  run_train(o);
  const std::string ckpt = model_checkpoint_path(out.path, 1);
  Argv none({"eval", "--checkpoint", ckpt});
  EvalOptions e;
  expect_error([&] { parse_eval_options(none.argc(), none.argv(), e); }, "--data");
  expect_error([&] { parse_eval({"--checkpoint", ckpt, "--data", "x", "--batch", "0"}); }, "--batch");
  expect_error([&] { parse_eval({"--checkpoint", ckpt, "--data", "x", "--attn", "fast"}); }, "--attn 'fast'");
  e = parse_eval({"--checkpoint", ckpt, "--data", test_corpus_dir(), "--steps", "100000",
                  "--device", "cpu"});
  expect_error([&] { eval_quietly(e); }, "--steps 100000");
  e.steps = 0;
  e.seq_len = 64;  // the model holds 32 learned positions
  expect_error([&] { eval_quietly(e); }, "--seq-len 64");
  e.seq_len = 0;
  e.data_dir = "/nonexistent/data";
  expect_error([&] { eval_quietly(e); }, "/nonexistent/data");
  e.data_dir = test_corpus_dir();
  e.val_pattern = out / "nothing_*.bin";
  expect_error([&] { eval_quietly(e); }, "--val-pattern");
  e.val_pattern = "";
  e.checkpoint = out / "missing.bin";
  expect_error([&] { eval_quietly(e); }, "missing.bin");
  // a tokenizer of another vocabulary than the checkpoint's
  e.checkpoint = ckpt;
  Tokenizer::train(synthetic_corpus(200, 3), 280).save(out / "other.bin");
  e.tokenizer_path = out / "other.bin";
  expect_error([&] { eval_quietly(e); }, "other.bin");
}

// --json replaces only an earlier eval JSON (its "producer" says "flashgpt eval"); a checkpoint,
// a shard, a text file or a pipe there is refused before the evaluation and stays as it was;
// a symbolic link is written through.
TEST(Eval, JsonReplacesOnlyAnEarlierEvalJson) {
  TempDir out;
  TrainOptions o = eval_train_options();
  o.steps = 1;
  o.out_dir = out / "run";
  run_train(o);
  const std::string ckpt = model_checkpoint_path(o.out_dir, 1);
  EvalOptions e = parse_eval({"--checkpoint", ckpt, "--data", test_corpus_dir(), "--steps", "1",
                              "--device", "cpu"});
  std::ofstream(out / "shard.bin", std::ios::binary)
      << read_file_bytes(test_corpus_dir() + "/val_000000.bin", "shard");
  std::ofstream(out / "notes.txt") << "my notes\n";
  const struct {
    std::string path, what;
  } others[] = {{ckpt, "is a model checkpoint"}, {out / "shard.bin", "is a token shard"},
                {out / "notes.txt", "is a file"}};
  for (const auto& other : others) {
    SCOPED_TRACE(other.path);
    const std::string before = read_file_bytes(other.path, "x");
    e.json_path = other.path;
    expect_error([&] { eval_quietly(e); }, "--json '" + other.path + "' " + other.what);
    EXPECT_EQ(read_file_bytes(other.path, "x"), before);
  }
  ASSERT_EQ(mkfifo((out / "fifo").c_str(), 0644), 0);
  e.json_path = out / "fifo";
  expect_error([&] { eval_quietly(e); }, "is not a regular file");
  struct stat st;
  EXPECT_TRUE(lstat((out / "fifo").c_str(), &st) == 0 && S_ISFIFO(st.st_mode));

  e.json_path = out / "eval.json";
  eval_quietly(e);
  eval_quietly(e);  // its own earlier JSON
  EXPECT_EQ(parse_json(read_file_bytes(e.json_path, "x"), "x").find("producer")->str, "flashgpt eval");
  ASSERT_EQ(symlink("eval.json", (out / "link.json").c_str()), 0);
  e.json_path = out / "link.json";
  eval_quietly(e);
  EXPECT_TRUE(lstat(e.json_path.c_str(), &st) == 0 && S_ISLNK(st.st_mode));
}
