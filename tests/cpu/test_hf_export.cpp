// Hugging Face interop (model/safetensors.*, model/hf_gpt2.*, train/export.*):
//  - the safetensors bytes by hand: 8-byte little-endian header length, JSON header padded
//    with spaces to 8 bytes, __metadata__, dtype/shape/data_offsets tiling the buffer;
//  - the GPT2LMHeadModel layout by hand: Conv1D weights transposed, lm_head == wte (V rows),
//    config.json's numbers;
//  - export -> --init gives the same parameters and bit-identical logits; training from the
//    export starts at the same loss; a Hub-style file (no "transformer." prefix, F16/BF16);
//  - RoPE and grouped-query models refused; corrupt files refused naming the file; a config
//    (or layer count) that disagrees with the tensors refused naming a tensor.
// transformers itself reads the export on the GPU machine: scripts/check_hf_export.py.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>

#include "data/files.h"
#include "data/tokenizer.h"
#include "model/checkpoint.h"
#include "model/hf_gpt2.h"
#include "model/json.h"
#include "model/layout.h"
#include "model/model.h"
#include "kernels/rng.h"
#include "model/safetensors.h"
#include "tests/cpu/test_helpers.h"
#include "train/export.h"
#include "train/options.h"
#include "train/train.h"

namespace {

// The tiny preset at 2 layers of 32 channels, 4 heads, 300 tokens, 24 positions.
GPTConfig hf_config() {
  GPTConfig c = gpt_preset("tiny", 300, 24);
  c.num_layers = 2;
  c.channels = 32;
  return c;
}

// The parameters load_hf_gpt2 reads from path.
std::vector<float> hf_params(const std::string& path) {
  GPTConfig c;
  std::vector<float> p;
  load_hf_gpt2(path, c, p);
  return p;
}

// load_hf_gpt2(path) fails with an error that mentions needle.
void expect_load_error(const std::string& path, const std::string& needle) {
  GPTConfig c;
  std::vector<float> p;
  expect_error([&] { load_hf_gpt2(path, c, p); }, needle);
}

std::vector<float> random_params(const GPTConfig& c, uint64_t seed) {
  std::vector<float> p = gpt_init_params(c, seed);
  Rng rng(seed + 1);
  ParamLayout lay(c);
  for (size_t i = 0; i < p.size(); i++) p[i] += 0.05f * (float)rng.normal();
  // padded vocabulary rows stay zero, as in training (no gradient reaches them)
  std::fill(p.begin() + lay.offsets[P_WTE] + (size_t)c.vocab_size * c.channels,
            p.begin() + lay.offsets[P_WTE] + lay.sizes[P_WTE], 0.0f);
  return p;
}

std::vector<float> logits_of(const GPTConfig& c, const std::vector<float>& p) {
  ModelOptions mo;
  mo.config = c;
  mo.B = 1;
  mo.T = c.max_seq_len;
  std::unique_ptr<Model> m = make_cpu_model(mo);
  m->set_params(p);
  std::vector<int> toks(c.max_seq_len);
  Rng rng(5);
  for (int& t : toks) t = (int)rng.below(c.vocab_size);
  m->forward(toks.data(), nullptr, 1, c.max_seq_len);
  std::vector<float> out((size_t)c.max_seq_len * c.padded_vocab_size);
  for (int t = 0; t < c.max_seq_len; t++) m->logits_at(t, out.data() + (size_t)t * c.padded_vocab_size);
  return out;
}

}  // namespace

TEST(Safetensors, BytesByHand) {
  TempDir dir;
  const float a[6] = {1, 2, 3, 4, 5, 6}, b[1] = {-7};
  write_safetensors(dir / "x.safetensors", {{"a", {2, 3}, a}, {"b", {1}, b}}, {{"format", "pt"}});
  const std::string bytes = read_file_bytes(dir / "x.safetensors", "test");
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = n << 8 | (unsigned char)bytes[i];  // little-endian
  ASSERT_EQ(n % 8, 0u);                                                // data 8-byte aligned
  ASSERT_EQ(bytes.size(), 8 + n + 7 * 4);
  const std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.find_last_not_of(' ') + 1, header.rfind('}') + 1);  // padded with spaces
  Json h = parse_json(header, "header");
  EXPECT_EQ(h.find("__metadata__")->find("format")->str, "pt");
  const Json* ea = h.find("a");
  EXPECT_EQ(ea->find("dtype")->str, "F32");
  EXPECT_EQ(ea->find("shape")->items[0].number, 2);
  EXPECT_EQ(ea->find("shape")->items[1].number, 3);
  EXPECT_EQ(ea->find("data_offsets")->items[0].number, 0);
  EXPECT_EQ(ea->find("data_offsets")->items[1].number, 24);
  EXPECT_EQ(h.find("b")->find("data_offsets")->items[0].number, 24);
  float got[7];
  std::memcpy(got, bytes.data() + 8 + n, sizeof got);
  EXPECT_EQ(got[5], 6.0f);
  EXPECT_EQ(got[6], -7.0f);
  SafetensorsFile f = read_safetensors(dir / "x.safetensors");
  EXPECT_EQ(f.to_float("a"), std::vector<float>(a, a + 6));
  EXPECT_EQ(f.metadata["format"], "pt");
}

TEST(Safetensors, HalfFormatsAndBadFiles) {
  TempDir dir;
  // A hand-made file: F16 [1.0, -2.5, 65504, 2^-24] and BF16 [1.0, -3.0].
  const std::string header = "{\"h\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[0,8]},"
                             "\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[8,12]}}";
  std::string file(8, '\0');
  file[0] = (char)header.size();
  file += header;
  const uint16_t f16[4] = {0x3C00, 0xC100, 0x7BFF, 0x0001}, bf16[2] = {0x3F80, 0xC040};
  file.append((const char*)f16, 8);
  file.append((const char*)bf16, 4);
  std::ofstream(dir / "h.safetensors", std::ios::binary) << file;
  SafetensorsFile f = read_safetensors(dir / "h.safetensors");
  EXPECT_EQ(f.to_float("h"), (std::vector<float>{1.0f, -2.5f, 65504.0f, std::ldexp(1.0f, -24)}));
  EXPECT_EQ(f.to_float("b"), (std::vector<float>{1.0f, -3.0f}));
  // truncated, a gap, overlapping, a wrong size, not a safetensors file at all, a size past 2^64
  auto bad = [&](const std::string& name, const std::string& content, const std::string& needle) {
    std::ofstream(dir / name, std::ios::binary) << content;
    std::string msg = expect_error([&] { read_safetensors(dir / name); }, needle);
    EXPECT_NE(msg.find(name), std::string::npos) << msg;
  };
  bad("trunc.safetensors", file.substr(0, file.size() - 2), "truncated");
  std::string gap = file;
  gap.replace(gap.find("[8,12]"), 6, "[9,13]");
  bad("gap.safetensors", gap + "x", "gap");
  std::string size = file;
  size.replace(size.find("[4]"), 3, "[5]");
  bad("size.safetensors", size, "bytes");
  bad("tiny.safetensors", "abc", "8-byte");
  bad("json.safetensors", std::string("\x04\0\0\0\0\0\0\0{\"a\"", 12), "header");
  // 2^32 x 2^32 F32 elements: the byte count wraps 2^64 to 0, which must not match an empty
  // data range.
  const std::string wrap = "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],"
                           "\"data_offsets\":[0,0]}}";
  std::string wrapped(8, '\0');
  wrapped[0] = (char)wrap.size();
  bad("wrap.safetensors", wrapped + wrap, "tensor 'w' has a shape whose size overflows 64 bits");
}

TEST(HfExport, LayoutByHandAndRoundTrip) {
  TempDir dir;
  const GPTConfig c = hf_config();
  const std::vector<float> p = random_params(c, 7);
  export_hf_gpt2(dir / "hf", c, p, 299);
  const ParamLayout lay(c);
  const size_t C = c.channels, V = c.vocab_size;
  SafetensorsFile f = read_safetensors(dir / "hf/model.safetensors");
  EXPECT_EQ(f.metadata["format"], "pt");  // transformers refuses files without it
  // Conv1D weights are (in, out): c_attn[i][j] = qkvw[j][i] for layer 1
  std::vector<float> attn = f.to_float("transformer.h.1.attn.c_attn.weight");
  EXPECT_EQ(f.tensors["transformer.h.1.attn.c_attn.weight"].shape, (std::vector<int64_t>{(int64_t)C, 3 * (int64_t)C}));
  const float* qkvw1 = p.data() + lay.offsets[P_QKVW] + 3 * C * C;
  for (size_t i = 0; i < C; i++)
    for (size_t j = 0; j < 3 * C; j++) ASSERT_EQ(attn[i * 3 * C + j], qkvw1[j * C + i]);
  std::vector<float> fc = f.to_float("transformer.h.0.mlp.c_proj.weight");  // (4C, C) from (C, 4C)
  const float* fcproj0 = p.data() + lay.offsets[P_FCPROJW];
  for (size_t i = 0; i < 4 * C; i++)
    for (size_t j = 0; j < C; j++) ASSERT_EQ(fc[i * C + j], fcproj0[j * 4 * C + i]);
  // the tied head: lm_head == wte, V rows (not the padded Vp)
  std::vector<float> wte = f.to_float("transformer.wte.weight"), head = f.to_float("lm_head.weight");
  ASSERT_EQ(wte.size(), V * C);
  EXPECT_EQ(wte, head);
  EXPECT_TRUE(std::equal(wte.begin(), wte.end(), p.begin() + lay.offsets[P_WTE]));
  EXPECT_EQ(f.to_float("transformer.h.1.ln_2.bias"),
            std::vector<float>(p.begin() + lay.offsets[P_LN2B] + C, p.begin() + lay.offsets[P_LN2B] + 2 * C));
  Json cfg = parse_json(read_file_bytes(dir / "hf/config.json", "config"), "config.json");
  EXPECT_EQ(cfg.find("model_type")->str, "gpt2");
  EXPECT_EQ(cfg.find("vocab_size")->number, 300);
  EXPECT_EQ(cfg.find("n_positions")->number, 24);
  EXPECT_EQ(cfg.find("n_embd")->number, 32);
  EXPECT_EQ(cfg.find("n_layer")->number, 2);
  EXPECT_EQ(cfg.find("n_head")->number, 4);
  EXPECT_EQ(cfg.find("activation_function")->str, "gelu_new");
  EXPECT_EQ(cfg.find("eos_token_id")->number, 299);
  EXPECT_TRUE(cfg.find("tie_word_embeddings")->boolean);

  // Back: the directory, the .safetensors file (config.json beside it), and the file alone
  // (the head count from our metadata) give the same parameters and bit-identical logits.
  const std::vector<float> ref = logits_of(c, p);
  std::ofstream(dir / "alone.safetensors", std::ios::binary)
      << read_file_bytes(dir / "hf/model.safetensors", "x");
  for (const std::string& path : {dir / "hf", dir / "hf/model.safetensors", dir / "alone.safetensors"}) {
    GPTConfig c2;
    std::vector<float> p2;
    load_any_model(path, c2, p2);
    EXPECT_EQ(c2.num_layers, 2);
    EXPECT_EQ(c2.num_heads, 4);
    EXPECT_EQ(c2.padded_vocab_size, c.padded_vocab_size);
    EXPECT_EQ(p2, p) << path;
    EXPECT_EQ(logits_of(c2, p2), ref) << path;
  }
}

TEST(HfExport, HubStyleNames) {
  // GPT2Model names (no "transformer."), as the Hub's gpt2 files have, plus a causal-mask
  // buffer to ignore. (F16 and BF16 data: Safetensors.HalfFormatsAndBadFiles.)
  TempDir dir;
  const GPTConfig c = hf_config();
  const std::vector<float> p = random_params(c, 9);
  export_hf_gpt2(dir / "ours", c, p);
  SafetensorsFile ours = read_safetensors(dir / "ours/model.safetensors");
  std::vector<std::vector<float>> keep;
  std::vector<TensorToWrite> hub;
  for (const auto& [name, e] : ours.tensors) {
    if (name == "lm_head.weight") continue;
    keep.push_back(ours.to_float(name));
    hub.push_back({name.substr(std::strlen("transformer.")), e.shape, keep.back().data()});
  }
  const std::vector<float> mask(24 * 24, 1.0f);
  hub.push_back({"h.0.attn.bias", {1, 1, 24, 24}, mask.data()});
  std::system(("mkdir -p '" + dir.path + "/hub'").c_str());
  write_safetensors(dir / "hub/model.safetensors", hub, {{"format", "pt"}});
  std::ofstream(dir / "hub/config.json") << read_file_bytes(dir / "ours/config.json", "x");
  EXPECT_EQ(hf_params(dir / "hub"), p);
}

TEST(HfExport, RefusesWhatGpt2CannotExpress) {
  TempDir dir;
  GPTConfig c = hf_config();
  c.rope = 1;
  expect_error([&] { export_hf_gpt2(dir / "r", c, gpt_init_params(c, 1)); }, "--pos rope");
  c = hf_config();
  c.num_kv_heads = 2;
  expect_error([&] { export_hf_gpt2(dir / "g", c, gpt_init_params(c, 1)); }, "--kv-heads");
  EXPECT_FALSE(file_exists(dir / "r/model.safetensors"));
  // an untied head, another activation, a config that disagrees with the tensors
  c = hf_config();
  std::vector<float> p = random_params(c, 3);
  export_hf_gpt2(dir / "hf", c, p);
  const std::string cfg = read_file_bytes(dir / "hf/config.json", "x");
  auto with_config = [&](const std::string& from, const std::string& to, const std::string& needle) {
    std::string edited = cfg;
    edited.replace(edited.find(from), from.size(), to);
    std::ofstream(dir / "hf/config.json") << edited;
    expect_load_error(dir / "hf", needle);
  };
  with_config("\"gelu_new\"", "\"relu\"", "activation_function");
  with_config("\"n_positions\": 24", "\"n_positions\": 25", "n_positions");
  with_config("\"n_head\": 4", "\"n_head\": 5", "heads");
  with_config("\"layer_norm_epsilon\": 1e-05", "\"layer_norm_epsilon\": 1e-6", "layer_norm_epsilon");
  std::ofstream(dir / "hf/config.json") << cfg;
  SafetensorsFile f = read_safetensors(dir / "hf/model.safetensors");
  std::vector<std::vector<float>> keep;
  std::vector<TensorToWrite> t;
  for (const auto& [name, e] : f.tensors) {
    keep.push_back(f.to_float(name));
    if (name == "lm_head.weight") keep.back()[0] += 1.0f;
    t.push_back({name, e.shape, keep.back().data()});
  }
  write_safetensors(dir / "hf/model.safetensors", t, {{"format", "pt"}});
  expect_load_error(dir / "hf", "lm_head.weight differs");
  expect_load_error(dir / "nothing", "nothing");
}

// A config.json (or, without one, the layers counted from the tensors) that disagrees with the
// tensors is refused with one line naming a tensor: fewer layers than the file holds (they were
// once dropped silently), more, a head count other than the export's, a tensor GPT-2 does not
// have.
TEST(HfExport, ShapeThatDisagreesWithTheTensorsIsRefused) {
  TempDir dir;
  const GPTConfig c = hf_config();
  export_hf_gpt2(dir / "hf", c, random_params(c, 4));
  const std::string cfg = read_file_bytes(dir / "hf/config.json", "x");
  auto with_config = [&](const std::string& from, const std::string& to, const std::string& needle) {
    SCOPED_TRACE(to);
    std::string edited = cfg;
    edited.replace(edited.find(from), from.size(), to);
    std::ofstream(dir / "hf/config.json") << edited;
    expect_load_error(dir / "hf", needle);
  };
  with_config("\"n_layer\": 2", "\"n_layer\": 1",
              "tensor 'transformer.h.1.attn.c_attn.bias' is not part of a GPT-2 of 1 layers");
  with_config("\"n_layer\": 2", "\"n_layer\": 3", "no tensor 'transformer.h.2.ln_1.weight'");
  with_config("\"n_head\": 4", "\"n_head\": 8", "n_head 8 disagrees with the 4 heads");
  with_config("\"n_embd\": 32", "\"n_embd\": 64", "n_embd");
  with_config("\"vocab_size\": 300", "\"vocab_size\": 299", "vocab_size");
  std::ofstream(dir / "hf/config.json") << cfg;

  // A tensor GPT-2 does not have; and, in a file without config.json (its layers counted from
  // h.N.ln_1.weight, its heads from the export's metadata), a layer 1 without ln_1.weight.
  const SafetensorsFile f = read_safetensors(dir / "hf/model.safetensors");
  auto rewritten = [&](const std::string& file, const std::string& drop, const std::string& add) {
    std::vector<std::vector<float>> keep;
    std::vector<TensorToWrite> t;
    for (const auto& [name, e] : f.tensors) {
      if (name == drop) continue;
      keep.push_back(f.to_float(name));
      t.push_back({name, e.shape, keep.back().data()});
    }
    if (!add.empty()) t.push_back({add, {1}, keep.back().data()});
    write_safetensors(file, t, {{"format", "pt"}, {"n_head", "4"}});
  };
  rewritten(dir / "hf/model.safetensors", "", "transformer.h.0.attn.c_attn.lora");
  expect_load_error(dir / "hf", "tensor 'transformer.h.0.attn.c_attn.lora' is not part of");
  rewritten(dir / "alone.safetensors", "transformer.h.1.ln_1.weight", "");
  expect_load_error(dir / "alone.safetensors",
                    "tensor 'transformer.h.1.attn.c_attn.bias' is not part of a GPT-2 of 1 layers");
}


// `flashgpt export` from a trained checkpoint, then `train --init DIR`: the first step's loss
// is the one of `--init model_*.bin` (same weights, same data).
TEST(HfExport, ExportCommandAndInit) {
  TempDir out;
  auto opts = small_train_options;
  TrainOptions o = opts(3, {});
  o.out_dir = out / "run";
  run_train(o);
  ExportOptions e;
  Argv a({"export", "--checkpoint", model_checkpoint_path(out / "run", 3), "--out", out / "hf"});
  ASSERT_TRUE(parse_export_options(a.argc(), a.argv(), e));
  std::unique_ptr<FILE, int (*)(FILE*)> sink(std::tmpfile(), std::fclose);
  run_export(e, sink.get());
  EXPECT_TRUE(file_exists(out / "hf/tokenizer.bin"));  // sample --checkpoint DIR finds it
  TrainOptions from_bin = opts(1, {}), from_hf = opts(1, {});
  from_bin.init_path = model_checkpoint_path(out / "run", 3);
  from_hf.init_path = out / "hf";
  EXPECT_EQ(run_train(from_bin).losses[0], run_train(from_hf).losses[0]);
  Argv bad({"export", "--checkpoint", "m.bin", "--out", "x", "--format", "onnx"});
  expect_error([&] { parse_export_options(bad.argc(), bad.argv(), e); }, "--format 'onnx'");
  // --checkpoint takes what load_any_model reads, a Hugging Face directory included
  const std::string help = help_text(parse_export_options, {"export", "--help"});
  EXPECT_NE(help.find("--checkpoint arg model: flashgpt or llm.c file, or Hugging Face GPT-2 "
                      "directory"), std::string::npos) << help;
}
