// memory_plan — every device buffer of the CUDA model (model/gpt_cuda.cu), computed on the
// host from the model's shape alone. The CUDA model carves its single allocation from this
// plan, so what it prints, what `flashgpt profile` predicts and what `--plan-only` prints on a
// machine without a GPU are the same numbers.
//
// Categories (MemoryPlan.lines, in allocation order):
//   parameters        floatX weights + fp32 master copy                     P (es + 4)
//   gradients         fp32                                                  4P
//   optimizer         AdamW m, v fp32                                       8P (ZeRO-1: its shard)
//   activations       what the backward reads, per recompute mode (N = B*T, es = floatX bytes):
//                       none:  per layer ln1, atty, residual2, ln2, residual3 (N*C each),
//                              qkv (N*QKV), fch, fch_gelu (N*4C each), 4 LayerNorm stats (N fp32)
//                       gelu:  as none, but fch_gelu is one (N, 4C) buffer recomputed in
//                              backward from the saved pre-GELU fch
//                       layer: per layer only residual3 (the next block's input); everything
//                              else one layer deep, the block's forward re-run in backward
//                     plus encoded, lnf (N*C), lnf stats, token ids
//   attention saved   the backend's saved state, L layers deep (one with --recompute layer)
//   attention scratch the backend's scratch
//   logits            one classifier chunk (rows x Vp floatX) + losses, the lm-head dweight
//                     partial (Vp*C fp32) and one row for logits_at
//   backward scratch  dresidual, dl_btc (N*C), dl_bt4c (N*max(4C, QKV)), reduction scratch
//   KV cache          L * kv_cache * 2 * NKV * HS floatX + decode scratch (only when
//                     ModelOptions.kv_cache > 0); per layer K (kv_cache, NKV, HS) then V
//   RoPE table        kv/T positions x HS/2 x (cos, sin) fp32 (RoPE models only)
//   cuBLASLt workspace
// Each buffer is rounded up to 256 bytes. Not in the plan: the CUDA context, cuBLAS handles
// and library code (the measured peak counts them; they are tens of MiB).
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "model/model.h"

struct MemoryPlanInputs {
  ModelOptions opt;               // config, B, T, attn, recompute, classifier_chunk, kv_cache
  size_t es = 2;                  // bytes per floatX (2 for bf16, 4 for the FP32 build)
  size_t params_alloc = 0;        // parameter elements allocated (ZeRO padding); 0 = layout total
  size_t opt_size = 0;            // AdamW m (and v) elements; 0 = layout total
  size_t kernel_scratch = 0;      // shared reduction scratch (layernorm/matmul/encoder/norm)
  size_t workspace = 0;           // cuBLASLt workspace
  size_t decode_scratch = 0;      // attention_decode's split-K partials (with a KV cache)
};

// Byte offsets of each buffer inside the one allocation, and the category lines.
struct MemoryPlan {
  size_t params, master, grads, m, v;
  size_t encoded, ln1, ln1_mean, ln1_rstd, qkv, atty, residual2, ln2, ln2_mean, ln2_rstd, fch,
      fch_gelu, residual3, lnf, lnf_mean, lnf_rstd, inputs, targets;
  size_t att_saved, att_saved_per_layer, att_scratch, att_scratch_bytes;
  size_t logits, losses, loss_mean, logits_row, dwte_chunk;
  size_t dresidual, dl_btc, dl_bt4c, kscratch, norm;
  size_t kv_cache, kv_per_layer, decode_scratch, rope_table, rope_rows;
  size_t workspace;
  // Layers deep each per-layer buffer is (L, or 1 when recomputed), and the classifier chunk.
  int layers_kept = 0, fch_gelu_layers = 0, chunk_rows = 0;
  size_t total = 0;
  std::vector<MemoryLine> lines;
};

// Throws (naming --recompute, --attn) on a bad mode or backend.
MemoryPlan plan_memory(const MemoryPlanInputs& in);
// The kernel scratch and workspace sizes of the CUDA build's kernels (asks CUB, which needs a
// GPU); without a GPU, and in a CPU-only build, memory_plan_inputs_host().
MemoryPlanInputs memory_plan_inputs(const ModelOptions& opt);
// Host-only estimate of the same (touches no GPU: --plan-only): the same formulas, with CUB's
// sort temporary estimated at 8 bytes per token (a few MiB; under 1% of any plan).
MemoryPlanInputs memory_plan_inputs_host(const ModelOptions& opt);
