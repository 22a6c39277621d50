// recompute — `--recompute`: how much of the forward's activations a model keeps for the
// backward, and what the backward recomputes instead (ModelOptions.recompute; both models).
// Parsed once where the flag is read (parse_recompute); everything else switches on the enum.
//
//   none   keeps every layer's activations
//   gelu   keeps every layer's activations but the MLP's GELU output (fch_gelu): the backward
//          recomputes it from the kept pre-GELU fch, one layer at a time
//   layer  keeps only each block's input (the residual stream); the backward re-runs the
//          block's whole forward, attention's included, before the block's backward
//
// Layers kept of each kind of activation (L; or 1: one layer's buffers, which hold the last
// layer's values after the forward and the layer being recomputed in the backward):
//             block input   atty + attention saved   fch_gelu   the rest (ln1, qkv, residual2,
//                                                               ln2, fch, LayerNorm statistics)
//   none           L                  L                  L         L
//   gelu           L                  L                  1         L
//   layer          L                  1                  1         1
// model/memory_plan.h turns these into buffer sizes.
#pragma once
#include <string>

enum class Recompute { kNone, kGelu, kLayer };

// "none" | "gelu" | "layer"; anything else throws one line naming --recompute and listing these.
Recompute parse_recompute(const std::string& name);
const char* recompute_name(Recompute r);
std::string recompute_names_list();  // "none, gelu, layer"

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
