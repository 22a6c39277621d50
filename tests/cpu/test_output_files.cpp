// Output files (model/output_files.h): no command writes over a file that it did not create.
// Every output path of every subcommand against what may already stand there: a file of
// another kind is refused with one line naming the flag and the file, and stays as it was; the
// command's own earlier output is replaced; a symbolic link is written through (the link
// stays); a pipe is refused where the output would be renamed into place.
// (eval --json: Eval.JsonReplacesOnlyAnEarlierEvalJson; the Hugging Face reader: HfExport.*)
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>

#include "bench/profile.h"
#include "data/files.h"
#include "data/tokenizer.h"
#include "model/checkpoint.h"
#include "tests/cpu/test_helpers.h"
#include "train/export.h"
#include "train/options.h"
#include "train/run_files.h"
#include "train/train.h"

namespace {

std::string slurp(const std::string& path) { return read_file_bytes(path, "test"); }

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

bool is_symlink(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
}

bool is_fifo(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0 && S_ISFIFO(st.st_mode);
}

// fn fails with an error that mentions needle, and the file at path stays as it was.
template <typename Fn>
void expect_untouched(const std::string& path, Fn fn, const std::string& needle) {
  const std::string before = slurp(path);
  expect_error(fn, needle);
  EXPECT_EQ(slurp(path), before) << path;
}

// The file at path is refused as an output of `kind` under flag.
void expect_refused(const std::string& path, const char* flag, OutputKind kind,
                    const std::string& needle) {
  expect_untouched(path, [&] { check_output_path(path, flag, kind); }, std::string(flag) + " '" +
                   path + "' " + needle);
}

void export_quietly(const std::string& checkpoint, const std::string& out_dir) {
  ExportOptions e;
  e.checkpoint = checkpoint;
  e.out_dir = out_dir;
  std::unique_ptr<FILE, int (*)(FILE*)> sink(std::tmpfile(), std::fclose);
  run_export(e, sink.get());
}

}  // namespace

// The rule itself, kind by kind, on hand-made files.
TEST(OutputFiles, EachKindReplacesOnlyItsOwnEarlierOutput) {
  TempDir dir;
  EXPECT_NO_THROW(check_output_path(dir / "new.json", "--json", OutputKind::EvalJson));
  write_text(dir / "empty", "");
  EXPECT_NO_THROW(check_output_path(dir / "empty", "--json", OutputKind::EvalJson));
  write_text(dir / "eval.json", "{\"producer\": \"flashgpt eval\", \"loss\": 1}\n");
  EXPECT_NO_THROW(check_output_path(dir / "eval.json", "--json", OutputKind::EvalJson));
  write_text(dir / "other.json", "{\"loss\": 1}\n");
  expect_refused(dir / "other.json", "--json", OutputKind::EvalJson,
                 "is a JSON file, not an eval JSON");
  write_text(dir / "notes.txt", "my notes\n");
  expect_refused(dir / "notes.txt", "--json", OutputKind::EvalJson, "is a file, not an eval JSON");
  std::system(("mkdir '" + dir.path + "/sub'").c_str());
  expect_error([&] { check_output_path(dir / "sub", "--json", OutputKind::EvalJson); },
               "is a directory");

  // A train log: every line a step record; a last line cut short by a crash is still one.
  write_text(dir / "log.jsonl", "{\"step\": 1, \"loss\": 5.1}\n{\"step\": 2, \"loss\": 4.9}\n{\"st");
  EXPECT_NO_THROW(check_output_path(dir / "log.jsonl", "--log", OutputKind::TrainLog));
  write_text(dir / "mixed.jsonl", "{\"step\": 1, \"loss\": 5.1}\nmy notes\n");
  expect_refused(dir / "mixed.jsonl", "--log", OutputKind::TrainLog, "is a file, not a train log");
  expect_refused(dir / "eval.json", "--log", OutputKind::TrainLog, "is a JSON file");

  // A pipe: fine for a stream (--log), refused where the output is renamed into place.
  ASSERT_EQ(mkfifo((dir / "fifo").c_str(), 0644), 0);
  EXPECT_NO_THROW(check_output_path(dir / "fifo", "--log", OutputKind::TrainLog));
  expect_error([&] { check_output_path(dir / "fifo", "--json", OutputKind::EvalJson); },
               "is not a regular file");

  // A symbolic link is judged by the file it names; a link to nothing is refused.
  ASSERT_EQ(symlink((dir / "eval.json").c_str(), (dir / "link.json").c_str()), 0);
  EXPECT_NO_THROW(check_output_path(dir / "link.json", "--json", OutputKind::EvalJson));
  ASSERT_EQ(symlink((dir / "notes.txt").c_str(), (dir / "link.txt").c_str()), 0);
  expect_refused(dir / "link.txt", "--json", OutputKind::EvalJson, "is a file");
  ASSERT_EQ(symlink((dir / "gone").c_str(), (dir / "dangling").c_str()), 0);
  expect_error([&] { check_output_path(dir / "dangling", "--json", OutputKind::EvalJson); },
               "symbolic link to a missing file");

  // bench-attention --csv: its own header; the profile's table and JSON: their metadata block.
  write_text(dir / "bench.csv", "# gpu: NVIDIA H100\n" + std::string(kBenchAttentionCsvHeader) +
                                    "\nflash,64,12,12,4,1024,1,0.1,0.2,0.3,1,2,3,0,ok\n");
  EXPECT_NO_THROW(check_output_path(dir / "bench.csv", "--csv", OutputKind::BenchAttentionCsv));
  write_text(dir / "data.csv", "a,b\n1,2\n");
  expect_refused(dir / "data.csv", "--csv", OutputKind::BenchAttentionCsv,
                 "is a file, not a bench-attention CSV");
  expect_refused(dir / "data.csv", "--out", OutputKind::ProfileTable,
                 "is a file, not a flashgpt profile table");
  expect_refused(dir / "eval.json", "--out", OutputKind::ProfileJson,
                 "is a JSON file, not a flashgpt profile JSON");

  // train --out DIR/train.lock: empty or a lock's "pid N on HOST".
  write_text(dir / "train.lock", "pid 12 on host\n");
  EXPECT_NO_THROW(check_output_path(dir / "train.lock", "--out", OutputKind::TrainLock));
  write_text(dir / "lock2", "pid 12 on host\nand more\n");
  expect_refused(dir / "lock2", "--out", OutputKind::TrainLock, "is a file, not a train lock file");
}

// write_file_atomically (every renamed output) writes through a symbolic link and refuses to
// rename over anything but a regular file.
TEST(OutputFiles, AtomicWritesGoThroughLinksAndNeverReplaceAPipe) {
  TempDir dir;
  write_text(dir / "real.txt", "old");
  ASSERT_EQ(symlink("real.txt", (dir / "link.txt").c_str()), 0);
  write_file_atomically(dir / "link.txt", [](FILE* f) { return std::fputs("new", f) >= 0; });
  EXPECT_TRUE(is_symlink(dir / "link.txt"));
  EXPECT_EQ(slurp(dir / "real.txt"), "new");
  ASSERT_EQ(mkfifo((dir / "fifo").c_str(), 0644), 0);
  expect_error([&] { write_file_atomically(dir / "fifo", [](FILE*) { return true; }); },
               "is not a regular file");
  EXPECT_TRUE(is_fifo(dir / "fifo"));
}

// --log naming an exported model, an eval JSON or a text file: refused, untouched. Its own
// earlier log is replaced (a fresh run) or continued (--resume).
TEST(OutputFiles, LogReplacesOnlyAnEarlierLog) {
  TempDir dir;
  export_quietly(train_small_model(dir / "run"), dir / "hf");
  TrainOptions o = small_train_options(2);
  write_text(dir / "notes.txt", "my notes\n");
  for (const char* name : {"hf/model.safetensors", "hf/config.json", "notes.txt"}) {
    o.log_path = dir / name;
    expect_untouched(o.log_path, [&] { run_train(o); }, "--log '" + o.log_path + "' is a ");
  }
  o.log_path = dir / "log.jsonl";
  run_train(o);
  run_train(o);  // the same log again: its own
  EXPECT_EQ(slurp(o.log_path).rfind("{\"step\": 1,", 0), 0u);
}

// export --out: another tokenizer.bin (a data directory's, another run's) is refused before any
// file is written; the same tokenizer and an earlier export are fine; a model or config.json
// that export did not write is refused.
TEST(OutputFiles, ExportReplacesNeitherAnotherTokenizerNorAnotherModel) {
  TempDir dir;
  const std::string ckpt = train_small_model(dir / "run");
  std::ofstream(dir / "other.txt") << synthetic_corpus(400, 5);
  PrepareOptions p;
  p.inputs = {dir / "other.txt"};
  p.out_dir = dir / "data";
  p.vocab_size = 290;
  p.quiet = true;
  prepare_corpus(p);
  expect_untouched(dir / "data/tokenizer.bin", [&] { export_quietly(ckpt, dir / "data"); },
                   "--out '" + dir / "data/tokenizer.bin" + "' is a tokenizer file");
  EXPECT_FALSE(file_exists(dir / "data/model.safetensors"));  // checked before the first write

  export_quietly(ckpt, dir / "run");  // beside its own checkpoints: the same tokenizer
  export_quietly(ckpt, dir / "hf");
  export_quietly(ckpt, dir / "hf");  // again: its own earlier export
  EXPECT_TRUE(file_exists(dir / "hf/tokenizer.bin"));

  std::system(("mkdir '" + dir.path + "/hub'").c_str());
  write_text(dir / "hub/config.json", "{\"model_type\": \"gpt2\"}\n");
  expect_untouched(dir / "hub/config.json", [&] { export_quietly(ckpt, dir / "hub"); },
                   "config.json' is a JSON file");
  write_text(dir / "hub/model.safetensors", slurp(dir / "hf/model.safetensors").substr(0, 8));
  expect_untouched(dir / "hub/model.safetensors", [&] { export_quietly(ckpt, dir / "hub"); },
                   "model.safetensors' is a file");
}

// prepare --out: a run directory's tokenizer.bin (its checkpoints were made with it) and a file
// under a shard's name that is no shard are refused; its own data directory is replaced.
TEST(OutputFiles, PrepareReplacesOnlyItsOwnDataDirectory) {
  TempDir dir;
  std::ofstream(dir / "text.txt") << synthetic_corpus(300, 7);
  PrepareOptions p;
  p.inputs = {dir / "text.txt"};
  p.vocab_size = 280;
  p.quiet = true;
  train_small_model(dir / "run");
  p.out_dir = dir / "run";
  expect_untouched(dir / "run/tokenizer.bin", [&] { prepare_corpus(p); },
                   "tokenizer.bin' is a tokenizer file");
  EXPECT_FALSE(file_exists(dir / "run/train_000000.bin"));

  p.out_dir = dir / "data";
  prepare_corpus(p);
  prepare_corpus(p);  // again: its own files
  write_text(dir / "data/val_000007.bin", "not a shard");  // prepare would remove it as stale
  expect_untouched(dir / "data/val_000007.bin", [&] { prepare_corpus(p); },
                   "val_000007.bin' is a file");
}

// train --out: another tokenizer.bin is refused even without checkpoints beside it (it may be
// a data directory's); a train.lock that is not a lock is refused.
TEST(OutputFiles, TrainOutReplacesNoOtherTokenizerOrLock) {
  TempDir dir;
  std::system(("mkdir '" + dir.path + "/out'").c_str());
  Tokenizer::train(synthetic_corpus(300, 9), 290).save(dir / "out/tokenizer.bin");
  TrainOptions o = small_train_options(1);
  o.out_dir = dir / "out";
  expect_untouched(dir / "out/tokenizer.bin", [&] { run_train(o); },
                   "tokenizer.bin' is a tokenizer file");
  EXPECT_TRUE(checkpoint_files(o.out_dir).empty());

  std::system(("mkdir '" + dir.path + "/locked'").c_str());
  write_text(dir / "locked/train.lock", "my notes\n");
  o.out_dir = dir / "locked";
  expect_untouched(dir / "locked/train.lock", [&] { run_train(o); }, "train.lock' is a file");
}

// profile --out: a plan.csv / plan.json that profile did not write is refused; its own are
// replaced. A PNG under a plot's name that the plot script did not draw is left as it was.
TEST(OutputFiles, ProfileReplacesOnlyItsOwnTablesAndPlots) {
  TempDir dir;
  ProfileOptions opt = parsed(parse_profile_options, {"profile", "--plan-only", "--gpu-memory", "80",
                                                      "--plot=false", "--out", dir.path, "--attn",
                                                      "naive", "--seq-lens", "256"});
  std::unique_ptr<FILE, int (*)(FILE*)> sink(std::tmpfile(), std::fclose);
  run_profile(opt, sink.get());
  run_profile(opt, sink.get());  // its own
  write_text(dir / "plan.json", "{\"mine\": 1}\n");
  expect_untouched(dir / "plan.json", [&] { run_profile(opt, sink.get()); },
                   "plan.json' is a JSON file");
  std::remove((dir / "plan.json").c_str());

  opt.plot = true;
  write_text(dir / "memory_vs_T.png", "my picture");
  std::unique_ptr<FILE, int (*)(FILE*)> out(std::tmpfile(), std::fclose);
  run_profile(opt, out.get());
  std::rewind(out.get());
  char buf[4096] = {0};
  std::fread(buf, 1, sizeof buf - 1, out.get());
  if (std::string(buf).find("plot_profile.py not found") != std::string::npos)
    GTEST_SKIP() << "scripts/plot_profile.py is not reachable from here";
  EXPECT_NE(std::string(buf).find("plots: not made"), std::string::npos) << buf;
  EXPECT_EQ(slurp(dir / "memory_vs_T.png"), "my picture");
}
