// recompute — `--recompute`: how much of the forward's activations a model keeps for the
// backward, and what the backward recomputes instead (ModelOptions.recompute; both models).
// Parsed once where the flag is read (parse_recompute); everything else switches on the enum.
//
//   none            keeps every layer's activations
//   gelu            keeps every layer's activations but the MLP's GELU output (fch_gelu): the
//                   backward recomputes it from the kept pre-GELU fch, one layer at a time
//   layer-but-attn  keeps each block's input, its attention output atty (N, C) and attention's
//                   saved state (the LSE backends: LSE (B, NH, T) fp32; naive: P). Before a
//                   block's backward it recomputes ln1 -> qkv -> RoPE from the block input and
//                   residual2 = input + attproj(atty) -> ln2 -> fc -> GELU, and runs attention's
//                   backward on the kept output and LSE: attention's forward runs once per step.
//                   At d12 it keeps 2C bf16 + NH fp32 = 3120 bytes per token per layer (3 KB;
//                   layer keeps 1536, none 24592 + 48 of LSE). With naive the saved P is T^2 per
//                   head and dwarfs the rest: layer-but-attn saves little there (use layer).
//   layer           keeps only each block's input (the residual stream); the backward re-runs the
//                   block's forward, attention's included, before the block's backward
//
// Layers kept of each kind of activation (L; or 1: one layer's buffers, which hold the last
// layer's values after the forward and the layer being recomputed in the backward):
//                    block input  atty + attention saved  fch_gelu  the rest (ln1, qkv, residual2,
//                                                                   ln2, fch, LayerNorm statistics)
//   none                  L                L                 L        L
//   gelu                  L                L                 1        L
//   layer-but-attn        L                L                 1        1
//   layer                 L                1                 1        1
// model/memory_plan.h turns these into buffer sizes. Both models recompute exactly what is
// one layer deep here (GptCuda::recompute, GptCpu::recompute), with the forward's own kernels,
// so every mode's gradients equal none's bit for bit where attention's backward is deterministic.
#pragma once
#include <string>

// Most memory first.
enum class Recompute { kNone, kGelu, kLayerButAttn, kLayer };

// "none" | "gelu" | "layer-but-attn" | "layer"; anything else throws one line naming --recompute
// and listing these.
Recompute parse_recompute(const std::string& name);
const char* recompute_name(Recompute r);
std::string recompute_names_list();  // "none, gelu, layer-but-attn, layer"

// Layers of each kind kept (the table above) in a model of L layers.
struct RecomputeDepths {
  int acts;      // ln1, qkv, residual2, ln2, fch and the LayerNorm statistics
  int attn;      // the attention output atty and attention's saved state (LSE; naive: P)
  int fch_gelu;  // the MLP's GELU output
};
RecomputeDepths recompute_depths(Recompute r, int L);

// Attention forwards per layer in a training step: 2 where the backward re-runs attention
// (layer), else 1.
int attention_forwards_per_step(Recompute r);
