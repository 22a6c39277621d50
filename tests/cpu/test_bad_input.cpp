// Bad input and faults (the table of that name in docs/reference.md lists them): each case that
// once crashed, exited 0 on nonsense or lost data, with what must happen now.
// Data loss: a failed prepare keeps the old directory; a failed or refused train keeps --out's
// tokenizer; --log cannot overwrite a shard; a fresh run refuses another run's checkpoints;
// a second train into one --out is locked out; after a crash + --resume no step is logged twice.
// Silent wrong results: --rope-theta is stored exactly; --resume refuses a changed data order,
// --steps at or below the checkpoint, --init; --layers 0; an empty --val-pattern; a --tokenizer
// or --vocab-size that disagrees with --data; a state file whose step disagrees with its name.
// Failures that exited 0 or said too little: --log /dev/full, sample into /dev/full, absurd
// --weight-decay, NaN weights (sample, eval, export, --init), --total-batch overflowing the
// micro-step count, --tokens 2^31-1, a failed allocation, prepare --help, prepare's error after
// its progress line.
// Faults: SIGINT/SIGTERM checkpoint and exact resume; a crash during a checkpoint write then
// --resume continues exactly; a full disk (tmpfs; skips where it cannot mount).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>

#include "data/files.h"
#include "data/prepare.h"
#include "data/tokenizer.h"
#include "model/checkpoint.h"
#include "model/layout.h"
#include "tests/cpu/test_helpers.h"
#include "train/eval.h"
#include "train/export.h"
#include "train/options.h"
#include "train/run_files.h"
#include "train/sample.h"
#include "train/train.h"

namespace {

std::string slurp(const std::string& path) { return read_file_bytes(path, "test"); }

// Sets an environment variable for one scope.
struct ScopedEnv {
  std::string name;
  ScopedEnv(const std::string& n, const std::string& v) : name(n) { setenv(n.c_str(), v.c_str(), 1); }
  ~ScopedEnv() { unsetenv(name.c_str()); }
};

// Steps logged in a JSONL file, in order.
std::vector<int> logged_steps(const std::string& path) {
  std::vector<int> steps;
  std::istringstream in(slurp(path));
  std::string line;
  while (std::getline(in, line)) {
    int s = 0;
    if (std::sscanf(line.c_str(), "{\"step\": %d", &s) == 1) steps.push_back(s);
  }
  return steps;
}

// A corpus prepared into dir (vocabulary v).
void prepare_into(const std::string& dir, const std::string& text_path, int vocab) {
  PrepareOptions p;
  p.inputs = {text_path};
  p.out_dir = dir;
  p.vocab_size = vocab;
  p.val_fraction = 0.1;
  p.quiet = true;
  prepare_corpus(p);
}

// A model file with one NaN weight.
std::string nan_checkpoint(const TempDir& dir) {
  GPTConfig c = gpt_preset("tiny", 300, 32);
  c.num_layers = 2;
  c.channels = 64;
  std::vector<float> p = gpt_init_params(c, 1);
  p[ParamLayout(c).offsets[P_FCW] + 5] = std::numeric_limits<float>::quiet_NaN();
  save_model_file(dir / "nan.bin", c, p);
  Tokenizer::load(test_corpus_dir() + "/tokenizer.bin").save(dir / "tokenizer.bin");
  return dir / "nan.bin";
}

// A tmpfs of `bytes` mounted on a fresh directory for the scope; ok() false where mounting is
// not allowed (no root, a container without CAP_SYS_ADMIN).
struct SmallTmpfs {
  TempDir dir;
  bool mounted = false;
  explicit SmallTmpfs(size_t bytes) {
    mounted = mount("tmpfs", dir.path.c_str(), "tmpfs", 0,
                    ("size=" + std::to_string(bytes)).c_str()) == 0;
  }
  ~SmallTmpfs() {
    if (mounted) umount2(dir.path.c_str(), MNT_DETACH);
  }
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// data loss

TEST(BadInputDataLoss, FailedPrepareKeepsTheOldDirectory) {
  TempDir dir;
  std::ofstream(dir / "a.txt") << synthetic_corpus(300, 1);
  std::ofstream(dir / "b.txt") << synthetic_corpus(300, 2) + synthetic_corpus(300, 3);
  prepare_into(dir / "data", dir / "a.txt", 280);
  const std::string tok = slurp(dir / "data/tokenizer.bin"), train = slurp(dir / "data/train_000000.bin");
  // The second prepare cannot write its val shard: the staged name is taken by a directory.
  std::system(("mkdir -p '" + dir.path + "/data/val_000000.bin.new/x'").c_str());
  expect_error([&] { prepare_into(dir / "data", dir / "b.txt", 300); }, "val_000000.bin");
  EXPECT_EQ(slurp(dir / "data/tokenizer.bin"), tok);  // still the one the old shards were made with
  EXPECT_EQ(slurp(dir / "data/train_000000.bin"), train);
  EXPECT_FALSE(file_exists(dir / "data/tokenizer.bin.new"));
  EXPECT_FALSE(file_exists(dir / "data/train_000000.bin.new"));
  std::system(("rm -rf '" + dir.path + "/data/val_000000.bin.new'").c_str());
  prepare_into(dir / "data", dir / "b.txt", 300);  // and once it can, everything is replaced
  EXPECT_NE(slurp(dir / "data/tokenizer.bin"), tok);
}

TEST(BadInputDataLoss, OutTokenizerIsNeverReplacedBesideCheckpoints) {
  TempDir dir;
  std::ofstream(dir / "b.txt") << synthetic_corpus(400, 5);
  prepare_into(dir / "other", dir / "b.txt", 290);  // another tokenizer (290 tokens)
  TrainOptions o = small_train_options(2);
  o.out_dir = dir / "run";
  run_train(o);
  const std::string tok = slurp(dir / "run/tokenizer.bin");
  TrainOptions fresh = small_train_options(2);  // a fresh run with the other data into the same --out
  fresh.data_dir = dir / "other";
  fresh.out_dir = dir / "run";
  expect_error([&] { run_train(fresh); }, "--resume");
  TrainOptions resumed = fresh;  // resuming those checkpoints with the other tokenizer
  resumed.resume = true;
  resumed.steps = 4;
  expect_error([&] { run_train(resumed); }, "tokenizer.bin");
  EXPECT_EQ(slurp(dir / "run/tokenizer.bin"), tok);
  EXPECT_EQ(latest_checkpoint_step(dir / "run"), 2);
}

TEST(BadInputDataLoss, LogCannotOverwriteAShardOrCheckpoint) {
  TempDir dir;
  const std::string shard = test_corpus_dir() + "/train_000000.bin";
  const std::string before = slurp(shard);
  TrainOptions o = small_train_options(2);
  o.log_path = shard;
  expect_error([&] { run_train(o); }, "is a token shard");
  EXPECT_EQ(slurp(shard), before);
  o.log_path = train_small_model(dir / "run", 2);
  expect_error([&] { run_train(o); }, "is a model checkpoint");
}

TEST(BadInputDataLoss, FreshRunRefusesAnotherRunsCheckpoints) {
  TempDir dir;
  TrainOptions o = small_train_options(3);
  o.out_dir = dir.path;
  run_train(o);
  expect_error([&] { run_train(o); }, "already holds checkpoints (state_00000003.bin");
  TrainOptions r = o;  // continuing it is what --resume is for
  r.resume = true;
  r.steps = 4;
  EXPECT_EQ(run_train(r).first_step, 4);
}

TEST(BadInputDataLoss, SecondTrainIntoOneOutIsLockedOut) {
  TempDir dir;
  OutDirLock first(dir.path);  // another train holding --out
  TrainOptions o = small_train_options(2);
  o.out_dir = dir.path;
  std::string msg = expect_error([&] { run_train(o); }, "in use by another flashgpt train");
  EXPECT_NE(msg.find("pid " + std::to_string(getpid())), std::string::npos) << msg;
  EXPECT_TRUE(checkpoint_files(dir.path).empty());
}

TEST(BadInputDataLoss, LogHoldsEachStepOnceAfterCrashAndResume) {
  TempDir dir;
  TrainOptions o = small_train_options(8, {"--checkpoint-every", "4", "--out", dir / "run"});
  o.log_path = dir / "log.jsonl";
  {
    ScopedEnv crash("FLASHGPT_TEST_FAIL", "0:7");  // dies at the start of step 7
    expect_error([&] { run_train(o); }, "injected failure at step 7");
  }
  EXPECT_EQ(logged_steps(o.log_path), (std::vector<int>{1, 2, 3, 4, 5, 6}));
  o.resume = true;  // from step 4: steps 5 and 6 come again
  run_train(o);
  EXPECT_EQ(logged_steps(o.log_path), (std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8}));
}

// ---------------------------------------------------------------------------------------------
// silent wrong results

TEST(BadInputSilent, RopeThetaIsStoredExactlyAndResumeIsBitIdentical) {
  TempDir dir;
  TrainOptions o = small_train_options(4, {"--pos", "rope", "--rope-theta", "500.5", "--checkpoint-every", "2",
                                  "--out", dir.path});
  TrainResult full = run_train(o);
  EXPECT_EQ(read_model_config(model_checkpoint_path(dir.path, 4)).rope_theta, 500.5f);
  std::remove(model_checkpoint_path(dir.path, 4).c_str());
  std::remove(state_checkpoint_path(dir.path, 4).c_str());
  o.resume = true;
  TrainResult again = run_train(o);
  ASSERT_EQ(again.losses.size(), 2u);
  EXPECT_EQ(again.losses[0], full.losses[2]);
  EXPECT_EQ(again.losses[1], full.losses[3]);
}

TEST(BadInputSilent, ResumeRefusesWhatWouldChangeTheRun) {
  TempDir dir;
  TrainOptions o = small_train_options(4);
  o.out_dir = dir.path;
  run_train(o);
  TrainOptions r = small_train_options(6, {"--no-shuffle", "--out", dir.path, "--resume"});
  expect_error([&] { run_train(r); }, "--no-shuffle");
  r = o;
  r.resume = true;
  r.steps = 3;
  expect_error([&] { run_train(r); }, "--steps 3");
  r.steps = 4;
  expect_error([&] { run_train(r); }, "--steps 4");
  r.steps = 6;
  r.init_path = model_checkpoint_path(dir.path, 4);
  expect_error([&] { run_train(r); }, "--init");
  // A state file whose header step is not its name's (copied or renamed by hand).
  std::system(("cp '" + model_checkpoint_path(dir.path, 4) + "' '" + model_checkpoint_path(dir.path, 5) +
               "' && cp '" + state_checkpoint_path(dir.path, 4) + "' '" + state_checkpoint_path(dir.path, 5) + "'").c_str());
  r.init_path = "";
  expect_error([&] { run_train(r); }, "holds step 4, but its name says step 5");
}

TEST(BadInputSilent, ZeroSizesAndEmptyValPatternAreErrors) {
  for (const char* flag : {"--layers", "--heads", "--kv-heads", "--channels", "--max-seq-len"})
    expect_error([&] { small_train_options(2, {flag, "0"}); }, std::string(flag) + " must be at least 1");
  expect_error([&] { small_train_options(2, {"--vocab-size", "1"}); }, "--vocab-size");
  TrainOptions o = small_train_options(2, {"--val-pattern", "/nonexistent/val_*.bin"});
  expect_error([&] { run_train(o); }, "--val-pattern '/nonexistent/val_*.bin' matches no files");
}

TEST(BadInputSilent, TokenizerOrVocabSizeDisagreeingWithData) {
  TempDir dir;
  Tokenizer::train(synthetic_corpus(300, 9), 290).save(dir / "other.bin");
  TrainOptions o = small_train_options(1);
  o.tokenizer_path = dir / "other.bin";
  expect_error([&] { run_train(o); }, "is not the tokenizer --data");
  o = small_train_options(1, {"--vocab-size", "512"});
  expect_error([&] { run_train(o); }, "--vocab-size 512");
  o = small_train_options(1, {"--vocab-size", "300"});  // agreeing is fine, so is the same file named
  o.tokenizer_path = test_corpus_dir() + "/tokenizer.bin";
  EXPECT_EQ(run_train(o).losses.size(), 1u);
}

// ---------------------------------------------------------------------------------------------
// failures that exited 0 or said too little

TEST(BadInputExit, FullDeviceForLogAndSample) {
  if (!file_exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  TrainOptions o = small_train_options(2);
  o.log_path = "/dev/full";
  expect_error([&] { run_train(o); }, "--log '/dev/full'");
  TempDir dir;
  SampleOptions s;
  s.checkpoint = train_small_model(dir.path);
  s.tokens = 20;
  s.device = "cpu";
  std::unique_ptr<FILE, int (*)(FILE*)> full(std::fopen("/dev/full", "w"), std::fclose);
  expect_error([&] { run_sample(s, full.get()); }, "writing the text failed");
}

TEST(BadInputExit, AbsurdWeightDecayIsRefused) {
  expect_error([&] { small_train_options(2, {"--weight-decay", "1e30"}); }, "--weight-decay");
  expect_error([&] { small_train_options(2, {"--lr", "0.01", "--weight-decay", "200"}); },
               "--weight-decay 200");
  expect_error([&] { small_train_options(2, {"--weight-decay", "nan"}); }, "--weight-decay");
  EXPECT_NO_THROW(small_train_options(2, {"--weight-decay", "0.1"}));
}

TEST(BadInputExit, NanWeightsNameTheFile) {
  TempDir dir;
  const std::string nan = nan_checkpoint(dir);
  SampleOptions s;
  s.checkpoint = nan;
  s.device = "cpu";
  expect_error([&] { run_sample(s); }, "nan.bin' holds a non-finite weight (nan in fcw");
  TrainOptions o = small_train_options(1);
  o.init_path = nan;
  expect_error([&] { run_train(o); }, "nan.bin' holds a non-finite weight");
  ExportOptions e;
  e.checkpoint = nan;
  e.out_dir = dir / "hf";
  expect_error([&] { run_export(e); }, "nan.bin");
  EvalOptions ev;
  ev.checkpoint = nan;
  ev.data_dir = test_corpus_dir();
  expect_error([&] { run_eval(ev); }, "nan.bin");
}

TEST(BadInputExit, SizesThatOverflow) {
  expect_error([&] { small_train_options(2, {"--total-batch", "9223372036854775680"}); }, "--total-batch");
  expect_error([&] { small_train_options(2, {"--batch", "65536", "--seq-len", "65536"}); },
               "--batch 65536 x --seq-len 65536");
  Argv a({"sample", "--checkpoint", "m.bin", "--tokens", "2147483647"});
  SampleOptions s;
  std::string msg = expect_error([&] { parse_sample_options(a.argc(), a.argv(), s); }, "--tokens");
  EXPECT_EQ(msg.find("--seq-len"), std::string::npos) << msg;
}

TEST(BadInputExit, FailedAllocationSaysSo) {
  // 2^31-1 tokens per micro-step on a 1024-channel layer: hundreds of TB of activations, more
  // than any address space, so the allocation fails at once (no overcommit can hide it).
  TrainOptions o = parsed(parse_train_options, {"train", "--bench", "--device", "cpu", "--model", "tiny", "--layers",
                                "1", "--channels", "1024", "--heads", "16", "--pos", "rope", "--vocab-size", "300",
                                "--batch", "32767", "--seq-len", "65536", "--quiet"});
  try {
    run_train(o);
    ADD_FAILURE() << "no exception";
  } catch (const std::bad_alloc& e) {
    const std::string line = describe_failure("train", e);
    EXPECT_NE(line.find("train ran out of host memory"), std::string::npos) << line;
    EXPECT_NE(line.find("--batch"), std::string::npos) << line;
  }
}

TEST(BadInputExit, PrepareHelpListsInput) {
  const std::string help = help_text(parse_prepare_options, {"prepare", "--help"});
  EXPECT_NE(help.find("--input"), std::string::npos) << help;
}

TEST(BadInputExit, PrepareErrorStartsOnItsOwnLine) {
  // Random words: many merges, then none left for a huge vocabulary, after progress lines.
  TempDir dir;
  Rng rng(3);
  std::string text;
  for (int i = 0; i < 4000; i++) {
    for (int k = 0, n = 2 + (int)rng.below(6); k < n; k++) text += (char)('a' + rng.below(26));
    text += i % 10 == 9 ? "\n\n" : " ";
  }
  std::ofstream(dir / "words.txt") << text;
  PrepareOptions p;
  p.inputs = {dir / "words.txt"};
  p.out_dir = dir / "data";
  p.vocab_size = 65536;
  fflush(stderr);
  const int saved = dup(2);
  FILE* cap = std::fopen((dir / "stderr.txt").c_str(), "w");
  dup2(fileno(cap), 2);
  std::string msg;
  try {
    prepare_corpus(p);
  } catch (const flashgpt::Error& e) {
    msg = e.what();
  }
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  std::fclose(cap);
  const std::string err = slurp(dir / "stderr.txt");
  EXPECT_NE(msg.find("lower --vocab-size"), std::string::npos) << msg;
  ASSERT_NE(err.find("\rprepare: training tokenizer"), std::string::npos) << err;
  EXPECT_EQ(err.back(), '\n') << "the error would be glued to: " << err.substr(err.rfind('\r'));
  EXPECT_FALSE(file_exists(dir / "data/tokenizer.bin"));
}

// ---------------------------------------------------------------------------------------------
// faults

TEST(BadInputFaults, SignalWritesACheckpointAndResumeIsExact) {
  // As in a foreground terminal: default actions (a background job starts with SIGINT ignored,
  // and train leaves an ignored signal ignored).
  struct sigaction dfl = {}, old_int, old_term;
  dfl.sa_handler = SIG_DFL;
  sigaction(SIGINT, &dfl, &old_int);
  sigaction(SIGTERM, &dfl, &old_term);
  TempDir dir;
  TrainOptions o = small_train_options(8);
  o.out_dir = dir / "full";
  TrainResult full = run_train(o);
  for (int sig : {SIGINT, SIGTERM}) {
    SCOPED_TRACE(sig == SIGINT ? "SIGINT" : "SIGTERM");
    TrainOptions s = small_train_options(8);
    s.out_dir = dir / (sig == SIGINT ? "int" : "term");
    TrainResult stopped;
    {
      ScopedEnv hook("FLASHGPT_TEST_SIGNAL", "3:" + std::to_string(sig));  // during step 3
      stopped = run_train(s);
    }
    EXPECT_EQ(stopped.interrupted, sig);
    EXPECT_EQ(stopped.losses.size(), 3u);  // step 3 finished, then the checkpoint, then out
    EXPECT_EQ(latest_checkpoint_step(s.out_dir), 3);
    struct sigaction now;
    sigaction(sig, nullptr, &now);
    EXPECT_EQ(now.sa_handler, SIG_DFL);  // the handler is gone after the run
    s.resume = true;
    TrainResult rest = run_train(s);
    ASSERT_EQ(rest.losses.size(), 5u);
    for (int i = 0; i < 5; i++) EXPECT_EQ(rest.losses[i], full.losses[3 + i]) << "step " << 4 + i;
    EXPECT_EQ(slurp(model_checkpoint_path(s.out_dir, 8)), slurp(model_checkpoint_path(o.out_dir, 8)));
  }
  TrainOptions no_out = small_train_options(8);  // without --out: it stops all the same
  {
    ScopedEnv hook("FLASHGPT_TEST_SIGNAL", "2:" + std::to_string(SIGTERM));
    EXPECT_EQ(run_train(no_out).interrupted, SIGTERM);
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
}

// kill -9 while a checkpoint is written leaves NAME.tmp half-written (the rename never
// happens) and possibly the step's state file without its model file (the state goes first).
// Reproduced here on disk; --resume must take the previous complete pair and end exactly
// where the uninterrupted run ends.
TEST(BadInputFaults, CrashDuringCheckpointWriteThenResumeIsExact) {
  TempDir dir;
  TrainOptions o = small_train_options(8, {"--checkpoint-every", "4", "--out", dir / "full"});
  run_train(o);
  TrainOptions c = o;
  c.out_dir = dir / "crashed";
  c.steps = 8;
  run_train(c);
  const std::string model8 = model_checkpoint_path(c.out_dir, 8);
  const std::string bytes = slurp(model8);
  std::remove(model8.c_str());
  std::ofstream(model8 + ".tmp", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  ASSERT_TRUE(file_exists(state_checkpoint_path(c.out_dir, 8)));  // its state was written
  EXPECT_EQ(latest_checkpoint_step(c.out_dir), 4);
  c.resume = true;
  TrainResult r = run_train(c);
  EXPECT_EQ(r.first_step, 5);
  EXPECT_EQ(slurp(model8), slurp(model_checkpoint_path(o.out_dir, 8)));
  EXPECT_EQ(slurp(state_checkpoint_path(c.out_dir, 8)), slurp(state_checkpoint_path(o.out_dir, 8)));
  EXPECT_FALSE(file_exists(model8 + ".tmp"));  // replaced by the new write
}

TEST(BadInputFaults, FullDiskOnTmpfs) {
  SmallTmpfs fs(160 * 1024);  // room for the tokenizer and shards, not for a checkpoint pair
  if (!fs.mounted) GTEST_SKIP() << "cannot mount a tmpfs here (" << strerror(errno) << ")";
  TrainOptions o = small_train_options(2);
  o.out_dir = fs.dir / "run";
  std::string msg = expect_error([&] { run_train(o); }, "disk full");
  for (const std::string& f : checkpoint_files(o.out_dir)) ADD_FAILURE() << "left behind: " << f;
  EXPECT_FALSE(file_exists(model_checkpoint_path(o.out_dir, 2) + ".tmp"));
  EXPECT_FALSE(file_exists(state_checkpoint_path(o.out_dir, 2) + ".tmp"));
  // prepare into a full disk: the old directory stays as it was
  std::system(("rm -rf '" + fs.dir.path + "/run'").c_str());
  TempDir src;
  std::ofstream(src / "small.txt") << synthetic_corpus(200, 4);
  std::ofstream(src / "big.txt") << synthetic_corpus(6000, 5);
  prepare_into(fs.dir / "data", src / "small.txt", 280);
  const std::string tok = slurp(fs.dir / "data/tokenizer.bin");
  expect_error([&] { prepare_into(fs.dir / "data", src / "big.txt", 300); }, "disk full");
  EXPECT_EQ(slurp(fs.dir / "data/tokenizer.bin"), tok);
}

// --cp through the real binary (flashgpt beside this test binary, as the Makefile builds them):
// each bad value exits non-zero with one error line naming --cp, before any work.
TEST(BadInputExit, ContextParallelFlagsExitWithOneLine) {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  ASSERT_GT(n, 0);
  self[n] = '\0';
  std::string bin = self;
  bin = bin.substr(0, bin.rfind('/')) + "/flashgpt";
  if (access(bin.c_str(), X_OK) != 0) GTEST_SKIP() << "no " << bin << " (make builds it)";
  TempDir dir;
  const std::string world2 = "--world-size 2 --rank 0 --dist-init file://" + dir.path + "/id";
  struct Case {
    std::string args, needle;
  };
  const Case cases[] = {
      {"--cp 0 " + world2, "--cp must be at least 1 (got 0)"},
      {"--cp 3 " + world2, "--cp 3 does not divide the world size 2"},
      {"--cp 2", "--cp 2 does not divide the world size 1"},
      {"--cp 2 --device cpu " + world2, "--device cpu has none"},
      {"--cp 2 --seq-len 3 " + world2, "--seq-len 3 is shorter than 2 * --cp = 4"},
      {"--cp 2 --deterministic " + world2, "--deterministic with --cp 2"},
      // parsed fine, refused by the run before any work (this build or machine has no GPU)
      {"--cp 2 --seq-len 16 --batch 1 " + world2, "rank 0: --cp 2 splits each sequence over 2 GPUs"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    const std::string err = dir / "err.txt";
    const std::string cmd = "'" + bin + "' train --bench --quiet " + c.args + " > '" + (dir / "out.txt") +
                            "' 2> '" + err + "'";
    const int status = std::system(cmd.c_str());
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_NE(WEXITSTATUS(status), 0);
    const std::string text = slurp(err);
    EXPECT_EQ(text.rfind("flashgpt: error: ", 0), 0u) << text;
    EXPECT_NE(text.find(c.needle), std::string::npos) << text;
    EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
    EXPECT_EQ(slurp(dir / "out.txt"), "") << "no work started";
  }
}
