// End-to-end on the CPU: prepare a small corpus, train a tiny model with both attention
// backends (loss falls well below ln(V), the two curves match), resume bit-exactly, sample.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <algorithm>
#include <fstream>
#include <list>
#include <memory>

#include "data/prepare.h"
#include "data/tokenizer.h"
#include "model/checkpoint.h"
#include "kernels/rng.h"
#include "tests/cpu/test_helpers.h"
#include "train/options.h"
#include "train/sample.h"
#include "train/train.h"

namespace {

// `train` on the test corpus, on the CPU and quiet, with `flags`.
TrainOptions train_options(std::vector<std::string> flags) {
  flags.insert(flags.begin(), {"train", "--data", test_corpus_dir(), "--device", "cpu", "--quiet"});
  Argv a(flags);
  TrainOptions o;
  EXPECT_TRUE(parse_train_options(a.argc(), a.argv(), o));
  return o;
}

TrainOptions tiny_options(const std::string& attn, int steps) {
  return train_options({"--model", "tiny", "--layers", "2", "--channels", "64", "--heads", "4",
                        "--seq-len", "32", "--batch", "4", "--steps", std::to_string(steps),
                        "--lr", "3e-3", "--warmup", "5", "--eval-every", "0", "--eval-steps",
                        "4", "--sample-every", "0", "--attn", attn});
}

}  // namespace

TEST(Train, LossFallsWellBelowLnVInBothModesAndCurvesMatch) {
  TrainResult naive = run_train(tiny_options("naive", 80));
  TrainResult flash = run_train(tiny_options("flash", 80));
  ASSERT_EQ(naive.losses.size(), 80u);
  ASSERT_EQ(flash.losses.size(), 80u);
  const double lnV = std::log(300.0);
  auto tail = [](const std::vector<float>& l) {
    double s = 0;
    for (size_t i = l.size() - 5; i < l.size(); i++) s += l[i];
    return s / 5;
  };
  std::printf("  ln(V) = %.3f, first loss %.3f, last-5 mean: naive %.4f flash %.4f, val %.4f / %.4f\n",
              lnV, naive.losses[0], tail(naive.losses), tail(flash.losses), naive.val_losses.back(),
              flash.val_losses.back());
  EXPECT_NEAR(naive.losses[0], lnV, 0.5);  // starts near uniform
  EXPECT_LT(tail(naive.losses), 0.5 * lnV);
  EXPECT_LT(tail(flash.losses), 0.5 * lnV);
  EXPECT_LT(naive.val_losses.back(), 0.6 * lnV);
  double worst = 0;
  for (size_t i = 0; i < naive.losses.size(); i++)
    worst = std::max(worst, (double)std::fabs(naive.losses[i] - flash.losses[i]));
  std::printf("  naive vs flash: max |loss difference| over 80 steps %.2e (tolerance 2e-3)\n", worst);
  EXPECT_LT(worst, 2e-3);
}

TEST(Train, ResumeIsBitExact) {
  TempDir out;
  TrainOptions full = tiny_options("flash", 16);
  full.out_dir = out.path;
  full.checkpoint_every = 8;
  TrainResult a = run_train(full);
  ASSERT_EQ(latest_checkpoint_step(out.path), 16);
  // Forget the final checkpoint, then resume from step 8.
  std::remove(model_checkpoint_path(out.path, 16).c_str());
  std::remove(state_checkpoint_path(out.path, 16).c_str());
  TrainOptions resumed = full;
  resumed.resume = true;
  TrainResult b = run_train(resumed);
  ASSERT_EQ(b.first_step, 9);
  ASSERT_EQ(b.losses.size(), 8u);
  for (int i = 0; i < 8; i++) EXPECT_EQ(a.losses[8 + i], b.losses[i]) << "step " << 9 + i;
  // and the final parameters are identical
  GPTConfig c1, c2;
  std::vector<float> p1, p2;
  TempDir again;
  TrainOptions full2 = full;
  full2.out_dir = again.path;
  run_train(full2);
  load_model_file(model_checkpoint_path(again.path, 16), c1, p1);
  load_model_file(model_checkpoint_path(out.path, 16), c2, p2);
  EXPECT_EQ(p1, p2);
  // the tokenizer is copied beside the model so `flashgpt sample` finds it
  Tokenizer t = Tokenizer::load(out / "tokenizer.bin");
  EXPECT_EQ(t.vocab_size(), 300);
}

TEST(Train, SampleFromCheckpointIsDeterministic) {
  TempDir out;
  TrainOptions o = tiny_options("flash", 4);
  o.out_dir = out.path;
  run_train(o);
  Argv args({"sample", "--checkpoint", model_checkpoint_path(out.path, 4), "--tokens", "5",
             "--prompt", "the cat", "--device", "cpu"});
  SampleOptions s;
  ASSERT_TRUE(parse_sample_options(args.argc(), args.argv(), s));
  EXPECT_EQ(run_sample(s), 0);
  // generate() itself: same seed, same tokens; different seed, (almost surely) different.
  ModelOptions mo;
  GPTConfig cfg;
  std::vector<float> params;
  load_model_file(s.checkpoint, cfg, params);
  mo.config = cfg;
  mo.B = 1;
  mo.T = cfg.max_seq_len;
  std::unique_ptr<Model> m = make_cpu_model(mo);
  m->set_params(params);
  auto g1 = generate(*m, {299}, 20, 1.0f, 0, 1, cfg.max_seq_len);
  auto g2 = generate(*m, {299}, 20, 1.0f, 0, 1, cfg.max_seq_len);
  auto g3 = generate(*m, {299}, 20, 1.0f, 0, 2, cfg.max_seq_len);
  EXPECT_EQ(g1, g2);
  EXPECT_NE(g1, g3);
  for (int t : g1) EXPECT_LT(t, 300);
  s.kv_cache = false;  // the full-recompute path of the command too
  EXPECT_EQ(run_sample(s), 0);
}

namespace {
// run_sample into a temporary file; returns what it wrote.
std::string sample_text(const SampleOptions& s) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::tmpfile(), std::fclose);
  EXPECT_EQ(run_sample(s, f.get()), 0);
  std::string text;
  std::rewind(f.get());
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f.get())) > 0) text.append(buf, n);
  return text;
}
}  // namespace

// What the quick start does: a sample longer than the window, a prompt longer than the window,
// a 1-token prompt, on learned positions and RoPE, with and without the KV cache.
TEST(Train, SamplePastTheWindowFromCheckpoint) {
  for (PosEncoding pos : {PosEncoding::learned, PosEncoding::rope}) {
    TempDir out;
    TrainOptions o = tiny_options("flash", 2);  // --seq-len 32: a 32-token window
    o.pos = pos;
    o.out_dir = out.path;
    run_train(o);
    std::string long_prompt;
    for (int i = 0; i < 12; i++) long_prompt += "the cat sees the ball. ";  // > 32 tokens
    for (bool kv : {true, false}) {
      for (const std::string& prompt : {std::string(), std::string("the"), long_prompt}) {
        if (!kv && prompt != long_prompt) continue;  // (recompute: one case keeps the test fast)
        SCOPED_TRACE(std::string(pos_name(pos)) + (kv ? " kv" : " no-kv") + " prompt '" + prompt +
                     "'");
        SampleOptions s;
        s.checkpoint = model_checkpoint_path(out.path, 2);
        s.prompt = prompt;
        s.tokens = 3 * 32;
        s.device = "cpu";
        s.kv_cache = kv;
        std::string text = sample_text(s);
        ASSERT_GT(text.size(), prompt.size() + 1);
        EXPECT_EQ(text.compare(0, prompt.size(), prompt), 0);
        EXPECT_EQ(text.back(), '\n');
      }
    }
    SampleOptions s;  // an explicit backend and a smaller window
    s.checkpoint = model_checkpoint_path(out.path, 2);
    s.tokens = 40;
    s.device = "cpu";
    s.attn = "naive";
    s.context = 8;
    EXPECT_GT(sample_text(s).size(), 1u);
    s.context = 33;  // past the learned positions: refused; RoPE looks further
    if (pos == PosEncoding::learned) expect_error([&] { sample_text(s); }, "--context 33");
    else EXPECT_GT(sample_text(s).size(), 1u);
  }
}

TEST(Train, RopeModelTrainsResumesAndSamples) {
  TempDir out;
  TrainOptions o = tiny_options("flash", 4);
  o.pos = PosEncoding::rope;
  o.recompute = Recompute::kLayer;  // the CPU model recomputes each block in the backward too
  o.out_dir = out.path;
  o.checkpoint_every = 2;
  TrainResult r = run_train(o);
  ASSERT_EQ(r.losses.size(), 4u);
  EXPECT_LT(r.losses.back(), r.losses.front());
  GPTConfig cfg = read_model_config(model_checkpoint_path(out.path, 4));
  EXPECT_EQ(cfg.rope, 1);
  SampleOptions s;
  s.checkpoint = model_checkpoint_path(out.path, 4);
  s.tokens = 50;  // longer than the tiny model's max_seq_len: RoPE has no position table
  s.device = "cpu";
  EXPECT_EQ(run_sample(s), 0);
  // Resuming with --pos learned is refused with a line naming --pos.
  TrainOptions bad = o;
  bad.pos = PosEncoding::learned;
  bad.resume = true;
  bad.steps = 6;
  expect_error([&] { run_train(bad); }, "--pos");
}

TEST(Train, LearningRateSchedule) {
  TrainOptions o;
  o.lr = 1e-3f;
  o.warmup = 10;
  o.steps = 110;
  o.lr_final_frac = 0.1f;
  EXPECT_FLOAT_EQ(lr_at_step(o, 1), 1e-4f);
  EXPECT_FLOAT_EQ(lr_at_step(o, 10), 1e-3f);
  EXPECT_NEAR(lr_at_step(o, 60), 0.55e-3f, 1e-9);  // half way down the cosine
  EXPECT_FLOAT_EQ(lr_at_step(o, 110), 1e-4f);
  for (int s = 11; s < 110; s++) EXPECT_LE(lr_at_step(o, s + 1), lr_at_step(o, s));
}

// ---- bad input: one clear error naming the flag or file, nothing written ----

TEST(BadInput, TrainOptions) {
  auto parse = [](std::vector<std::string> extra) {
    std::vector<std::string> args = {"train", "--data", "/tmp"};
    args.insert(args.end(), extra.begin(), extra.end());
    Argv a(args);
    TrainOptions o;
    parse_train_options(a.argc(), a.argv(), o);
  };
  expect_error([&] { parse({"--attn", "fast"}); }, "--attn 'fast'");
  expect_error([&] { parse({"--device", "tpu"}); }, "--device 'tpu'");
  expect_error([&] { parse({"--batch", "0"}); }, "--batch");
  expect_error([&] { parse({"--seq-len", "-3"}); }, "--seq-len");
  expect_error([&] { parse({"--batch", "3", "--seq-len", "10", "--total-batch", "100"}); },
               "--total-batch 100 is not a multiple");
  expect_error([&] { parse({"--lr", "2"}); }, "--lr");
  expect_error([&] { parse({"--batch", "abc"}); }, "'abc' is not a valid value for --batch");
  expect_error([&] { parse({"--lr=fast"}); }, "'fast' is not a valid value for --lr");
  expect_error([&] { parse({"--no-such-flag"}); }, "no-such-flag");
  expect_error([&] { parse({"--resume"}); }, "--resume needs --out");
  expect_error([&] { parse({"--grad-clip", "-1"}); }, "--grad-clip");
  expect_error([&] { parse({"--pos", "alibi"}); }, "--pos 'alibi'");
  expect_error([&] { parse({"--recompute", "all"}); }, "--recompute 'all'");
  expect_error([&] { parse({"--classifier-chunk", "-1"}); }, "--classifier-chunk");
  expect_error([&] { parse({"--rope-theta", "0.5"}); }, "--rope-theta");
  Argv nodata({"train"});
  TrainOptions o;
  expect_error([&] { parse_train_options(nodata.argc(), nodata.argv(), o); }, "--data");
}

TEST(BadInput, TrainRun) {
  TrainOptions o = tiny_options("flash", 2);
  TrainOptions bad = o;
  bad.model = "d13";
  expect_error([&] { run_train(bad); }, "--model 'd13'");
  bad = o;
  bad.data_dir = "/nonexistent/data";
  expect_error([&] { run_train(bad); }, "/nonexistent/data");
  bad = o;
  bad.out_dir = "/proc/flashgpt_cannot_write";
  expect_error([&] { run_train(bad); }, "--out");
  bad = o;
  bad.heads = 5;  // 64 channels not divisible
  expect_error([&] { run_train(bad); }, "--heads 5");
  bad = o;
  bad.seq_len = 64;
  bad.max_seq_len = 32;
  expect_error([&] { run_train(bad); }, "--seq-len 64");
  bad = o;
  bad.batch = 5000;  // more windows than the shard holds
  expect_error([&] { run_train(bad); }, "--batch");
  // a model file whose shape disagrees with the flags
  TempDir out;
  TrainOptions good = o;
  good.out_dir = out.path;
  run_train(good);
  bad = o;
  bad.init_path = model_checkpoint_path(out.path, 2);
  bad.channels = 128;
  bad.model_given = true;
  expect_error([&] { run_train(bad); }, "checkpoint");
  bad = o;
  bad.init_path = model_checkpoint_path(out.path, 2);
  bad.seq_len = 64;
  expect_error([&] { run_train(bad); }, "--seq-len 64");
  // a tokenizer of another vocabulary than the shards' ids
  bad = o;
  bad.tokenizer_path = "";
  bad.data_dir = "";
  bad.train_pattern = test_corpus_dir() + "/train_*.bin";
  bad.vocab_size = 100;  // the corpus uses ids up to 299
  expect_error([&] { run_train(bad); }, "train_000000.bin");
  // resume without any checkpoint
  TempDir empty;
  bad = o;
  bad.out_dir = empty.path;
  bad.resume = true;
  expect_error([&] { run_train(bad); }, "no checkpoint");
  // resume with another batch size than the checkpoint's
  bad = good;
  bad.resume = true;
  bad.steps = 4;
  bad.batch = 2;
  bad.total_batch = 64;
  expect_error([&] { run_train(bad); }, "--batch 2 differs from the checkpoint's 4");
}

TEST(BadInput, SampleOptions) {
  Argv a({"sample"});
  SampleOptions s;
  expect_error([&] { parse_sample_options(a.argc(), a.argv(), s); }, "--checkpoint");
  Argv b({"sample", "--checkpoint", "x.bin", "--temperature", "-1"});
  expect_error([&] { parse_sample_options(b.argc(), b.argv(), s); }, "--temperature");
  SampleOptions missing;
  missing.checkpoint = "/nonexistent/model.bin";
  expect_error([&] { run_sample(missing); }, "/nonexistent/model.bin");
}

TEST(BadInput, PrepareOptions) {
  Argv a({"prepare", "--out", "/tmp/x"});
  PrepareOptions p;
  expect_error([&] { parse_prepare_options(a.argc(), a.argv(), p); }, "--input");
  Argv b({"prepare", "--input", "a.txt", "b.txt", "c.txt", "--out", "/tmp/x"});
  PrepareOptions q;
  ASSERT_TRUE(parse_prepare_options(b.argc(), b.argv(), q));
  EXPECT_EQ(q.inputs.size(), 3u);
}

// llm.c's recipe (docs/usage.md): its shards with its tokenizer file (llm.c's format: 256 x uint32
// header [20240328, 2, V, eot], then per token one length byte and the bytes; what llm.c's
// train_gpt2.py write_tokenizer() writes and llmc/tokenizer.h reads) and --out. The file is
// copied beside the checkpoints byte for byte; sample and --resume use it there.
TEST(Train, LlmcTokenizerWithOut) {
  TempDir dir;
  const Tokenizer ours = Tokenizer::load(test_corpus_dir() + "/tokenizer.bin");
  std::vector<uint32_t> header(256, 0);
  header[0] = 20240328, header[1] = 2, header[2] = (uint32_t)ours.vocab_size();
  header[3] = (uint32_t)ours.eot_token();
  std::string bytes((const char*)header.data(), 1024);
  for (int t = 0; t < ours.vocab_size(); t++) {
    const std::string b = ours.decode_token(t);
    ASSERT_TRUE(b.size() >= 1 && b.size() <= 255);
    bytes += (char)(unsigned char)b.size() + b;
  }
  const std::string llmc = dir / "gpt2_tokenizer.bin";
  std::ofstream(llmc, std::ios::binary) << bytes;
  ASSERT_FALSE(Tokenizer::load(llmc).can_encode());  // decode only, as llm.c's

  TrainOptions o = tiny_options("flash", 4);
  o.data_dir = "";
  o.train_pattern = test_corpus_dir() + "/train_*.bin";
  o.val_pattern = test_corpus_dir() + "/val_*.bin";
  o.tokenizer_path = llmc;
  o.out_dir = dir / "run";
  o.checkpoint_every = 2;
  TrainResult a = run_train(o);
  ASSERT_EQ(a.losses.size(), 4u);
  std::ifstream copy(dir / "run/tokenizer.bin", std::ios::binary);
  std::string copied((std::istreambuf_iterator<char>(copy)), std::istreambuf_iterator<char>());
  EXPECT_EQ(copied, bytes);  // the file as it is, not re-encoded
  SampleOptions s;  // finds the llm.c tokenizer beside the model (no --prompt: decode only)
  s.checkpoint = model_checkpoint_path(o.out_dir, 4);
  s.tokens = 8;
  s.device = "cpu";
  EXPECT_GT(sample_text(s).size(), 1u);
  // resume from step 2 with the same tokenizer: the same losses as the uninterrupted run
  std::remove(model_checkpoint_path(o.out_dir, 4).c_str());
  std::remove(state_checkpoint_path(o.out_dir, 4).c_str());
  TrainOptions r = o;
  r.resume = true;
  TrainResult b = run_train(r);
  ASSERT_EQ(b.losses.size(), 2u);
  EXPECT_EQ(b.losses[0], a.losses[2]);
  EXPECT_EQ(b.losses[1], a.losses[3]);
}

// ---- --resume takes the run's settings from its checkpoint (train/resume.h) ----
// One run, with every setting --resume takes off its default, is continued from its step-4
// checkpoint by each case: a flag left out must continue the run exactly (the checkpoint's
// value), a flag given with another value must be refused naming it, and the flags that may
// change (--steps, --attn) must change only what they say.
class Resume : public ::testing::Test {
 protected:
  // The run's flags, each followed by its value ("" for a switch).
  using Flags = std::vector<std::pair<std::string, std::string>>;
  static Flags run_flags() {
    return {{"--layers", "2"}, {"--channels", "64"}, {"--heads", "4"}, {"--seq-len", "16"},
            {"--batch", "2"}, {"--total-batch", "64"}, {"--lr", "2e-3"}, {"--warmup", "3"},
            {"--lr-final-frac", "0.2"}, {"--weight-decay", "0.05"}, {"--grad-clip", "0.5"},
            {"--seed", "7"}, {"--attn", "naive"}, {"--no-shuffle", ""}, {"--steps", "8"}};
  }
  static Flags without(const std::string& flag) {
    Flags f = run_flags();
    f.erase(std::remove_if(f.begin(), f.end(), [&](const auto& kv) { return kv.first == flag; }),
            f.end());
    return f;
  }
  static Flags changed(const std::string& flag, const std::string& value) {
    Flags f = without(flag);
    f.push_back({flag, value});
    return f;
  }
  static TrainOptions parse(const std::string& out, const Flags& flags, bool resume) {
    std::vector<std::string> args = {"--out", out, "--eval-every", "0", "--sample-every", "0"};
    if (resume) args.push_back("--resume");
    for (const auto& [flag, value] : flags) {
      args.push_back(flag);
      if (!value.empty()) args.push_back(value);
    }
    return train_options(args);
  }
  static void SetUpTestSuite() {
    run_ = new TempDir;
    TrainOptions o = parse(run_->path, run_flags(), false);
    o.checkpoint_every = 4;
    full_ = run_train(o);
    ASSERT_EQ(full_.losses.size(), 8u);
  }
  static void TearDownTestSuite() { delete run_; }

  // A fresh --out holding a copy of the run's step-4 checkpoint (and its tokenizer).
  const std::string& checkpoint_copy() {
    const std::string& out = outs_.emplace_back().path;
    for (const std::string& f : {model_checkpoint_path(run_->path, 4),
                                 state_checkpoint_path(run_->path, 4), *run_ / "tokenizer.bin"})
      EXPECT_EQ(std::system(("cp '" + f + "' '" + out + "/'").c_str()), 0);
    return out;
  }
  // The step-4 checkpoint resumed with `flags` only.
  TrainResult resume(const Flags& flags) { return run_train(parse(checkpoint_copy(), flags, true)); }
  // Its stdout when resumed with `flags` (not --quiet).
  std::string resume_printed(const Flags& flags, const std::string& out, TrainResult* r = nullptr) {
    TrainOptions o = parse(out, flags, true);
    o.quiet = false;
    testing::internal::CaptureStdout();
    try {
      const TrainResult result = run_train(o);
      if (r) *r = result;
    } catch (...) {
      testing::internal::GetCapturedStdout();  // one capture at a time: end this one
      throw;
    }
    return testing::internal::GetCapturedStdout();
  }
  // Steps 5.. of the resumed run are the run's own, to the bit.
  static void expect_continues(const TrainResult& r, size_t steps) {
    ASSERT_EQ(r.first_step, 5);
    ASSERT_EQ(r.losses.size(), steps);
    for (size_t i = 0; i < steps; i++) EXPECT_EQ(r.losses[i], full_.losses[4 + i]) << "step " << 5 + i;
  }
  // Left out, the flag takes the checkpoint's value; given another value, it is refused.
  void expect_taken_and_kept(const std::string& flag, const std::string& other,
                             const std::string& refusal) {
    SCOPED_TRACE(flag);
    expect_continues(resume(without(flag)), 4);
    const std::string msg = expect_error([&] { resume(changed(flag, other)); }, refusal);
    EXPECT_NE(msg.find("drop " + flag), std::string::npos) << msg;
  }

  static TempDir* run_;
  static TrainResult full_;
  std::list<TempDir> outs_;
};
TempDir* Resume::run_ = nullptr;
TrainResult Resume::full_;

// The README's line: --data, --out, --steps and --resume only.
TEST_F(Resume, WithOnlyDataOutAndStepsContinuesTheRunExactly) {
  expect_continues(resume({{"--steps", "8"}}), 4);
}

// Each setting --resume keeps, with another value and the checkpoint's as --resume shows them.
struct KeptSetting {
  const char* flag;
  const char* other;
  const char* saved;
};
class ResumeKeeps : public Resume, public ::testing::WithParamInterface<KeptSetting> {};
TEST_P(ResumeKeeps, TakenWhenLeftOutRefusedWhenChanged) {
  const KeptSetting k = GetParam();
  expect_taken_and_kept(k.flag, k.other,
                        std::string(k.flag) + " " + k.other + " differs from the checkpoint's " + k.saved);
}
INSTANTIATE_TEST_SUITE_P(
    Flags, ResumeKeeps,
    ::testing::Values(KeptSetting{"--lr", "0.001", "0.002"}, KeptSetting{"--warmup", "4", "3"},
                      KeptSetting{"--lr-final-frac", "0.1", "0.2"},
                      KeptSetting{"--weight-decay", "0.1", "0.05"}, KeptSetting{"--grad-clip", "1", "0.5"},
                      KeptSetting{"--seq-len", "8", "16"}, KeptSetting{"--batch", "1", "2"},
                      KeptSetting{"--total-batch", "32", "64"}, KeptSetting{"--seed", "8", "7"}),
    [](const ::testing::TestParamInfo<KeptSetting>& i) {
      std::string name = i.param.flag + 2;
      std::replace(name.begin(), name.end(), '-', '_');
      return name;
    });

TEST_F(Resume, DataOrderIsTheCheckpoints) {
  expect_continues(resume(without("--no-shuffle")), 4);  // in order, as the run was
}

// --attn left out is the checkpoint's (naive here, not auto's flash); another backend is
// allowed, and changes the losses by rounding only.
TEST_F(Resume, AttnIsTheCheckpointsUnlessGiven) {
  TrainResult same, flash;
  const std::string printed = resume_printed(without("--attn"), checkpoint_copy(), &same);
  EXPECT_NE(printed.find("attention: naive"), std::string::npos) << printed;
  expect_continues(same, 4);
  const std::string other = resume_printed(changed("--attn", "flash"), checkpoint_copy(), &flash);
  EXPECT_NE(other.find("attention: flash"), std::string::npos) << other;
  EXPECT_NE(other.find("--attn flash (given; the checkpoint's: naive)"), std::string::npos) << other;
  ASSERT_EQ(flash.losses.size(), 4u);
  for (size_t i = 0; i < 4; i++) EXPECT_NEAR(flash.losses[i], full_.losses[4 + i], 2e-3);
}

// --steps is where the run stops: left out, where the checkpoint's run was to; shorter or
// longer, the schedule stays the run's (its cosine ends at step 8), and steps past it run at
// the final lr, 2e-3 x 0.2.
TEST_F(Resume, StepsMoveTheEndButNotTheSchedule) {
  expect_continues(resume(without("--steps")), 4);
  expect_continues(resume(changed("--steps", "6")), 2);
  TempDir log;
  Flags longer = changed("--steps", "12");
  longer.push_back({"--log", log / "log.jsonl"});
  const TrainResult r = resume(longer);
  ASSERT_EQ(r.losses.size(), 8u);
  for (size_t i = 0; i < 4; i++) EXPECT_EQ(r.losses[i], full_.losses[4 + i]) << "step " << 5 + i;
  std::ifstream in(log / "log.jsonl");
  int past = 0;
  for (std::string line; std::getline(in, line);) {
    const int step = std::atoi(line.c_str() + line.find(':') + 1);
    const double lr = std::atof(line.c_str() + line.find("\"lr\": ") + 6);
    if (step > 8) {
      EXPECT_FLOAT_EQ(lr, 4e-4f) << line;
      past++;
    }
  }
  EXPECT_EQ(past, 4);
}

// The model's own flags: left out they are the model file's; given otherwise, refused.
TEST_F(Resume, ModelFlagsMustBeTheModels) {
  expect_error([&] { resume(changed("--channels", "128")); }, "--channels");
  expect_error([&] { resume(changed("--max-seq-len", "32")); },
               "--max-seq-len 32 differs from the model's 16");
}

// One line says what the run continues with.
TEST_F(Resume, SaysWhatItTakesInOneLine) {
  const std::string printed = resume_printed({{"--steps", "10"}}, checkpoint_copy());
  const size_t at = printed.find("resume: ");
  ASSERT_NE(at, std::string::npos) << printed;
  const std::string line = printed.substr(at, printed.find('\n', at) - at);
  EXPECT_EQ(printed.find("resume: ", at + 1), std::string::npos);
  for (const char* s : {"step 4 of ", "to step 10", "--seq-len 16", "--batch 2", "--total-batch 64",
                        "--seed 7", "--no-shuffle", "--lr 0.002", "--warmup 3", "--lr-final-frac 0.2",
                        "--weight-decay 0.05", "--grad-clip 0.5", "--attn naive",
                        "the cosine ends at step 8, steps 9-10 run at lr 0.0004"})
    EXPECT_NE(line.find(s), std::string::npos) << s << " in: " << line;
}

// A checkpoint written before the schedule was recorded (state header slots 15..25 zero)
// resumes with the flags' schedule, and the line says so.
TEST_F(Resume, CheckpointWithoutScheduleUsesTheFlagsAndSaysSo) {
  const std::string& out = checkpoint_copy();
  FILE* f = fopen(state_checkpoint_path(out, 4).c_str(), "r+b");
  ASSERT_TRUE(f);
  const std::vector<int64_t> zeros(11, 0);
  fseek(f, 15 * sizeof(int64_t), SEEK_SET);
  ASSERT_EQ(fwrite(zeros.data(), sizeof(int64_t), zeros.size(), f), zeros.size());
  fclose(f);
  TrainResult r;
  const std::string printed = resume_printed(run_flags(), out, &r);
  EXPECT_NE(printed.find("the checkpoint records no schedule: the flags' --lr 0.002"),
            std::string::npos) << printed;
  expect_continues(r, 4);
}

// Optimizer state that is not finite is a corrupt file: named, not reported as a divergence.
TEST_F(Resume, NonFiniteOptimizerStateNamesTheFile) {
  for (const float bad : {NAN, INFINITY, -1.0f}) {  // m, m, and a negative second moment v
    const std::string& out = checkpoint_copy();
    const std::string state = state_checkpoint_path(out, 4);
    FILE* f = fopen(state.c_str(), "r+b");
    ASSERT_TRUE(f);
    // m starts after the 64 x int64 header, v after m (as many floats as the model's parameters).
    long offset = 64 * sizeof(int64_t) + 5 * sizeof(float);
    if (bad < 0) {
      fseek(f, 0, SEEK_END);
      offset = ftell(f) - 3 * (long)sizeof(float);  // near the end of v
    }
    fseek(f, offset, SEEK_SET);
    ASSERT_EQ(fwrite(&bad, sizeof bad, 1, f), 1u);
    fclose(f);
    SCOPED_TRACE(bad);
    const std::string msg = expect_error([&] { run_train(parse(out, run_flags(), true)); }, state);
    EXPECT_NE(msg.find("optimizer state"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("diverged"), std::string::npos) << msg;
  }
}
