// checkpoint — model files in llm.c's format, plus our optimizer-state file.
//
// Model file (llm.c, readable by llm.c and its Python tools, and theirs by us):
//   256 x int32 header: [0] magic 20240326, [1] version (3 = fp32 parameters, 5 = bf16),
//   [2] maxT, [3] V, [4] L, [5] NH, [6] C, [7] Vp, [8] NKV (ours: 0 or NH means plain
//   multi-head attention, which is all llm.c knows), [9] 1 for RoPE models (then wpe has 0
//   rows), [10] the RoPE base theta rounded to an integer (for older readers), [11] its exact
//   float bits (0 in older files), [12] the attention mask the model was trained with (0
//   causal, 1 document: kernels/attention/mask.h), [13] its sliding window W (0: none); both 0
//   in older files and in llm.c's, which ignores them (llm.c runs any file causal, unwindowed);
//   then the 16 parameter tensors in ParamLayout order. We
//   write version 3; we read 3 and 5. llm.c reads our files of plain multi-head models with
//   learned positions; a GQA or RoPE file holds fewer numbers than llm.c's layout expects
//   and llm.c stops at its file read.
//   Every reader rejects a file holding NaN or infinite weights, naming the tensor.
// State file (ours): 64 x int64 header: [0] magic 20261122, [1] version 1, [2] step,
//   [3] number of parameters, [4..6] data-loader epoch/shard/window, [7] batch B, [8] seq-len T,
//   [9] total batch, [10] seed, [11] world size, [12] ZeRO stage, [13] data order (1 shuffled,
//   2 in order, 0 unknown: older files), [14] context-parallel degree --cp (0 in older files:
//   read as 1), [15] --steps (where the run was to stop), [16] the step where its cosine decay
//   ends (--steps of its first start), [17] --warmup, [18..21] --lr, --lr-final-frac,
//   --weight-decay, --grad-clip (the bits of a double each), [22..25] --attn as given (text,
//   NUL-padded); [15..25] are 0 in older files, which --resume reads as "not recorded"
//   (train/resume.h); then AdamW m and v, fp32, ParamLayout order (with --zero 1: this rank's
//   shard of them, see model/zero_shard.h). A reader refuses moments that are not finite (or
//   a negative v), naming the file.
// Both are written to NAME.tmp and renamed, so a crash never leaves a half-written file under
// the real name. In an --out directory they are model_00000100.bin and state_00000100.bin
// (step 100); with several processes rank R > 0 writes its own state_00000100_rank<R>.bin.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/attention/mask.h"
#include "model/config.h"

constexpr int kModelMagic = 20240326;
constexpr int64_t kStateMagic = 20261122;
constexpr int64_t kDataShuffled = 1, kDataInOrder = 2;  // TrainState::data_order

void save_model_file(const std::string& path, const GPTConfig& c, const std::vector<float>& params,
                     const MaskSpec& mask = {});
// Reads a version 3 or 5 file; throws one clear line naming the file on any problem.
void load_model_file(const std::string& path, GPTConfig& c, std::vector<float>& params);
// Only the header (config).
GPTConfig read_model_config(const std::string& path);
// The mask and window the model was trained with (header slots 12, 13; eot is not recorded:
// the tokenizer's). Throws like read_model_config.
MaskSpec read_model_mask(const std::string& path);
// Throws naming path and the tensor when a weight is NaN or infinite.
void check_finite_params(const std::vector<float>& params, const GPTConfig& c,
                         const std::string& path);

struct TrainState {
  int64_t step = 0;
  int64_t loader_epoch = 0, loader_shard = 0, loader_window = 0;
  int64_t B = 0, T = 0, total_batch = 0, seed = 0, world_size = 1, zero = 0;
  int64_t data_order = 0;  // kDataShuffled, kDataInOrder (--no-shuffle), 0 unknown (older files)
  int64_t cp = 1;          // --cp of the run (the model file does not depend on it)
  // The run's schedule and attention, which --resume continues with (train/resume.h);
  // schedule_steps 0: an older file that does not record them.
  int64_t steps = 0, schedule_steps = 0, warmup = 0;
  double lr = 0, lr_final_frac = 0, weight_decay = 0, grad_clip = 0;
  std::string attn;  // --attn as given: a backend name or auto
  std::vector<float> m, v;
};
void save_state_file(const std::string& path, const TrainState& s);
TrainState load_state_file(const std::string& path, size_t expected_params);
// The header only (no m, v; no size checks): the run's settings, read before the model exists.
TrainState load_state_header(const std::string& path);

std::string model_checkpoint_path(const std::string& dir, int64_t step);
std::string state_checkpoint_path(const std::string& dir, int64_t step, int rank = 0);
// The largest step for which both files exist in dir, or -1.
int64_t latest_checkpoint_step(const std::string& dir);
// Where `sample` and `eval` look for the tokenizer of a model: DIR/tokenizer.bin for a model
// directory (Hugging Face export), else tokenizer.bin in the file's directory.
std::string tokenizer_beside(const std::string& model_path);
// Names of the model_*.bin and state_*.bin files in dir (sorted; empty when none or no dir).
std::vector<std::string> checkpoint_files(const std::string& dir);
