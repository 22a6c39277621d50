// Checkpoint files: llm.c-format model round trip (v3), reading llm.c bf16 (v5), our state
// file, atomic writes, and the clear errors for bad files.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>

#include "model/checkpoint.h"
#include "model/config.h"
#include "model/layout.h"
#include "model/model.h"
#include "tests/cpu/test_helpers.h"

namespace {
// maxT 16, V 100 (padded 128), L 2, NH = NKV 4, C 32 (GPTConfig's field order).
GPTConfig small() { return GPTConfig{16, 100, 128, 2, 4, 4, 32}; }

// c's model, with parameters from `seed`, written and read back: the config read; the
// parameters must come back exactly.
GPTConfig round_trip(const GPTConfig& c, uint64_t seed) {
  TempDir dir;
  const std::vector<float> p = gpt_init_params(c, seed);
  save_model_file(dir / "m.bin", c, p);
  GPTConfig back;
  std::vector<float> read;
  load_model_file(dir / "m.bin", back, read);
  EXPECT_EQ(read, p);
  return back;
}

// A state with every header field set to a value of its own.
TrainState full_state() {
  TrainState s;
  int64_t next = 1;
  for (int64_t* f : {&s.step, &s.loader_epoch, &s.loader_shard, &s.loader_window, &s.B, &s.T,
                     &s.total_batch, &s.seed, &s.world_size, &s.zero, &s.data_order, &s.cp,
                     &s.steps, &s.schedule_steps, &s.warmup})
    *f = 10 * next++;
  s.lr = 3e-4, s.lr_final_frac = 0.15, s.weight_decay = 0.01, s.grad_clip = 0.75;
  s.attn = "flash3";
  s.m = {1, 2, 3};
  s.v = {4, 5, 6};
  return s;
}
}  // namespace

TEST(Checkpoint, ModelRoundTripIsExactAndLlmcLayout) {
  TempDir dir;
  GPTConfig c = small();
  std::vector<float> p = gpt_init_params(c, 5);
  save_model_file(dir / "m.bin", c, p);
  GPTConfig c2;
  std::vector<float> p2;
  load_model_file(dir / "m.bin", c2, p2);
  EXPECT_EQ(p, p2);
  EXPECT_EQ(c2.num_layers, 2);
  EXPECT_EQ(c2.padded_vocab_size, 128);
  EXPECT_EQ(c2.num_kv_heads, 4);
  // llm.c header fields at their llm.c positions
  FILE* f = fopen((dir / "m.bin").c_str(), "rb");
  int h[256];
  ASSERT_EQ(fread(h, 4, 256, f), 256u);
  fclose(f);
  EXPECT_EQ(h[0], 20240326);
  EXPECT_EQ(h[1], 3);
  EXPECT_EQ(h[2], 16);
  EXPECT_EQ(h[3], 100);
  EXPECT_EQ(h[4], 2);
  EXPECT_EQ(h[5], 4);
  EXPECT_EQ(h[6], 32);
  EXPECT_EQ(h[7], 128);
  EXPECT_EQ(h[8], 0);  // plain multi-head attention: what llm.c expects
}

TEST(Checkpoint, GroupedQueryRoundTrip) {
  GPTConfig c = small();
  c.num_kv_heads = 2;
  EXPECT_EQ(round_trip(c, 5).num_kv_heads, 2);
}

TEST(Checkpoint, RopeRoundTrip) {
  GPTConfig c = small();
  c.rope = 1;
  c.rope_theta = 500000.0f;
  const GPTConfig back = round_trip(c, 6);  // no wpe rows
  EXPECT_EQ(back.rope, 1);
  EXPECT_EQ(back.rope_theta, 500000.0f);
  EXPECT_EQ(ParamLayout(back).sizes[P_WPE], 0u);
}

TEST(Checkpoint, ReadsLlmcBf16Version5) {
  TempDir dir;
  GPTConfig c = small();
  ParamLayout lay(c);
  int h[256] = {20240326, 5, c.max_seq_len, c.vocab_size, c.num_layers, c.num_heads, c.channels,
                c.padded_vocab_size};
  std::vector<uint16_t> raw(lay.total);
  std::vector<float> want(lay.total);
  for (size_t i = 0; i < lay.total; i++) {
    float x = (float)((int)(i % 200) - 100) / 64.0f;  // exactly representable in bf16
    uint32_t u;
    memcpy(&u, &x, 4);
    raw[i] = (uint16_t)(u >> 16);
    want[i] = x;
  }
  FILE* f = fopen((dir / "v5.bin").c_str(), "wb");
  fwrite(h, 4, 256, f);
  fwrite(raw.data(), 2, raw.size(), f);
  fclose(f);
  GPTConfig read;
  std::vector<float> p;
  load_model_file(dir / "v5.bin", read, p);
  EXPECT_EQ(read.num_layers, c.num_layers);
  EXPECT_EQ(p, want);
}

TEST(Checkpoint, BadFilesGiveClearErrors) {
  TempDir dir;
  GPTConfig c2;
  std::vector<float> p;
  expect_error([&] { load_model_file(dir / "missing.bin", c2, p); }, "missing.bin");
  FILE* f = fopen((dir / "garbage.bin").c_str(), "wb");
  int h[256] = {12345};
  fwrite(h, 4, 256, f);
  fclose(f);
  expect_error([&] { load_model_file(dir / "garbage.bin", c2, p); }, "not a model checkpoint");
  // truncated: a real file cut short
  GPTConfig c = small();
  save_model_file(dir / "m.bin", c, gpt_init_params(c, 1));
  std::system(("truncate -s 5000 '" + (dir / "m.bin") + "'").c_str());
  expect_error([&] { load_model_file(dir / "m.bin", c2, p); }, "truncated");
}

TEST(Checkpoint, StateRoundTripAndLatest) {
  TempDir dir;
  TrainState s = full_state();
  s.step = 30;
  save_state_file(state_checkpoint_path(dir.path, 30), s);
  EXPECT_EQ(latest_checkpoint_step(dir.path), -1);  // the model file is missing
  GPTConfig c = small();
  save_model_file(model_checkpoint_path(dir.path, 30), c, gpt_init_params(c, 1));
  save_model_file(model_checkpoint_path(dir.path, 40), c, gpt_init_params(c, 1));  // no state
  // a leftover temporary file does not count
  std::system(("touch '" + model_checkpoint_path(dir.path, 50) + ".tmp' '" +
               state_checkpoint_path(dir.path, 50) + "'").c_str());
  EXPECT_EQ(latest_checkpoint_step(dir.path), 30);
  for (const TrainState& r : {load_state_file(state_checkpoint_path(dir.path, 30), 3),
                              load_state_header(state_checkpoint_path(dir.path, 30))}) {
    for (int64_t TrainState::*f :
         {&TrainState::step, &TrainState::loader_epoch, &TrainState::loader_shard,
          &TrainState::loader_window, &TrainState::B, &TrainState::T, &TrainState::total_batch,
          &TrainState::seed, &TrainState::world_size, &TrainState::zero, &TrainState::data_order,
          &TrainState::cp, &TrainState::steps, &TrainState::schedule_steps, &TrainState::warmup})
      EXPECT_EQ(r.*f, s.*f);
    EXPECT_EQ(r.lr, s.lr);
    EXPECT_EQ(r.lr_final_frac, s.lr_final_frac);
    EXPECT_EQ(r.weight_decay, s.weight_decay);
    EXPECT_EQ(r.grad_clip, s.grad_clip);
    EXPECT_EQ(r.attn, "flash3");
  }
  const TrainState r = load_state_file(state_checkpoint_path(dir.path, 30), 3);
  EXPECT_EQ(r.m, s.m);
  EXPECT_EQ(r.v, s.v);
  expect_error([&] { load_state_file(state_checkpoint_path(dir.path, 30), 4); }, "parameters");
}

// Moments that are not finite, or a negative second moment, are a corrupt file: refused naming it.
TEST(Checkpoint, StateWithNonFiniteMomentsIsRefused) {
  TempDir dir;
  const std::string path = state_checkpoint_path(dir.path, 5);
  for (int which = 0; which < 3; which++) {
    TrainState s = full_state();
    if (which == 0) s.m[1] = NAN;
    if (which == 1) s.v[2] = INFINITY;
    if (which == 2) s.v[0] = -1e-12f;
    save_state_file(path, s);
    const std::string msg = expect_error([&] { load_state_file(path, 3); }, path);
    EXPECT_NE(msg.find(which == 0 ? "first moment m" : "second moment v"), std::string::npos) << msg;
  }
}

TEST(Checkpoint, UnwritableDirectoryFailsWithoutLeavingFiles) {
  GPTConfig c = small();
  expect_error([&] { save_model_file("/nonexistent_dir_xyz/m.bin", c, gpt_init_params(c, 1)); },
               "/nonexistent_dir_xyz/m.bin");
}

// The state header records --cp (slot 14); files written before it (slot 14 = 0) read as cp 1.
TEST(Checkpoint, StateRecordsCp) {
  TempDir dir;
  TrainState s = full_state();
  s.world_size = 4;
  s.cp = 2;
  s.m = {1, 2};
  s.v = {3, 4};
  const std::string path = state_checkpoint_path(dir.path, 5);
  save_state_file(path, s);
  EXPECT_EQ(load_state_file(path, 2).cp, 2);
  const TrainState h = load_state_header(path);
  EXPECT_EQ(h.cp, 2);
  EXPECT_EQ(h.world_size, 4);
  // an older file: slot 14 was always written as 0
  FILE* f = fopen(path.c_str(), "r+b");
  ASSERT_TRUE(f);
  int64_t slot = -1;
  fseek(f, 14 * sizeof(int64_t), SEEK_SET);
  ASSERT_EQ(fread(&slot, sizeof(slot), 1, f), 1u);
  EXPECT_EQ(slot, 2);
  const int64_t zero = 0;
  fseek(f, 14 * sizeof(int64_t), SEEK_SET);
  fwrite(&zero, sizeof(zero), 1, f);
  fclose(f);
  EXPECT_EQ(load_state_header(path).cp, 1);
  EXPECT_EQ(load_state_file(path, 2).cp, 1);
}
