// test_train_gpu — the trainer end to end on the GPU (train/train.cpp driving the CUDA model):
//   TrainGpu.ResumeIsBitExact      checkpoint at step 8, resume, steps 9..16 give the same
//                                  losses bit for bit (naive attention: every GPU reduction
//                                  in its step is in a fixed order)
//   TrainGpu.FlashAndNaiveCurvesAgree  40 steps from the same seed, loss curves within bf16 noise
//   TrainGpu.FlashResumeMatches    the same resume with flash: its dQ is summed by bulk
//                                  reduce-adds in arrival order, so only near-equality is promised
// Run (GPU machine): build/test_gpu --gtest_filter='TrainGpu.*'
#include <cmath>
#include <cstdio>
#include <fstream>

#include "data/prepare.h"
#include "model/checkpoint.h"
#include "tests/cpu/test_helpers.h"
#include "tests/gpu/gpu_test.h"
#include "train/options.h"
#include "train/train.h"

namespace {

// HS = 64 (C 128, 2 heads) so that both backends run.
TrainOptions gpu_options(const std::string& attn, int steps) {
  TrainOptions o;
  Argv a({"train", "--data", test_corpus_dir(), "--model", "tiny", "--layers", "2", "--channels", "128",
          "--heads", "2", "--seq-len", "64", "--batch", "8", "--steps", std::to_string(steps),
          "--lr", "3e-3", "--warmup", "5", "--eval-every", "0", "--eval-steps", "2",
          "--sample-every", "0", "--attn", attn, "--device", "cuda", "--quiet"});
  EXPECT_TRUE(parse_train_options(a.argc(), a.argv(), o));
  return o;
}

void resume_and_compare(const std::string& attn, bool bitwise) {
  TempDir out;
  TrainOptions full = gpu_options(attn, 16);
  full.out_dir = out.path;
  full.checkpoint_every = 8;
  TrainResult a = run_train(full);
  std::remove(model_checkpoint_path(out.path, 16).c_str());
  std::remove(state_checkpoint_path(out.path, 16).c_str());
  TrainOptions resumed = full;
  resumed.resume = true;
  TrainResult b = run_train(resumed);
  ASSERT_EQ(b.first_step, 9);
  ASSERT_EQ(b.losses.size(), 8u);
  double worst = 0;
  for (int i = 0; i < 8; i++) {
    worst = std::max(worst, (double)std::fabs(a.losses[8 + i] - b.losses[i]));
    if (bitwise) EXPECT_EQ(a.losses[8 + i], b.losses[i]) << "step " << 9 + i;
  }
  std::printf("  %s: resumed steps 9..16, max |loss difference| %.3g\n", attn.c_str(), worst);
  if (!bitwise) EXPECT_LT(worst, 2e-3);
}

}  // namespace

class TrainGpu : public GpuTest {};

TEST_F(TrainGpu, ResumeIsBitExact) { resume_and_compare("naive", true); }
TEST_F(TrainGpu, FlashResumeMatches) { resume_and_compare(lse_attention(), false); }

TEST_F(TrainGpu, FlashAndNaiveCurvesAgree) {
  TrainResult naive = run_train(gpu_options("naive", 40));
  TrainResult flash = run_train(gpu_options(lse_attention(), 40));
  ASSERT_EQ(naive.losses.size(), flash.losses.size());
  double worst = 0;
  for (size_t i = 0; i < naive.losses.size(); i++)
    worst = std::max(worst, (double)std::fabs(naive.losses[i] - flash.losses[i]));
  std::printf("  first loss %.4f, last naive %.4f flash %.4f, max |difference| %.4f (tol 0.05)\n",
              naive.losses[0], naive.losses.back(), flash.losses.back(), worst);
  EXPECT_LT(flash.losses.back(), 0.6 * std::log(300.0));
  EXPECT_LT(worst, 0.05);
}
