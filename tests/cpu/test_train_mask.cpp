// test_train_mask — --mask and --window through the commands (train, --resume, --init, eval,
// sample, export) and the checkpoint that records them (model/checkpoint.h slots 12 and 13).
//
//   TrainMask.ModelFileRecordsTheMask      save/load/read_model_mask round trip; an older file
//                                          (both slots 0) is causal; a bad slot names the file
//   TrainMask.RunRecordsResumesAndEvaluates  a --mask document --window run writes its mask;
//                                          --resume keeps it and refuses another; --init takes
//                                          it unless a flag says otherwise; eval uses it;
//                                          export refuses it
//   TrainMask.StartLineReportsDocuments    the start line's document statistics and the share
//                                          of causal attention's work the mask leaves
//   TrainMask.SampleFromAWindowedModel     sample from a RoPE model with --window runs past
//                                          its trained length on the CPU (a ring KV cache)
// Run: build/test_cpu --gtest_filter='TrainMask*'
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "data/files.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/model.h"
#include "tests/cpu/test_helpers.h"
#include "train/eval.h"
#include "train/export.h"
#include "train/sample.h"

namespace {

GPTConfig small() { return GPTConfig{16, 100, 128, 2, 4, 4, 32}; }

std::string captured_run(TrainOptions o) {
  o.quiet = false;
  testing::internal::CaptureStdout();
  try {
    run_train(o);
  } catch (...) {
    testing::internal::GetCapturedStdout();
    throw;
  }
  return testing::internal::GetCapturedStdout();
}

// The eval line of `checkpoint` on the test corpus with `extra` flags.
std::string eval_line(const std::string& checkpoint, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"eval", "--checkpoint", checkpoint, "--data",
                                   test_corpus_dir(), "--batch", "2", "--seq-len", "32",
                                   "--steps", "2", "--device", "cpu"};
  args.insert(args.end(), extra.begin(), extra.end());
  EvalOptions e = parsed(parse_eval_options, args);
  std::unique_ptr<FILE, int (*)(FILE*)> out(std::tmpfile(), std::fclose);
  run_eval(e, out.get());
  std::rewind(out.get());
  char buf[4096] = {0};
  const size_t n = std::fread(buf, 1, sizeof(buf) - 1, out.get());
  return std::string(buf, n);
}

}  // namespace

TEST(TrainMask, ModelFileRecordsTheMask) {
  TempDir dir;
  const GPTConfig c = small();
  const std::vector<float> p = gpt_init_params(c, 3);
  save_model_file(dir / "doc.bin", c, p, MaskSpec{MaskKind::kDocument, 512, 7});
  const MaskSpec m = read_model_mask(dir / "doc.bin");
  EXPECT_TRUE(m.kind == MaskKind::kDocument);
  EXPECT_EQ(m.window, 512);
  EXPECT_EQ(m.eot, -1);  // not recorded: the tokenizer's
  GPTConfig back;
  std::vector<float> read;
  load_model_file(dir / "doc.bin", back, read);
  EXPECT_EQ(read, p);
  // The slots, as an llm.c reader sees the header (it ignores them).
  int h[256];
  FILE* f = std::fopen((dir / "doc.bin").c_str(), "rb");
  ASSERT_TRUE(f);
  ASSERT_EQ(std::fread(h, sizeof(int), 256, f), 256u);
  std::fclose(f);
  EXPECT_EQ(h[12], 1);
  EXPECT_EQ(h[13], 512);
  save_model_file(dir / "causal.bin", c, p);  // what older files hold: zeros
  EXPECT_TRUE(read_model_mask(dir / "causal.bin").is_causal());
  // A header whose mask slot is not a known kind is a bad file, whoever reads it.
  h[12] = 7;
  f = std::fopen((dir / "bad.bin").c_str(), "wb");
  std::fwrite(h, sizeof(int), 256, f);
  std::fwrite(p.data(), sizeof(float), p.size(), f);
  std::fclose(f);
  expect_error([&] { read_model_mask(dir / "bad.bin"); },
               "bad.bin' has an unknown attention mask (kind 7, window 512) in its header");
  expect_error([&] { load_model_file(dir / "bad.bin", back, read); }, "unknown attention mask");
}

TEST(TrainMask, RunRecordsResumesAndEvaluates) {
  TempDir out;
  TrainOptions o = small_train_options(2, {"--mask", "document", "--window", "16"});
  o.out_dir = out / "run";
  run_train(o);
  const std::string ck2 = model_checkpoint_path(out / "run", 2);
  MaskSpec m = read_model_mask(ck2);
  EXPECT_TRUE(m.kind == MaskKind::kDocument && m.window == 16);

  // --resume: the flags left out are the model's; another value is refused.
  const std::string run = out / "run";
  run_train(small_train_options(3, {"--resume", "--out", run}));
  m = read_model_mask(model_checkpoint_path(out / "run", 3));
  EXPECT_TRUE(m.kind == MaskKind::kDocument && m.window == 16);
  expect_error([&] { run_train(small_train_options(4, {"--resume", "--out", run, "--mask",
                                                       "causal"})); },
               "--resume: --mask causal differs from the checkpoint's document");
  expect_error([&] { run_train(small_train_options(4, {"--resume", "--out", run, "--window",
                                                       "8"})); },
               "--window 8 differs from the checkpoint's 16");

  // --init: the model's mask unless a flag says otherwise (here the window).
  TrainOptions i = small_train_options(1, {"--init", ck2, "--window", "4"});
  i.out_dir = out / "init";
  run_train(i);
  m = read_model_mask(model_checkpoint_path(out / "init", 1));
  EXPECT_TRUE(m.kind == MaskKind::kDocument && m.window == 4);

  // eval: the checkpoint's mask, or the flags'; they give other losses.
  const std::string own = eval_line(ck2), causal = eval_line(ck2, {"--mask", "causal",
                                                                   "--window", "0"});
  EXPECT_NE(own.find("(cpu, document, window 16 mask)"), std::string::npos) << own;
  EXPECT_NE(causal.find("(cpu, causal mask)"), std::string::npos) << causal;
  EXPECT_NE(own.substr(own.find("loss")), causal.substr(causal.find("loss")));

  // export: Hugging Face's GPT-2 has no such mask.
  ExportOptions e = parsed(parse_export_options, {"export", "--checkpoint", ck2, "--out",
                                                  out / "hf"});
  expect_error([&] { run_export(e, stdout); },
               "was trained with the mask 'document, window 16' (--mask, --window); "
               "GPT2LMHeadModel attends causally");
  EXPECT_FALSE(file_exists(out / "hf/model.safetensors"));
}

TEST(TrainMask, StartLineReportsDocuments) {
  const std::string doc = captured_run(small_train_options(1, {"--mask", "document"}));
  EXPECT_NE(doc.find("attention: flash, document mask"), std::string::npos) << doc;
  EXPECT_NE(doc.find("documents: "), std::string::npos) << doc;
  EXPECT_NE(doc.find("tokens per document: mean "), std::string::npos) << doc;
  EXPECT_NE(doc.find("the document mask leaves "), std::string::npos) << doc;
  EXPECT_NE(doc.find("% of causal attention's work at T 32"), std::string::npos) << doc;
  const std::string win = captured_run(small_train_options(1, {"--window", "8"}));
  // T 32, W 8: (8*9/2 + 24*8) / (32*33/2) = 228 / 528
  EXPECT_NE(win.find("--window 8 leaves 43.2% of causal attention's work at T 32"),
            std::string::npos) << win;
  const std::string causal = captured_run(small_train_options(1));
  EXPECT_NE(causal.find("documents: "), std::string::npos) << causal;
  EXPECT_EQ(causal.find("leaves"), std::string::npos) << causal;
}

TEST(TrainMask, SampleFromAWindowedModel) {
  TempDir out;
  TrainOptions o = small_train_options(1, {"--pos", "rope", "--window", "8", "--mask",
                                           "document"});
  o.out_dir = out / "run";
  run_train(o);
  SampleOptions s = parsed(parse_sample_options,
                           {"sample", "--checkpoint", model_checkpoint_path(out / "run", 1),
                            "--tokens", "100", "--temperature", "0", "--device", "cpu"});
  std::unique_ptr<FILE, int (*)(FILE*)> text(std::tmpfile(), std::fclose);
  EXPECT_EQ(run_sample(s, text.get()), 0);  // 100 tokens past the 32 trained positions
  EXPECT_GT(std::ftell(text.get()), 0);
  // Without the cache (recompute over --context) too.
  s.kv_cache = false;
  EXPECT_EQ(run_sample(s, text.get()), 0);
}
