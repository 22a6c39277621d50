// memory_plan.cpp — see memory_plan.h.
#include "model/memory_plan.h"

#include <algorithm>
#include <cstdint>

#include "kernels/attention/backends.h"
#include "model/context_parallel.h"
#include "kernels/attention/decode.h"
#include "kernels/common.h"
#include "kernels/encoder.h"
#include "kernels/global_norm.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "model/layout.h"

namespace {

size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }
size_t align(size_t n) { return round_up(n, 256); }

}  // namespace

int plan_rows_per_sequence(const ModelOptions& o) {
  return o.cp > 1 ? CpLayout(o.cp, o.T).max_local_len() : o.T;  // CpLayout names --cp, --seq-len
}

MemoryPlan plan_memory(const MemoryPlanInputs& in) {
  const ModelOptions& o = in.opt;
  const GPTConfig& cfg = o.config;
  const AttnBackendSpec& attn = attention_spec(o.attn);  // throws naming --attn
  const int Tl = plan_rows_per_sequence(o);
  const AttnShape shape{o.B, Tl, cfg.num_heads, cfg.num_kv_heads, cfg.head_size()};
  const size_t L = cfg.num_layers, N = (size_t)o.B * Tl;

  MemoryPlan p{};
  const RecomputeDepths depth = recompute_depths(o.recompute, (int)L);
  p.layers_kept = depth.acts;
  p.attn_layers_kept = depth.attn;
  p.fch_gelu_layers = depth.fch_gelu;
  p.chunk_rows = (int)std::min(N, (size_t)(o.classifier_chunk > 0 ? o.classifier_chunk
                                                                      : kDefaultClassifierChunk));
  p.att_saved_per_layer = align(attn.saved_bytes(shape, in.es));
  p.att_scratch_bytes = attn.scratch_bytes(shape, in.es);
  p.kv_per_layer = (size_t)std::max(o.kv_cache, 0) * 2 * cfg.num_kv_heads * cfg.head_size();
  p.rope_rows = cfg.rope ? (size_t)o.T : 0;

  const ParamLayout layout(cfg);
  BufferDims d{};
  d.P = in.params_alloc ? in.params_alloc : layout.total;
  d.S = in.opt_size ? in.opt_size : layout.total;
  d.L = L, d.N = N, d.C = cfg.channels, d.Vp = cfg.padded_vocab_size;
  d.QKV = cfg.qkv_channels();
  d.C4 = std::max(4 * d.C, d.QKV);
  d.K = p.layers_kept, d.KA = p.attn_layers_kept, d.KG = p.fch_gelu_layers;
  d.chunk = p.chunk_rows;
  d.att_saved = p.att_saved_per_layer, d.att_scratch = p.att_scratch_bytes;
  d.kscratch = in.kernel_scratch;
  d.wgrad_scratch = in.wgrad_scratch;
  d.kv = p.kv_per_layer;
  d.decode_scratch = o.kv_cache > 0 ? in.decode_scratch : 0;
  d.rope = p.rope_rows * cfg.head_size();
  d.rope_decode = cfg.rope && o.kv_cache > 0 ? cfg.head_size() : 0;
  d.doc = o.mask.kind == MaskKind::kDocument ? (size_t)o.B * o.T : 0;
  d.workspace = in.workspace;
  d.tune_scratch = in.tune_scratch;
  if (o.cp > 1) {
    const CpRingElems e = cp_ring_elems(CpLayout(o.cp, o.T), o.B, cfg.num_heads,
                                        cfg.num_kv_heads, cfg.head_size());
    d.cp_kv = 2 * e.kv;
    d.cp_dkv = e.dkv * e.dkv_count;
    d.cp_o = e.o_run;
  }

  // The table (memory_plan.h), sized: element types by their bytes. Each count is evaluated in
  // size_t and, to catch a product past 2^64, in double.
  const BufferDimsOf<double> dd{(double)d.P,     (double)d.S,        (double)d.L,
                                (double)d.N,     (double)d.C,        (double)d.QKV,
                                (double)d.C4,    (double)d.Vp,       (double)d.K,
                                (double)d.KA,    (double)d.KG,       (double)d.chunk,
                                (double)d.att_saved, (double)d.att_scratch, (double)d.kscratch,
                                (double)d.wgrad_scratch,
                                (double)d.kv,    (double)d.decode_scratch, (double)d.rope,
                                (double)d.rope_decode, (double)d.doc,
                                (double)d.workspace, (double)d.tune_scratch,
                                (double)d.cp_kv, (double)d.cp_dkv,
                                (double)d.cp_o};
  const size_t fx = in.es, f32 = 4, f64 = 8, i32 = 4, byte = 1;
  auto too_big = [&]() {
    THROW_ERROR("the memory plan at --seq-len %d, --batch %d passes 2^64 bytes; lower --seq-len or "
                "--batch", o.T, o.B);
  };
#define FLASHGPT_PLAN_ROW(name, cat, type, kept_, count_)               \
  {                                                                     \
    auto count_of = [](const auto& d) { return count_; };               \
    if ((double)count_of(dd) * (double)type >= 1.8e19) too_big();       \
    PlannedBuffer& b = p.buffers[kBuf_##name];                          \
    b = {#name, cat, kept_ != 0, (size_t)count_of(d), 0, 0};            \
    b.bytes = b.count * type;                                           \
  }
  FLASHGPT_MODEL_BUFFERS(FLASHGPT_PLAN_ROW)
#undef FLASHGPT_PLAN_ROW

  // Placed in table order, each 256-aligned (plus the guard, for tests); one line per category.
  size_t total = 0;
  for (PlannedBuffer& b : p.buffers) {
    b.offset = total;
    if (b.bytes == 0) continue;
    const size_t end = b.bytes + in.guard_bytes;
    if (end < b.bytes || total > SIZE_MAX - align(end) || align(end) < end) too_big();
    total += align(end);
    if (b.kept) p.kept_bytes += align(end);
    if (p.lines.empty() || p.lines.back().what != b.category) p.lines.push_back({b.category, 0});
    p.lines.back().bytes += align(end);
  }
  p.total = total;
  return p;
}

MemoryPlanInputs memory_plan_inputs_for(const ModelOptions& opt, size_t es,
                                        size_t sort_temp_bytes) {
  const GPTConfig& c = opt.config;
  MemoryPlanInputs in;
  in.opt = opt;
  in.es = es;
  in.guard_bytes = opt.guard_bytes;
  const int T = plan_rows_per_sequence(opt);
  const int N = opt.B * T, OC = std::max(4 * c.channels, c.qkv_channels());
  const size_t sort = sort_temp_bytes ? sort_temp_bytes
                                      : encoder_sort_temp_bytes_estimate(opt.B, T);
  in.kernel_scratch = std::max({layernorm_backward_scratch_bytes(c.channels),
                                matmul_backward_scratch_bytes(N, OC),
                                encoder_backward_scratch_bytes(opt.B, T, sort),
                                global_norm_scratch_bytes()});
  in.wgrad_scratch = matmul_backward_scratch_bytes(N, OC);
  in.workspace = matmul_workspace_bytes();
  // The widest accumulating product: the lm head's d(wte) (Vp x C) or a layer's dweight.
  in.tune_scratch = opt.tune_matmul
                        ? matmul_tune_scratch_bytes(c.channels, std::max(c.padded_vocab_size, OC))
                        : 0;
  in.decode_scratch = opt.kv_cache > 0 ? attention_decode_scratch_bytes(
                                             opt.kv_cache, c.num_heads, c.head_size())
                                       : 0;
  return in;
}

MemoryPlanInputs memory_plan_inputs_host(const ModelOptions& opt) {
  return memory_plan_inputs_for(opt, 2, 0);  // the default (bf16) CUDA build
}
