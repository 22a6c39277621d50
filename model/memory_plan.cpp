// memory_plan.cpp — see memory_plan.h.
#include "model/memory_plan.h"

#include <algorithm>

#include "kernels/attention/backends.h"
#include "kernels/common.h"
#include "model/layout.h"

namespace {

size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }
size_t align(size_t n) { return round_up(n, 256); }

}  // namespace

void validate_recompute(const std::string& mode) {
  CHECK(mode == "none" || mode == "gelu" || mode == "layer",
        "--recompute '%s' is unknown; use none, gelu or layer", mode.c_str());
}

void check_prefill(int n, int kv_cap, int maxT) {
  CHECK(kv_cap > 0, "internal: prefill() on a model made without a KV cache");
  CHECK(n >= 1 && n <= kv_cap && n <= maxT,
        "the prompt is %d tokens; this model holds at most %d (KV cache %d, --seq-len %d)", n,
        std::min(kv_cap, maxT), kv_cap, maxT);
}

void check_decode(const GPTConfig& c, int kv_cap, int kv_len, int token) {
  CHECK(kv_cap > 0 && kv_len >= 1, "internal: decode() before prefill()");
  CHECK(kv_len < kv_cap, "the KV cache is full (%d positions); start again with a shorter context",
        kv_cap);
  CHECK(c.rope || kv_len < c.max_seq_len, "position %d is past the model's learned positions "
        "(%d)", kv_len, c.max_seq_len);
  CHECK(token >= 0 && token < c.vocab_size, "token id %d is outside the vocabulary (%d)", token,
        c.vocab_size);
}

MemoryPlan plan_memory(const MemoryPlanInputs& in) {
  const ModelOptions& o = in.opt;
  const GPTConfig& cfg = o.config;
  validate_recompute(o.recompute);
  ParamLayout layout(cfg);
  const size_t L = cfg.num_layers, C = cfg.channels, N = (size_t)o.B * o.T;
  const size_t Vp = cfg.padded_vocab_size, QKV = cfg.qkv_channels(), es = in.es;
  const size_t P = in.params_alloc ? in.params_alloc : layout.total;
  const size_t S = in.opt_size ? in.opt_size : layout.total;
  const AttnShape shape{o.B, o.T, cfg.num_heads, cfg.num_kv_heads, cfg.head_size()};

  MemoryPlan p{};
  p.layers_kept = o.recompute == "layer" ? 1 : (int)L;
  p.fch_gelu_layers = o.recompute == "none" ? (int)L : 1;
  const size_t K = p.layers_kept, KG = p.fch_gelu_layers;
  p.chunk_rows = (int)std::min(N, (size_t)(o.classifier_chunk > 0 ? o.classifier_chunk
                                                                      : kDefaultClassifierChunk));
  const AttnBackendSpec& attn = attention_spec(o.attn);  // throws naming --attn
  p.att_saved_per_layer = align(attn.saved_bytes(shape, es));
  p.att_scratch_bytes = attn.scratch_bytes(shape, es);
  p.rope_rows = cfg.rope ? std::max<size_t>(o.T, o.kv_cache) : 0;

  size_t total = 0, mark = 0;
  auto take = [&](size_t bytes) {
    size_t off = total;
    total += align(bytes);
    return off;
  };
  auto line = [&](const std::string& what) {
    p.lines.push_back({what, total - mark});
    mark = total;
  };
  p.params = take(P * es);
  p.master = take(P * 4);
  line("parameters");
  p.grads = take(P * 4);
  line("gradients");
  p.m = take(S * 4);
  p.v = take(S * 4);
  line("optimizer");
  p.encoded = take(N * C * es);
  p.ln1 = take(K * N * C * es);
  p.ln1_mean = take(K * N * 4);
  p.ln1_rstd = take(K * N * 4);
  p.qkv = take(K * N * QKV * es);
  p.atty = take(K * N * C * es);
  p.residual2 = take(K * N * C * es);
  p.ln2 = take(K * N * C * es);
  p.ln2_mean = take(K * N * 4);
  p.ln2_rstd = take(K * N * 4);
  p.fch = take(K * N * 4 * C * es);
  p.fch_gelu = take(KG * N * 4 * C * es);
  p.residual3 = take(L * N * C * es);
  p.lnf = take(N * C * es);
  p.lnf_mean = take(N * 4);
  p.lnf_rstd = take(N * 4);
  p.inputs = take(N * 4);
  p.targets = take(N * 4);
  line("activations");
  p.att_saved = take(K * p.att_saved_per_layer);
  line("attention saved");
  p.att_scratch = take(p.att_scratch_bytes);
  line("attention scratch");
  p.logits = take((size_t)p.chunk_rows * Vp * es);
  p.losses = take(N * 4);
  p.loss_mean = take(4);
  p.logits_row = take(Vp * es);
  p.dwte_chunk = take(Vp * C * 4);
  line("logits");
  p.dresidual = take(N * C * es);
  p.dl_btc = take(N * C * es);
  p.dl_bt4c = take(N * std::max(4 * C, QKV) * es);
  p.kscratch = take(in.kernel_scratch);
  p.norm = take(8);
  line("backward scratch");
  if (o.kv_cache > 0) {
    p.kv_per_layer = (size_t)o.kv_cache * 2 * cfg.num_kv_heads * cfg.head_size() * es;
    p.kv_cache = take(L * p.kv_per_layer);
    p.decode_scratch = take(in.decode_scratch);
    line("KV cache");
  }
  if (cfg.rope) {
    p.rope_table = take(p.rope_rows * cfg.head_size() * 4);  // (rows, HS/2, 2) fp32
    line("RoPE table");
  }
  p.workspace = take(in.workspace);
  line("cuBLASLt workspace");
  p.total = total;
  return p;
}

// The CUDA kernels' scratch sizes without asking them (no CUDA, no GPU): the same formulas as
// kernels/layernorm.cu, matmul.cu, encoder.cu and global_norm.cu, with CUB's radix-sort
// temporary estimated as 8 bytes per token. Together they are a few MiB of a plan of GiBs.
MemoryPlanInputs memory_plan_inputs_host(const ModelOptions& opt) {
  const GPTConfig& c = opt.config;
  MemoryPlanInputs in;
  in.opt = opt;
  in.es = 2;  // the default (bf16) CUDA build
  const size_t N = (size_t)opt.B * opt.T, OC = std::max(4 * c.channels, c.qkv_channels());
  const size_t bias_blocks = std::max<size_t>(1, std::min<size_t>(256, (N + 7) / 8));
  const size_t sort = 3 * align(N * 4) + N * 8;
  in.kernel_scratch = std::max({(size_t)1024 * 2 * c.channels * 4, bias_blocks * OC * 4, sort,
                                (size_t)264 * 8});
  in.workspace = 32ull << 20;
  in.decode_scratch = 0;  // profiles and plans are for training: no KV cache
  return in;
}
