// test_memory_plan.cpp — the CUDA model's buffer table summed on the host (model/memory_plan.h):
// lines, offsets, what each recompute mode keeps, the optional lines, the kernels' scratch from
// their CUDA-free headers, guards, sizes past 2^64, and parsing --recompute. No GPU needed: the
// plan is host code.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>

#include "kernels/attention/backends.h"
#include "kernels/encoder.h"
#include "kernels/global_norm.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "model/config.h"
#include "model/layout.h"
#include "model/memory_plan.h"
#include "test_helpers.h"

namespace {

ModelOptions d12(int B, int T, const std::string& attn = "flash") {
  ModelOptions o;
  o.config = gpt_preset("d12", 50257, T);
  o.config.rope = 1;
  o.B = B;
  o.T = T;
  o.attn = attn;
  return o;
}

std::map<std::string, size_t> lines(const MemoryPlan& p) {
  std::map<std::string, size_t> m;
  for (const MemoryLine& l : p.lines) m[l.what] = l.bytes;
  return m;
}

}  // namespace

// Every buffer of the table has its place: 256-aligned, in table order, not overlapping, and
// the lines (one per category, in order) add up to the total.
TEST(MemoryPlan, BuffersTileTheAllocation) {
  for (const char* attn : {"flash", "naive"}) {
    const MemoryPlan p = plan_memory(memory_plan_inputs_host(d12(2, 1024, attn)));
    size_t end = 0, kept = 0;
    for (const PlannedBuffer& b : p.buffers) {
      EXPECT_EQ(b.offset % 256, 0u) << b.name;
      EXPECT_GE(b.offset, end) << b.name << " overlaps the buffer before it";
      if (b.bytes) end = b.offset + b.bytes;
      if (b.kept) kept += (b.bytes + 255) / 256 * 256;
    }
    EXPECT_LE(end, p.total);
    size_t sum = 0;
    for (const MemoryLine& l : p.lines) sum += l.bytes;
    EXPECT_EQ(sum, p.total) << attn;
    EXPECT_EQ(kept, p.kept_bytes) << attn;
    const std::vector<std::string> want = {"parameters", "gradients", "optimizer", "activations",
                                           "attention saved", "attention scratch", "logits",
                                           "backward scratch", "RoPE table", "cuBLASLt workspace"};
    ASSERT_EQ(p.lines.size(), want.size()) << attn;
    for (size_t i = 0; i < want.size(); i++) EXPECT_EQ(p.lines[i].what, want[i]);
  }
}

// The sizes come from the model's shape, the attention spec and the kernels' headers.
TEST(MemoryPlan, SizesFromTheirSources) {
  const ModelOptions o = d12(2, 1024, "naive");
  const MemoryPlanInputs in = memory_plan_inputs_host(o);
  const MemoryPlan p = plan_memory(in);
  const size_t P = ParamLayout(o.config).total, N = 2 * 1024, C = 768;
  EXPECT_EQ(p.buffers[kBuf_params].bytes, P * 2);  // bf16
  EXPECT_EQ(p.buffers[kBuf_master].bytes, P * 4);
  EXPECT_EQ(p.buffers[kBuf_m].bytes, P * 4);
  EXPECT_EQ(p.buffers[kBuf_ln1].bytes, 12 * N * C * 2);
  EXPECT_EQ(p.buffers[kBuf_qkv].bytes, 12 * N * 3 * C * 2);
  EXPECT_EQ(p.buffers[kBuf_residual3].bytes, 12 * N * C * 2);
  const AttnShape s{2, 1024, 12, 12, 64};
  EXPECT_EQ(p.buffers[kBuf_att_saved].bytes, 12 * attention_spec("naive").saved_bytes(s, 2));
  EXPECT_EQ(p.buffers[kBuf_att_scratch].bytes, attention_spec("naive").scratch_bytes(s, 2));
  EXPECT_EQ(in.kernel_scratch,
            std::max({layernorm_backward_scratch_bytes(768),
                      matmul_backward_scratch_bytes((int)N, 4 * 768),
                      encoder_backward_scratch_bytes(2, 1024, encoder_sort_temp_bytes_estimate(2, 1024)),
                      global_norm_scratch_bytes()}));
  EXPECT_EQ(p.buffers[kBuf_workspace].bytes, matmul_workspace_bytes());
  // The weight-gradient stream's own workspace and dbias partials (model/gpt_cuda_impl.cuh).
  EXPECT_EQ(p.buffers[kBuf_wgrad_workspace].bytes, matmul_workspace_bytes());
  EXPECT_EQ(p.buffers[kBuf_wgrad_scratch].bytes, matmul_backward_scratch_bytes((int)N, 4 * 768));
  EXPECT_EQ(p.buffers[kBuf_kscratch].bytes, in.kernel_scratch);
  // --tune-matmul times accumulating products into a planned copy of the widest one: the lm
  // head's d(wte), Vp x C fp32 (154 MB at d12); nothing without it.
  EXPECT_EQ(p.buffers[kBuf_tune_scratch].bytes, 0u);
  ModelOptions tuned = o;
  tuned.tune_matmul = true;
  const MemoryPlan pt = plan_memory(memory_plan_inputs_for(tuned, 2, 0));
  EXPECT_EQ(pt.buffers[kBuf_tune_scratch].bytes,
            (size_t)o.config.padded_vocab_size * C * sizeof(float));
  // The FP32 build: floatX buffers double, fp32 ones stay.
  const MemoryPlan p4 = plan_memory(memory_plan_inputs_for(o, 4, 0));
  EXPECT_EQ(p4.buffers[kBuf_ln1].bytes, 2 * p.buffers[kBuf_ln1].bytes);
  EXPECT_EQ(p4.buffers[kBuf_ln1_mean].bytes, p.buffers[kBuf_ln1_mean].bytes);
}

// none keeps every layer's activations; gelu one fch_gelu instead of L; layer-but-attn one layer
// of everything but residual3, atty and attention's saved state; layer one layer of everything
// but residual3 (and one layer of attention's saved state).
TEST(MemoryPlan, RecomputeModesKeepLess) {
  ModelOptions o = d12(4, 1024);
  const MemoryPlan none = plan_memory(memory_plan_inputs_host(o));
  o.recompute = Recompute::kGelu;
  const MemoryPlan gelu = plan_memory(memory_plan_inputs_host(o));
  o.recompute = Recompute::kLayerButAttn;
  const MemoryPlan lba = plan_memory(memory_plan_inputs_host(o));
  o.recompute = Recompute::kLayer;
  const MemoryPlan layer = plan_memory(memory_plan_inputs_host(o));
  EXPECT_GT(none.kept_bytes, gelu.kept_bytes);
  EXPECT_GT(gelu.kept_bytes, lba.kept_bytes);
  EXPECT_GT(lba.kept_bytes, layer.kept_bytes);
  // layer-but-attn: every layer's atty and LSE, one layer of the rest.
  EXPECT_EQ(lba.buffers[kBuf_atty].bytes, none.buffers[kBuf_atty].bytes);
  EXPECT_EQ(lba.buffers[kBuf_att_saved].bytes, none.buffers[kBuf_att_saved].bytes);
  EXPECT_EQ(lba.buffers[kBuf_residual3].bytes, none.buffers[kBuf_residual3].bytes);
  for (BufferId b : {kBuf_ln1, kBuf_ln1_mean, kBuf_qkv, kBuf_residual2, kBuf_ln2, kBuf_ln2_rstd,
                     kBuf_fch, kBuf_fch_gelu})
    EXPECT_EQ(lba.buffers[b].bytes, layer.buffers[b].bytes) << lba.buffers[b].name;
  EXPECT_EQ(lba.layers_kept, 1);
  EXPECT_EQ(lba.attn_layers_kept, 12);
  EXPECT_EQ(layer.attn_layers_kept, 1);
  // Per token per layer kept at d12 (usage.md's --recompute table): the block input and atty, C bf16
  // each, and the LSE, NH fp32: 2 * 768 * 2 + 12 * 4 = 3120 bytes; layer keeps 1536 of them.
  const size_t N = 4 * 1024;
  EXPECT_EQ(lba.buffers[kBuf_residual3].bytes + lba.buffers[kBuf_atty].bytes +
                lba.buffers[kBuf_att_saved].bytes,
            12 * N * 3120);
  EXPECT_EQ(lba.kept_bytes - layer.kept_bytes, 11 * N * (768 * 2 + 12 * 4));
  EXPECT_EQ(lba.total - layer.total, 11 * N * (768 * 2 + 12 * 4));
  EXPECT_EQ(none.buffers[kBuf_fch_gelu].bytes, 12 * gelu.buffers[kBuf_fch_gelu].bytes);
  EXPECT_EQ(gelu.buffers[kBuf_fch].bytes, none.buffers[kBuf_fch].bytes);
  EXPECT_EQ(none.buffers[kBuf_ln1].bytes, 12 * layer.buffers[kBuf_ln1].bytes);
  EXPECT_EQ(none.buffers[kBuf_residual3].bytes, layer.buffers[kBuf_residual3].bytes);
  EXPECT_EQ(none.buffers[kBuf_att_saved].bytes, 12 * layer.buffers[kBuf_att_saved].bytes);
  EXPECT_EQ(layer.layers_kept, 1);
  EXPECT_EQ(none.layers_kept, 12);
  o = d12(4, 1024, "fast");
  expect_error([&] { plan_memory(memory_plan_inputs_host(o)); }, "--attn 'fast'");
}

// The KV cache and the RoPE table are lines only when the model has them.
TEST(MemoryPlan, OptionalLines) {
  ModelOptions o = d12(1, 256);
  EXPECT_EQ(lines(plan_memory(memory_plan_inputs_host(o))).count("KV cache"), 0u);
  o.kv_cache = 512;
  const MemoryPlan kv = plan_memory(memory_plan_inputs_host(o));
  EXPECT_EQ(kv.buffers[kBuf_kv_cache].bytes, size_t(12) * 512 * 2 * 12 * 64 * 2);
  EXPECT_GT(kv.buffers[kBuf_decode_scratch].bytes, 0u);
  EXPECT_EQ(lines(kv)["KV cache"], (kv.buffers[kBuf_kv_cache].bytes + 255) / 256 * 256 +
                                       (kv.buffers[kBuf_decode_scratch].bytes + 255) / 256 * 256);
  EXPECT_EQ(kv.rope_rows, 256u);  // a forward's positions; decode() rotates by its own row
  EXPECT_EQ(kv.buffers[kBuf_rope_decode].count, 64u);
  o.config.rope = 0;
  EXPECT_EQ(lines(plan_memory(memory_plan_inputs_host(o))).count("RoPE table"), 0u);
}

// Context parallel: each rank's per-token buffers hold its zigzag share (the largest one, for
// a ragged T), the RoPE table keeps every position, and the ring's buffers appear with the sizes
// of context_parallel.h's formulas (K/V bf16 and dK/dV fp32 twice each, the running O fp32).
TEST(MemoryPlan, ContextParallelHoldsALocalShare) {
  ModelOptions o = d12(1, 4099);  // 4099 = 2 * 2 * 1024 + 3: chunk lengths 1024 and 1025
  const MemoryPlan one = plan_memory(memory_plan_inputs_host(o));
  EXPECT_EQ(lines(one).count("context parallel"), 0u);
  o.cp = 2;
  const MemoryPlan two = plan_memory(memory_plan_inputs_host(o));
  const size_t Tl = 2050;  // rank 0: chunks 0 (1024) and 3 (1025) (CpLayout); rank 1: 1025 + 1024
  EXPECT_EQ(plan_rows_per_sequence(o), int(Tl));
  EXPECT_EQ(two.buffers[kBuf_qkv].count, one.buffers[kBuf_qkv].count / 4099 * Tl);
  EXPECT_EQ(two.buffers[kBuf_att_saved].count, size_t(12) * ((12 * Tl * 4 + 255) / 256 * 256));
  EXPECT_EQ(two.rope_rows, 4099u);
  EXPECT_EQ(two.buffers[kBuf_cp_kv].bytes, 2 * Tl * 2 * 12 * 64 * 2);
  EXPECT_EQ(two.buffers[kBuf_cp_dkv].bytes, 3 * Tl * 2 * 12 * 64 * 4);  // own, in, out
  EXPECT_EQ(two.buffers[kBuf_cp_o].bytes, Tl * 12 * 64 * 4);
  EXPECT_GT(lines(two)["context parallel"], 0u);
  EXPECT_LT(two.total, one.total);
  o.cp = 3000;  // T < 2 cp: the layout's error names both flags
  try {
    plan_memory(memory_plan_inputs_host(o));
    ADD_FAILURE() << "no error for --cp 3000 at --seq-len 4099";
  } catch (const flashgpt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("--cp"), std::string::npos) << e.what();
  }
}

// Guards (tests of the CUDA model): every buffer's next neighbour starts at least guard_bytes
// after its end.
TEST(MemoryPlan, GuardsFollowEveryBuffer) {
  ModelOptions o = d12(1, 512);
  o.guard_bytes = 4096;
  const MemoryPlan g = plan_memory(memory_plan_inputs_host(o));
  const MemoryPlan plain = plan_memory(memory_plan_inputs_host(d12(1, 512)));
  for (size_t i = 0; i + 1 < g.buffers.size(); i++) {
    if (g.buffers[i].bytes == 0) continue;
    EXPECT_GE(g.buffers[i + 1].offset, g.buffers[i].offset + g.buffers[i].bytes + 4096)
        << g.buffers[i].name;
  }
  EXPECT_GT(g.total, plain.total);
  EXPECT_LT(g.total, plain.total + kNumBuffers * (4096 + 256));
}

// A plan past 2^64 bytes is an error naming the flags, not a wrapped-around size.
TEST(MemoryPlan, PastTwoToTheSixtyFourIsAnError) {
  expect_error([&] { plan_memory(memory_plan_inputs_host(d12(1, 2000000000, "naive"))); },
               "--seq-len");
  const MemoryPlan f = plan_memory(memory_plan_inputs_host(d12(1, 2000000000, "flash")));
  EXPECT_GT(f.total, f.buffers[kBuf_residual3].bytes);
}

// --recompute is parsed once (model/recompute.h): every mode from its own name, anything else
// one line naming the flag and listing the modes.
TEST(Recompute, ParsedFromItsNames) {
  for (Recompute r : {Recompute::kNone, Recompute::kGelu, Recompute::kLayerButAttn,
                      Recompute::kLayer})
    EXPECT_EQ(parse_recompute(recompute_name(r)), r) << recompute_name(r);
  const std::string msg = expect_error([] { parse_recompute("Layer"); }, "--recompute 'Layer'");
  EXPECT_NE(msg.find(recompute_names_list()), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  expect_error([] { parse_recompute(""); }, "--recompute");
}
