// checkpoint.cpp — see checkpoint.h for the formats.
#include "model/checkpoint.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>

#include "data/files.h"
#include "kernels/common.h"
#include "model/layout.h"

namespace {

struct File {
  FILE* f = nullptr;
  ~File() { if (f) fclose(f); }
};

size_t file_size(FILE* f) {
  long pos = ftell(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, pos, SEEK_SET);
  return (size_t)n;
}

float bf16_to_float(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

// The model header's plain fields, slot by slot (checkpoint.h); the others are special cases.
struct ModelSlot {
  int slot;
  int GPTConfig::*field;
};
constexpr ModelSlot kModelSlots[] = {{2, &GPTConfig::max_seq_len}, {3, &GPTConfig::vocab_size},
                                     {4, &GPTConfig::num_layers}, {5, &GPTConfig::num_heads},
                                     {6, &GPTConfig::channels}, {7, &GPTConfig::padded_vocab_size}};

GPTConfig config_from_header(const int* h, const std::string& path) {
  CHECK(h[0] == kModelMagic, "'%s' is not a model checkpoint (magic %d, expected %d)",
        path.c_str(), h[0], kModelMagic);
  CHECK(h[1] == 3 || h[1] == 5,
        "'%s' has checkpoint version %d; flashgpt reads versions 3 (fp32) and 5 (bf16)",
        path.c_str(), h[1]);
  GPTConfig c;
  for (const ModelSlot& s : kModelSlots) c.*s.field = h[s.slot];
  if (c.padded_vocab_size <= 0) c.padded_vocab_size = c.vocab_size;
  c.num_kv_heads = h[8] > 0 ? h[8] : h[5];
  CHECK(h[9] == 0 || h[9] == 1, "'%s' has an unknown position-embedding kind %d in its header",
        path.c_str(), h[9]);
  c.rope = h[9];
  // The exact base is slot 11 (float bits); files written before it only have slot 10's integer.
  if (h[11] != 0) std::memcpy(&c.rope_theta, &h[11], sizeof(float));
  else c.rope_theta = h[10] > 0 ? (float)h[10] : 10000.0f;
  CHECK(!c.rope || (std::isfinite(c.rope_theta) && c.rope_theta > 1.0f),
        "'%s' has an invalid RoPE base %g in its header", path.c_str(), c.rope_theta);
  bool sane = c.max_seq_len > 0 && c.vocab_size > 1 && c.num_layers > 0 && c.num_heads > 0 &&
              c.channels > 0 && c.padded_vocab_size >= c.vocab_size && c.channels % c.num_heads == 0 &&
              c.num_heads % c.num_kv_heads == 0;
  CHECK(sane, "'%s' has an inconsistent header (maxT %d V %d L %d NH %d C %d Vp %d)", path.c_str(),
        c.max_seq_len, c.vocab_size, c.num_layers, c.num_heads, c.channels, c.padded_vocab_size);
  return c;
}

// Slots 12 and 13: the attention mask the model was trained with (checkpoint.h).
MaskSpec mask_from_header(const int* h, const std::string& path) {
  CHECK((h[12] == 0 || h[12] == 1) && h[13] >= 0, "'%s' has an unknown attention mask (kind %d, "
        "window %d) in its header", path.c_str(), h[12], h[13]);
  MaskSpec m;
  m.kind = h[12] == 1 ? MaskKind::kDocument : MaskKind::kCausal;
  m.window = h[13];
  return m;
}

void read_header(const std::string& path, int* h) {
  File in;
  in.f = fopen(path.c_str(), "rb");
  CHECK(in.f, "cannot open checkpoint '%s': %s", path.c_str(), strerror(errno));
  CHECK(fread(h, sizeof(int), 256, in.f) == 256, "'%s' is truncated (no full header)", path.c_str());
}

}  // namespace

void save_model_file(const std::string& path, const GPTConfig& c, const std::vector<float>& params,
                     const MaskSpec& mask) {
  ParamLayout layout(c);
  CHECK(params.size() == layout.total, "internal: %zu parameters for a model of %zu",
        params.size(), layout.total);
  int h[256] = {0};
  h[0] = kModelMagic;
  h[1] = 3;
  for (const ModelSlot& s : kModelSlots) h[s.slot] = c.*s.field;
  h[8] = c.num_kv_heads == c.num_heads ? 0 : c.num_kv_heads;
  h[9] = c.rope;                              // 1: RoPE, no wpe rows (llm.c cannot read it)
  h[10] = c.rope ? (int)c.rope_theta : 0;     // RoPE base, rounded (older readers)
  if (c.rope) std::memcpy(&h[11], &c.rope_theta, sizeof(float));  // RoPE base, exact
  h[12] = mask.kind == MaskKind::kDocument ? 1 : 0;  // llm.c ignores both: it trains causal
  h[13] = mask.window;
  write_file_atomically(path, [&](FILE* f) {
    return fwrite(h, sizeof(int), 256, f) == 256 &&
           fwrite(params.data(), sizeof(float), params.size(), f) == params.size();
  });
}

GPTConfig read_model_config(const std::string& path) {
  int h[256];
  read_header(path, h);
  return config_from_header(h, path);
}

MaskSpec read_model_mask(const std::string& path) {
  int h[256];
  read_header(path, h);
  config_from_header(h, path);  // a file that is not a model says so first
  return mask_from_header(h, path);
}

void load_model_file(const std::string& path, GPTConfig& c, std::vector<float>& params) {
  File in;
  in.f = fopen(path.c_str(), "rb");
  CHECK(in.f, "cannot open checkpoint '%s': %s", path.c_str(), strerror(errno));
  int h[256];
  CHECK(fread(h, sizeof(int), 256, in.f) == 256, "'%s' is truncated (no full header)", path.c_str());
  c = config_from_header(h, path);
  mask_from_header(h, path);  // a bad mask slot is a bad file, whoever reads it
  ParamLayout layout(c);
  size_t elem = h[1] == 3 ? 4 : 2;
  size_t want = 256 * sizeof(int) + layout.total * elem;
  size_t have = file_size(in.f);
  CHECK(have == want, "'%s' has %zu bytes but its header describes %zu; the file is truncated or "
        "not a GPT-2 checkpoint", path.c_str(), have, want);
  params.resize(layout.total);
  if (elem == 4) {
    CHECK(fread(params.data(), 4, layout.total, in.f) == layout.total, "read error in '%s'",
          path.c_str());
  } else {
    std::vector<uint16_t> raw(layout.total);
    CHECK(fread(raw.data(), 2, layout.total, in.f) == layout.total, "read error in '%s'",
          path.c_str());
    for (size_t i = 0; i < layout.total; i++) params[i] = bf16_to_float(raw[i]);
  }
  check_finite_params(params, c, path);
}

void check_finite_params(const std::vector<float>& params, const GPTConfig& c,
                         const std::string& path) {
  ParamLayout layout(c);
  for (int i = 0; i < kNumParamTensors; i++) {
    const float* t = params.data() + layout.offsets[i];
    for (size_t k = 0; k < layout.sizes[i]; k++)
      CHECK(std::isfinite(t[k]), "'%s' holds a non-finite weight (%g in %s, element %zu): the run "
            "that wrote it diverged; use an earlier checkpoint", path.c_str(), t[k],
            ParamLayout::name(i), k);
  }
}

// The state header's fields, slot by slot (checkpoint.h): integers as they are, reals as the
// bits of a double, --attn as kAttnBytes of text.
struct StateSlot {
  int slot;
  int64_t TrainState::*field;
};
constexpr StateSlot kStateSlots[] = {
    {2, &TrainState::step},          {4, &TrainState::loader_epoch},  {5, &TrainState::loader_shard},
    {6, &TrainState::loader_window}, {7, &TrainState::B},             {8, &TrainState::T},
    {9, &TrainState::total_batch},   {10, &TrainState::seed},         {11, &TrainState::world_size},
    {12, &TrainState::zero},         {13, &TrainState::data_order},   {14, &TrainState::cp},
    {15, &TrainState::steps},        {16, &TrainState::schedule_steps}, {17, &TrainState::warmup}};
struct StateRealSlot {
  int slot;
  double TrainState::*field;
};
constexpr StateRealSlot kStateRealSlots[] = {{18, &TrainState::lr}, {19, &TrainState::lr_final_frac},
                                             {20, &TrainState::weight_decay}, {21, &TrainState::grad_clip}};
constexpr int kAttnSlot = 22;
constexpr size_t kAttnBytes = 32;  // slots 22..25

void save_state_file(const std::string& path, const TrainState& s) {
  CHECK(s.attn.size() < kAttnBytes, "internal: --attn name '%s' too long for the state file",
        s.attn.c_str());
  int64_t h[64] = {0};
  h[0] = kStateMagic;
  h[1] = 1;
  h[3] = (int64_t)s.m.size();
  for (const StateSlot& f : kStateSlots) h[f.slot] = s.*f.field;
  for (const StateRealSlot& f : kStateRealSlots) std::memcpy(&h[f.slot], &(s.*f.field), sizeof(double));
  std::memcpy(&h[kAttnSlot], s.attn.data(), s.attn.size());
  write_file_atomically(path, [&](FILE* f) {
    return fwrite(h, sizeof(int64_t), 64, f) == 64 &&
           fwrite(s.m.data(), sizeof(float), s.m.size(), f) == s.m.size() &&
           fwrite(s.v.data(), sizeof(float), s.v.size(), f) == s.v.size();
  });
}

namespace {

// Opens a state file and reads its 64 x int64 header into s (all but m and v); h[3] is the
// number of parameters the moments are for.
void read_state_header(File& in, const std::string& path, int64_t h[64], TrainState& s) {
  in.f = fopen(path.c_str(), "rb");
  CHECK(in.f, "cannot open optimizer state '%s': %s", path.c_str(), strerror(errno));
  CHECK(fread(h, sizeof(int64_t), 64, in.f) == 64, "'%s' is truncated", path.c_str());
  CHECK(h[0] == kStateMagic && h[1] == 1, "'%s' is not a flashgpt optimizer-state file",
        path.c_str());
  for (const StateSlot& f : kStateSlots) s.*f.field = h[f.slot];
  for (const StateRealSlot& f : kStateRealSlots) std::memcpy(&(s.*f.field), &h[f.slot], sizeof(double));
  const char* attn = reinterpret_cast<const char*>(&h[kAttnSlot]);
  s.attn.assign(attn, strnlen(attn, kAttnBytes));
  if (s.world_size <= 0) s.world_size = 1;  // older files
  if (s.cp <= 0) s.cp = 1;
}

// The AdamW moments of a file: finite, and the second moment (an average of squares) >= 0;
// anything else is a corrupt file, which would turn the first step's update into NaN.
void check_moments(const TrainState& s, const std::string& path) {
  for (size_t i = 0; i < s.m.size(); i++)
    CHECK(std::isfinite(s.m[i]), "optimizer state '%s' is corrupt: its first moment m holds %g "
          "(element %zu); remove that checkpoint pair (model and state file of its step) to "
          "resume from the one before", path.c_str(), s.m[i], i);
  for (size_t i = 0; i < s.v.size(); i++)
    CHECK(std::isfinite(s.v[i]) && s.v[i] >= 0, "optimizer state '%s' is corrupt: its second "
          "moment v holds %g (element %zu); remove that checkpoint pair (model and state file of "
          "its step) to resume from the one before", path.c_str(), s.v[i], i);
}

}  // namespace

TrainState load_state_header(const std::string& path) {
  File in;
  int64_t h[64];
  TrainState s;
  read_state_header(in, path, h, s);
  return s;
}

TrainState load_state_file(const std::string& path, size_t expected_params) {
  File in;
  int64_t h[64];
  TrainState s;
  read_state_header(in, path, h, s);
  CHECK((size_t)h[3] == expected_params,
        "'%s' holds optimizer state for %lld parameters but the model has %zu", path.c_str(),
        (long long)h[3], expected_params);
  size_t want = 64 * sizeof(int64_t) + 2 * expected_params * sizeof(float);
  CHECK(file_size(in.f) == want, "'%s' is truncated or corrupt (size %zu, expected %zu)",
        path.c_str(), file_size(in.f), want);
  s.m.resize(expected_params);
  s.v.resize(expected_params);
  CHECK(fread(s.m.data(), 4, expected_params, in.f) == expected_params &&
            fread(s.v.data(), 4, expected_params, in.f) == expected_params,
        "read error in '%s'", path.c_str());
  check_moments(s, path);
  return s;
}

std::string model_checkpoint_path(const std::string& dir, int64_t step) {
  return flashgpt::strformat("%s/model_%08lld.bin", dir.c_str(), (long long)step);
}

std::string state_checkpoint_path(const std::string& dir, int64_t step, int rank) {
  if (rank > 0)
    return flashgpt::strformat("%s/state_%08lld_rank%d.bin", dir.c_str(), (long long)step, rank);
  return flashgpt::strformat("%s/state_%08lld.bin", dir.c_str(), (long long)step);
}

std::string tokenizer_beside(const std::string& model_path) {
  if (is_directory(model_path)) return model_path + "/tokenizer.bin";
  const size_t slash = model_path.find_last_of('/');
  return (slash == std::string::npos ? std::string(".") : model_path.substr(0, slash)) +
         "/tokenizer.bin";
}

std::vector<std::string> checkpoint_files(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (!d) return names;
  while (dirent* e = readdir(d)) {
    const std::string n = e->d_name;
    if ((n.rfind("model_", 0) == 0 || n.rfind("state_", 0) == 0) && n.size() > 4 &&
        n.compare(n.size() - 4, 4, ".bin") == 0)
      names.push_back(n);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

int64_t latest_checkpoint_step(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (!d) return -1;
  int64_t best = -1;
  while (dirent* e = readdir(d)) {
    long long step;
    int end = 0;  // exactly model_<digits>.bin: a leftover model_...bin.tmp must not count
    if (sscanf(e->d_name, "model_%lld%n", &step, &end) == 1 && strcmp(e->d_name + end, ".bin") == 0) {
      struct stat st;
      if (step > best && stat(state_checkpoint_path(dir, step).c_str(), &st) == 0) best = step;
    }
  }
  closedir(d);
  return best;
}
