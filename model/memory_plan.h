// memory_plan — every device buffer of the CUDA model (model/gpt_cuda.cu) in one table,
// FLASHGPT_MODEL_BUFFERS below: one line per buffer with its name, category, element type,
// whether the backward reads what the forward left in it, and its element count. The plan
// sums the table on the host from the model's shape alone (plan_memory), and the CUDA model
// carves its single allocation by the same table (one typed pointer per line), so what it
// prints, what `flashgpt profile` predicts and what `--plan-only` prints on a machine without
// a GPU are the same numbers, and a buffer is added in one place.
//
// What each recompute mode keeps (model/recompute.h; N = B*T rows, K = layers of activations
// kept, KA = layers of the attention output and attention's saved state kept, KG = layers of
// fch_gelu kept; residual3, each block's output and the next block's input, is always L deep):
//   none:           K = KA = KG = L: per layer ln1, atty, residual2, ln2, residual3 (N*C each),
//                   qkv (N*QKV), fch, fch_gelu (N*4C each), 4 LayerNorm statistics (N fp32),
//                   attention's saved state
//   gelu:           K = KA = L, KG = 1: fch_gelu is recomputed in the backward from the saved fch
//   layer-but-attn: KA = L, K = KG = 1: per layer residual3, atty and attention's saved state
//                   (LSE); the rest one layer deep, recomputed in the backward around attention
//   layer:          K = KA = KG = 1: per layer only residual3; everything else one layer deep,
//                   the block's forward re-run in the backward
// Attention's saved sizes come from the backend's spec (kernels/attention/backends.h), the
// kernels' scratch sizes from their CUDA-free headers.
// Context parallel (--cp > 1): every per-token buffer holds this rank's rows (B x Tl, Tl the
// largest zigzag share, about T/cp), plus the ring's K/V blocks, dK/dV accumulators and running
// O ("context parallel" lines; model/ring_attention.cuh). The document mask's starts
// (doc_start) cover the whole sequence on every rank: the ring reads them at global positions.
// The RoPE table covers the positions of a forward (T); decode() rotates its one position by a
// row made on the host (rope_decode), so a ring KV cache (model/kv_cache.h) decodes past it.
// Each buffer is rounded up to 256 bytes. Not in the plan: the CUDA context, cuBLAS handles,
// library code and the instantiated CUDA graphs of the forward and the backward (the measured
// peak counts them; tests/gpu/test_model.cu MemoryPlanMatchesMeasured: the graphs 0-34 MiB at
// d12 B 2 x T 2048 on an H100 and an H200, the whole left-out part 0.01-2.05% of the plan).
#pragma once
#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include "model/model.h"

// The dimensions the buffer counts are written in (size_t; the plan also evaluates the counts in
// double to catch a product that would pass 2^64).
template <class T>
struct BufferDimsOf {
  T P;        // parameter elements allocated (ZeRO-1 padding included)
  T S;        // AdamW m (and v) elements: P, or this rank's ZeRO-1 shard
  T L, N, C;  // layers, rows (maxB * maxT), channels
  T QKV, C4;  // qkv channels (NH + 2*NKV) * HS; max(4C, QKV)
  T Vp;       // padded vocabulary
  T K, KA, KG;  // layers of activations / of atty and attention saved / of fch_gelu kept (above)
  T chunk;    // classifier rows at once
  T att_saved, att_scratch;  // bytes: attention's saved state per layer, its scratch
  T kscratch;                // bytes: the reducing kernels' shared scratch
  T wgrad_scratch;           // bytes: the weight-gradient stream's dbias partials
  T kv;                      // KV-cache elements per layer: positions * 2 * NKV * HS, or 0
  T decode_scratch;          // bytes: attention_decode's split-K partials, or 0
  T rope;                    // RoPE table floats: positions * HS (0: learned positions)
  T rope_decode;             // RoPE floats of decode()'s one position: HS (0: none)
  T doc;                     // document starts: B * T of the whole sequence (0: no document mask)
  T workspace;               // bytes: cuBLASLt workspace
  T tune_scratch;            // bytes: --tune-matmul's timing of accumulating products, or 0
  T cp_kv, cp_dkv, cp_o;     // context parallel (--cp > 1, else 0): elements of the two K/V
                             // blocks in flight, of all dK/dV buffers, of the running O
                             // (cp_ring_elems)
};
using BufferDims = BufferDimsOf<size_t>;

// Element types: fx = floatX (bf16, or fp32 in the FP32 build), f32, f64, i32, byte.
// X(name, category, type, kept for the backward, count in BufferDims d)   shape
#define FLASHGPT_MODEL_BUFFERS(X)                                                                \
  X(params, "parameters", fx, 0, d.P)                    /* (P) llm.c order (ParamLayout) */    \
  X(master, "parameters", f32, 0, d.P)                   /* (P) fp32 master weights */          \
  X(grads, "gradients", f32, 0, d.P)                     /* (P) */                              \
  X(m, "optimizer", f32, 0, d.S)                         /* (S) AdamW first moment */           \
  X(v, "optimizer", f32, 0, d.S)                         /* (S) AdamW second moment */          \
  X(encoded, "activations", fx, 1, d.N * d.C)            /* (N, C) block 0's input */           \
  X(ln1, "activations", fx, 1, d.K * d.N * d.C)          /* (K, N, C) */                        \
  X(ln1_mean, "activations", f32, 1, d.K * d.N)          /* (K, N) */                           \
  X(ln1_rstd, "activations", f32, 1, d.K * d.N)          /* (K, N) */                           \
  X(qkv, "activations", fx, 1, d.K * d.N * d.QKV)        /* (K, N, QKV) after RoPE */           \
  X(atty, "activations", fx, 1, d.KA * d.N * d.C)        /* (KA, N, C) attention output */      \
  X(residual2, "activations", fx, 1, d.K * d.N * d.C)    /* (K, N, C) */                        \
  X(ln2, "activations", fx, 1, d.K * d.N * d.C)          /* (K, N, C) */                        \
  X(ln2_mean, "activations", f32, 1, d.K * d.N)          /* (K, N) */                           \
  X(ln2_rstd, "activations", f32, 1, d.K * d.N)          /* (K, N) */                           \
  X(fch, "activations", fx, 1, d.K * d.N * 4 * d.C)      /* (K, N, 4C) pre-GELU */              \
  X(fch_gelu, "activations", fx, 1, d.KG * d.N * 4 * d.C) /* (KG, N, 4C) */                     \
  X(residual3, "activations", fx, 1, d.L * d.N * d.C)    /* (L, N, C) block l's output */       \
  X(lnf, "activations", fx, 1, d.N * d.C)                /* (N, C) */                           \
  X(lnf_mean, "activations", f32, 1, d.N)                /* (N) */                              \
  X(lnf_rstd, "activations", f32, 1, d.N)                /* (N) */                              \
  X(inputs, "activations", i32, 1, d.N)                  /* (N) token ids */                    \
  X(doc_start, "activations", i32, 1, d.doc)             /* (B, T) mask.h's document starts */  \
  X(targets, "activations", i32, 0, d.N)                 /* (N) */                              \
  X(att_saved, "attention saved", byte, 1, d.KA * d.att_saved) /* (KA, saved per layer) */      \
  X(att_scratch, "attention scratch", byte, 0, d.att_scratch)                                   \
  X(logits, "logits", fx, 0, d.chunk * d.Vp)             /* (chunk, Vp) dlogits in place */     \
  X(losses, "logits", f32, 0, d.N)                       /* (N) */                              \
  X(loss_mean, "logits", f32, 0, 1)                      /* (1) */                              \
  X(logits_row, "logits", fx, 0, d.Vp)                   /* (Vp) logits_at() */                 \
  X(dwte_chunk, "logits", f32, 1, d.Vp * d.C)            /* (Vp, C) lm-head dW from forward */  \
  X(dresidual, "backward scratch", fx, 0, d.N * d.C)     /* (N, C) */                           \
  X(dl_btc, "backward scratch", fx, 1, d.N * d.C)        /* (N, C) d(lnf) from the forward */   \
  X(dl_bt4c, "backward scratch", fx, 0, d.N * d.C4)      /* (N, 4C), also dqkv (N, QKV) */      \
  X(kscratch, "backward scratch", byte, 0, d.kscratch)   /* reducing kernels, one at a time */  \
  X(wgrad_scratch, "backward scratch", byte, 0, d.wgrad_scratch) /* the wgrad stream's dbias */ \
  X(norm, "backward scratch", f64, 0, 1)                 /* (1) grad norm squared */            \
  X(kv_cache, "KV cache", fx, 0, d.L * d.kv)             /* (L, 2, positions, NKV, HS) */       \
  X(decode_scratch, "KV cache", byte, 0, d.decode_scratch)                                      \
  X(rope_table, "RoPE table", f32, 0, d.rope)            /* (positions, HS/2, 2) cos, sin */    \
  X(rope_decode, "RoPE table", f32, 0, d.rope_decode)    /* (HS/2, 2) decode()'s position */    \
  X(workspace, "cuBLASLt workspace", byte, 0, d.workspace)                                    \
  X(wgrad_workspace, "cuBLASLt workspace", byte, 0, d.workspace) /* the wgrad stream's */      \
  X(tune_scratch, "cuBLASLt workspace", byte, 0, d.tune_scratch) /* --tune-matmul's timing */  \
  X(cp_kv, "context parallel", fx, 0, d.cp_kv)       /* 2 x (B, Tl, 2*NKV, HS) K/V in flight */    \
  X(cp_dkv, "context parallel", f32, 0, d.cp_dkv)     /* 3 (4 at cp > 2) x (B, Tl, 2*NKV, HS) dK/dV */ \
  X(cp_o, "context parallel", f32, 0, d.cp_o)            /* (B, Tl, NH, HS) running O */

enum BufferId {
#define FLASHGPT_BUFFER_ID(name, cat, type, kept, count) kBuf_##name,
  FLASHGPT_MODEL_BUFFERS(FLASHGPT_BUFFER_ID)
#undef FLASHGPT_BUFFER_ID
  kNumBuffers
};

struct PlannedBuffer {
  const char* name;
  const char* category;
  bool kept;       // the backward reads what the forward wrote here
  size_t count;    // elements
  size_t bytes;    // count * element size (0: not allocated)
  size_t offset;   // bytes into the one allocation (256-aligned)
};

struct MemoryPlanInputs {
  ModelOptions opt;               // config, B, T, attn, recompute, classifier_chunk, kv_cache
  size_t es = 2;                  // bytes per floatX (2 for bf16, 4 for the FP32 build)
  size_t params_alloc = 0;        // parameter elements allocated (ZeRO padding); 0 = layout total
  size_t opt_size = 0;            // AdamW m (and v) elements; 0 = layout total
  size_t kernel_scratch = 0;      // shared reduction scratch (layernorm/matmul/encoder/norm)
  size_t wgrad_scratch = 0;       // the weight-gradient stream's dbias partials
  size_t workspace = 0;           // cuBLASLt workspace
  size_t tune_scratch = 0;        // --tune-matmul: where accumulating products are timed
  size_t decode_scratch = 0;      // attention_decode's split-K partials (with a KV cache)
  // Tests: this many guard bytes after every buffer (past its 256-byte rounding), which the CUDA
  // model fills with a pattern and checks (cuda_model_guard_violations): a buffer planned too
  // small for what a kernel writes shows up as a damaged guard.
  size_t guard_bytes = 0;
};

struct MemoryPlan {
  std::array<PlannedBuffer, kNumBuffers> buffers;  // the table, sized and placed
  // Derived sizes the model indexes with: layers kept (L, or 1 when recomputed) of activations,
  // of atty and attention's saved state, of fch_gelu; the classifier chunk, attention's
  // per-layer saved bytes (256-aligned) and scratch bytes, KV-cache elements per layer, RoPE
  // table rows.
  int layers_kept = 0, attn_layers_kept = 0, fch_gelu_layers = 0, chunk_rows = 0;
  size_t att_saved_per_layer = 0, att_scratch_bytes = 0, kv_per_layer = 0, rope_rows = 0;
  size_t kept_bytes = 0;  // what the backward reads from the forward (the "kept" lines)
  size_t total = 0;
  std::vector<MemoryLine> lines;  // bytes per category, table order; empty categories left out
};

// Rows of each sequence this rank holds: T, or with --cp > 1 the largest zigzag share
// (CpLayout::max_local_len): what every per-token buffer is sized by (the RoPE table keeps T).
int plan_rows_per_sequence(const ModelOptions& o);

// Throws (naming --attn) on an unknown backend, and (naming --seq-len or
// --batch) when the plan passes 2^64 bytes.
MemoryPlan plan_memory(const MemoryPlanInputs& in);

// The kernels' scratch and workspace sizes for this model, from their CUDA-free headers.
// CUB's radix-sort temporary is the one size only CUB knows: sort_temp_bytes, or its estimate
// (kernels/encoder.h) when 0.
MemoryPlanInputs memory_plan_inputs_for(const ModelOptions& opt, size_t es, size_t sort_temp_bytes);
// Touches no GPU (--plan-only, CPU builds): bf16 and the estimated sort temporary.
MemoryPlanInputs memory_plan_inputs_host(const ModelOptions& opt);
// The CUDA build with a GPU: its floatX and CUB's own number; otherwise memory_plan_inputs_host.
MemoryPlanInputs memory_plan_inputs(const ModelOptions& opt);
