// hf_gpt2.cpp — see hf_gpt2.h for the layout.
#include "model/hf_gpt2.h"

#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <set>

#include "data/files.h"
#include "kernels/common.h"
#include "model/checkpoint.h"
#include "model/json.h"
#include "model/layout.h"
#include "model/safetensors.h"

namespace {

constexpr double kLayerNormEps = 1e-5;  // kernels/layernorm.h

// (rows, cols) -> (cols, rows)
std::vector<float> transpose(const float* a, size_t rows, size_t cols) {
  std::vector<float> t(rows * cols);
  for (size_t r = 0; r < rows; r++)
    for (size_t c = 0; c < cols; c++) t[c * rows + r] = a[r * cols + c];
  return t;
}

// One per-layer tensor of GPT-2: our tensor, the HF name after "h.{l}.", and whether HF's
// Conv1D holds it transposed ((in, out) where we hold (out, in)).
struct LayerTensor {
  int ours;
  const char* hf;
  bool transposed;
};
constexpr LayerTensor kLayerTensors[] = {
    {P_LN1W, "ln_1.weight", false},          {P_LN1B, "ln_1.bias", false},
    {P_QKVW, "attn.c_attn.weight", true},    {P_QKVB, "attn.c_attn.bias", false},
    {P_ATTPROJW, "attn.c_proj.weight", true}, {P_ATTPROJB, "attn.c_proj.bias", false},
    {P_LN2W, "ln_2.weight", false},          {P_LN2B, "ln_2.bias", false},
    {P_FCW, "mlp.c_fc.weight", true},        {P_FCB, "mlp.c_fc.bias", false},
    {P_FCPROJW, "mlp.c_proj.weight", true},  {P_FCPROJB, "mlp.c_proj.bias", false}};

// Our (rows, cols) of one layer's slice of tensor i (a vector: rows = 1).
std::pair<size_t, size_t> layer_shape(const GPTConfig& c, int i) {
  const size_t C = c.channels, QKV = c.qkv_channels();
  switch (i) {
    case P_QKVW: return {QKV, C};
    case P_QKVB: return {1, QKV};
    case P_ATTPROJW: return {C, C};
    case P_FCW: return {4 * C, C};
    case P_FCB: return {1, 4 * C};
    case P_FCPROJW: return {C, 4 * C};
    default: return {1, C};  // ln weights and biases, attprojb, fcprojb
  }
}

void check_gpt2_expressible(const GPTConfig& c) {
  CHECK(!c.rope, "export --format hf: this model uses rotary positions (--pos rope), which the "
        "GPT-2 architecture (learned positions) cannot express; export a --pos learned model");
  CHECK(c.num_kv_heads == c.num_heads, "export --format hf: this model uses grouped-query "
        "attention (%d key/value heads for %d query heads), which GPT-2 cannot express; export a "
        "model trained without --kv-heads", c.num_kv_heads, c.num_heads);
}

std::string dir_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

// A config.json number that must be an integer >= lo.
int config_int(const Json& cfg, const char* key, const std::string& where, int lo) {
  const Json* v = cfg.find(key);
  CHECK(v && v->kind == Json::Number && v->number == (double)(int)v->number && v->number >= lo,
        "%s: \"%s\" is missing or not an integer >= %d", where.c_str(), key, lo);
  return (int)v->number;
}

}  // namespace

void export_hf_gpt2(const std::string& dir, const GPTConfig& c, const std::vector<float>& params,
                    int eot_token) {
  check_gpt2_expressible(c);
  const ParamLayout lay(c);
  CHECK(params.size() == lay.total, "internal: %zu parameters for a model of %zu", params.size(),
        lay.total);
  const size_t V = c.vocab_size, C = c.channels, L = c.num_layers;
  const float* p = params.data();
  std::vector<std::vector<float>> transposed;  // keeps the transposed copies alive
  std::vector<TensorToWrite> t;
  t.push_back({"transformer.wte.weight", {(int64_t)V, (int64_t)C}, p + lay.offsets[P_WTE]});
  t.push_back({"transformer.wpe.weight", {c.max_seq_len, (int64_t)C}, p + lay.offsets[P_WPE]});
  transposed.reserve(L * 4);
  for (size_t l = 0; l < L; l++) {
    for (const LayerTensor& lt : kLayerTensors) {
      const auto [rows, cols] = layer_shape(c, lt.ours);
      const float* src = p + lay.offsets[lt.ours] + l * rows * cols;
      const std::string name = flashgpt::strformat("transformer.h.%zu.%s", l, lt.hf);
      if (lt.transposed) {
        transposed.push_back(transpose(src, rows, cols));
        t.push_back({name, {(int64_t)cols, (int64_t)rows}, transposed.back().data()});
      } else {
        t.push_back({name, {(int64_t)(rows * cols)}, src});
      }
    }
  }
  t.push_back({"transformer.ln_f.weight", {(int64_t)C}, p + lay.offsets[P_LNFW]});
  t.push_back({"transformer.ln_f.bias", {(int64_t)C}, p + lay.offsets[P_LNFB]});
  t.push_back({"lm_head.weight", {(int64_t)V, (int64_t)C}, p + lay.offsets[P_WTE]});

  mkdir(dir.c_str(), 0755);
  CHECK(is_directory(dir), "--out '%s' is not a directory and cannot be made one; pick another "
        "--out", dir.c_str());
  write_safetensors(dir + "/model.safetensors", t,
                    {{"format", "pt"}, {"producer", kHfExportProducer},
                     {"n_head", std::to_string(c.num_heads)}});
  const int eot = eot_token >= 0 ? eot_token : c.vocab_size - 1;
  const std::string config = flashgpt::strformat(
      "{\n"
      "  \"architectures\": [\"GPT2LMHeadModel\"],\n"
      "  \"model_type\": \"gpt2\",\n"
      "  \"vocab_size\": %d,\n"
      "  \"n_positions\": %d,\n"
      "  \"n_ctx\": %d,\n"
      "  \"n_embd\": %d,\n"
      "  \"n_layer\": %d,\n"
      "  \"n_head\": %d,\n"
      "  \"n_inner\": null,\n"
      "  \"activation_function\": \"gelu_new\",\n"
      "  \"layer_norm_epsilon\": %g,\n"
      "  \"resid_pdrop\": 0.0,\n"
      "  \"embd_pdrop\": 0.0,\n"
      "  \"attn_pdrop\": 0.0,\n"
      "  \"initializer_range\": 0.02,\n"
      "  \"scale_attn_weights\": true,\n"
      "  \"scale_attn_by_inverse_layer_idx\": false,\n"
      "  \"reorder_and_upcast_attn\": false,\n"
      "  \"tie_word_embeddings\": true,\n"
      "  \"use_cache\": true,\n"
      "  \"bos_token_id\": %d,\n"
      "  \"eos_token_id\": %d,\n"
      "  \"torch_dtype\": \"float32\"\n"
      "}\n",
      c.vocab_size, c.max_seq_len, c.max_seq_len, c.channels, c.num_layers, c.num_heads,
      kLayerNormEps, eot, eot);
  write_file_atomically(dir + "/config.json", [&](FILE* f) {
    return fwrite(config.data(), 1, config.size(), f) == config.size();
  });
}

bool is_hf_model_path(const std::string& path) {
  const std::string ext = ".safetensors";
  return is_directory(path) ||
         (path.size() > ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0);
}

void load_hf_gpt2(const std::string& path, GPTConfig& c, std::vector<float>& params) {
  const bool dir = is_directory(path);
  const std::string file = dir ? path + "/model.safetensors" : path;
  CHECK(file_exists(file), "'%s' holds no model.safetensors; give a directory written by "
        "`flashgpt export --format hf` (or a Hugging Face GPT-2) or a .safetensors file",
        path.c_str());
  const SafetensorsFile st = read_safetensors(file);
  // The tensors may carry GPT2LMHeadModel's "transformer." prefix or not (GPT2Model, the Hub).
  const std::string prefix = st.tensors.count("transformer.wte.weight") ? "transformer." : "";
  std::set<std::string> used;  // every tensor must be one of the model's (checked at the end)
  auto need = [&](const std::string& name) -> const SafetensorsFile::Entry& {
    used.insert(prefix + name);
    auto it = st.tensors.find(prefix + name);
    CHECK(it != st.tensors.end(), "'%s' is not a GPT-2 model: it has no tensor '%s%s'",
          file.c_str(), prefix.c_str(), name.c_str());
    return it->second;
  };
  const auto& wte = need("wte.weight");
  const auto& wpe = need("wpe.weight");
  CHECK(wte.shape.size() == 2 && wpe.shape.size() == 2 && wte.shape[1] == wpe.shape[1],
        "'%s': wte and wpe are not (V, C) and (maxT, C) matrices", file.c_str());
  // The shape: config.json (in the directory or beside the file), else our export's metadata.
  const std::string cfg_path = (dir ? path : dir_of(path)) + "/config.json";
  const bool have_cfg = file_exists(cfg_path);
  auto meta_head = st.metadata.find("n_head");  // our export's
  int n_head = 0, n_layer = 0;
  if (have_cfg) {
    const Json cfg = parse_json(read_file_bytes(cfg_path, "config.json"), cfg_path);
    CHECK(cfg.kind == Json::Object, "%s is not a JSON object", cfg_path.c_str());
    const Json* type = cfg.find("model_type");
    CHECK(!type || (type->kind == Json::String && type->str == "gpt2"), "%s: model_type '%s' is "
          "not gpt2; flashgpt reads GPT-2 models only", cfg_path.c_str(), type ? type->str.c_str() : "");
    n_head = config_int(cfg, "n_head", cfg_path, 1);
    n_layer = config_int(cfg, "n_layer", cfg_path, 1);
    CHECK(meta_head == st.metadata.end() || meta_head->second == std::to_string(n_head),
          "%s: n_head %d disagrees with the %s heads that '%s' was exported with; fix config.json",
          cfg_path.c_str(), n_head, meta_head->second.c_str(), file.c_str());
    CHECK(config_int(cfg, "n_embd", cfg_path, 1) == wte.shape[1] &&
              config_int(cfg, "vocab_size", cfg_path, 2) == wte.shape[0] &&
              config_int(cfg, "n_positions", cfg_path, 1) == wpe.shape[0],
          "%s: n_embd / vocab_size / n_positions disagree with the tensors in '%s' (wte %lld x "
          "%lld, wpe %lld rows)", cfg_path.c_str(), file.c_str(), (long long)wte.shape[0],
          (long long)wte.shape[1], (long long)wpe.shape[0]);
    const Json* act = cfg.find("activation_function");
    CHECK(!act || (act->kind == Json::String &&
                   (act->str == "gelu_new" || act->str == "gelu_pytorch_tanh")),
          "%s: activation_function '%s' is not GPT-2's tanh GELU (gelu_new), which flashgpt "
          "computes", cfg_path.c_str(), act ? act->str.c_str() : "");
    const Json* eps = cfg.find("layer_norm_epsilon");
    CHECK(!eps || (eps->kind == Json::Number && std::fabs(eps->number - kLayerNormEps) < 1e-12),
          "%s: layer_norm_epsilon %g is not flashgpt's 1e-5", cfg_path.c_str(), eps ? eps->number : 0.0);
    const Json* inner = cfg.find("n_inner");
    CHECK(!inner || inner->kind == Json::Null ||
              (inner->kind == Json::Number && inner->number == 4.0 * wte.shape[1]),
          "%s: n_inner is not 4 x n_embd, the MLP width flashgpt uses", cfg_path.c_str());
    for (const char* off : {"add_cross_attention", "scale_attn_by_inverse_layer_idx"}) {
      const Json* v = cfg.find(off);
      CHECK(!v || v->kind != Json::Bool || !v->boolean, "%s: %s is true; flashgpt's GPT-2 does not "
            "do that", cfg_path.c_str(), off);
    }
    const Json* scale = cfg.find("scale_attn_weights");
    CHECK(!scale || scale->kind != Json::Bool || scale->boolean, "%s: scale_attn_weights is false; "
          "flashgpt scales attention by 1/sqrt(head size)", cfg_path.c_str());
  } else {
    CHECK(meta_head != st.metadata.end(), "'%s' has no config.json beside it, so its number of "
          "heads is unknown; put the model's config.json next to it", file.c_str());
    n_head = std::atoi(meta_head->second.c_str());
    while (st.tensors.count(prefix + flashgpt::strformat("h.%d.ln_1.weight", n_layer))) n_layer++;
  }
  c = GPTConfig{};
  c.vocab_size = (int)wte.shape[0];
  c.padded_vocab_size = pad_vocab(c.vocab_size);
  c.channels = (int)wte.shape[1];
  c.max_seq_len = (int)wpe.shape[0];
  c.num_layers = n_layer;
  c.num_heads = c.num_kv_heads = n_head;
  CHECK(n_head >= 1 && c.channels % n_head == 0, "'%s': %d heads do not divide n_embd %d",
        file.c_str(), n_head, c.channels);
  validate_config(c);
  const ParamLayout lay(c);
  params.assign(lay.total, 0.0f);
  // Reads prefix+name as floats of exactly `shape`, into dst (optionally transposed back).
  auto read = [&](const std::string& name, std::vector<int64_t> shape, float* dst, bool transposed) {
    const auto& e = need(name);
    CHECK(e.shape == shape, "'%s': tensor '%s%s' has the wrong shape for n_layer %d, n_head %d, "
          "n_embd %d", file.c_str(), prefix.c_str(), name.c_str(), c.num_layers, c.num_heads,
          c.channels);
    std::vector<float> v = st.to_float(prefix + name);
    if (transposed) v = transpose(v.data(), (size_t)shape[0], (size_t)shape[1]);
    std::copy(v.begin(), v.end(), dst);
  };
  const int64_t V = c.vocab_size, C = c.channels;
  read("wte.weight", {V, C}, params.data() + lay.offsets[P_WTE], false);  // rows V..Vp-1 stay 0
  read("wpe.weight", {c.max_seq_len, C}, params.data() + lay.offsets[P_WPE], false);
  for (int l = 0; l < c.num_layers; l++) {
    for (const LayerTensor& lt : kLayerTensors) {
      const auto [rows, cols] = layer_shape(c, lt.ours);
      float* dst = params.data() + lay.offsets[lt.ours] + (size_t)l * rows * cols;
      const std::string name = flashgpt::strformat("h.%d.%s", l, lt.hf);
      if (lt.transposed) read(name, {(int64_t)cols, (int64_t)rows}, dst, true);
      else read(name, {(int64_t)(rows * cols)}, dst, false);
    }
  }
  read("ln_f.weight", {C}, params.data() + lay.offsets[P_LNFW], false);
  read("ln_f.bias", {C}, params.data() + lay.offsets[P_LNFB], false);
  if (st.tensors.count("lm_head.weight")) {
    used.insert("lm_head.weight");
    const std::vector<float> head = st.to_float("lm_head.weight");
    const std::vector<float> wte_v = st.to_float(prefix + "wte.weight");
    CHECK(head == wte_v, "'%s': lm_head.weight differs from wte; flashgpt ties the output head to "
          "the token embedding and cannot load an untied GPT-2", file.c_str());
  }
  // GPT-2's causal-mask buffers (h.N.attn.bias, .masked_bias: no parameters, in older Hub
  // files) are the only other tensors a layer may hold.
  for (int l = 0; l < c.num_layers; l++)
    for (const char* mask : {"attn.bias", "attn.masked_bias"})
      used.insert(prefix + flashgpt::strformat("h.%d.%s", l, mask));
  const std::string layers_from = have_cfg ? cfg_path : "its h.N.ln_1.weight tensors";
  for (const auto& [name, e] : st.tensors)
    CHECK(used.count(name), "'%s': tensor '%s' is not part of a GPT-2 of %d layers (n_layer from "
          "%s): the tensors and that shape disagree; fix n_layer, or use the matching files",
          file.c_str(), name.c_str(), c.num_layers, layers_from.c_str());
  check_finite_params(params, c, file);
}

void load_any_model(const std::string& path, GPTConfig& c, std::vector<float>& params) {
  if (is_hf_model_path(path)) load_hf_gpt2(path, c, params);
  else load_model_file(path, c, params);
}

MaskSpec read_any_model_mask(const std::string& path) {
  return is_hf_model_path(path) ? MaskSpec{} : read_model_mask(path);
}
