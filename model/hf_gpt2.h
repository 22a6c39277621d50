// hf_gpt2 — our GPT-2 parameters as a Hugging Face `GPT2LMHeadModel` (transformers), both ways.
//
// Export (`flashgpt export --format hf`): DIR/model.safetensors + DIR/config.json.
//   tensor (GPT2LMHeadModel name)               ours (ParamLayout)   note
//   transformer.wte.weight (V, C)               wte (Vp, C)          first V rows (see below)
//   transformer.wpe.weight (maxT, C)            wpe (maxT, C)
//   transformer.h.{l}.ln_1.weight / .bias (C)   ln1w / ln1b [l]
//   transformer.h.{l}.attn.c_attn.weight (C, 3C)  qkvw [l] (3C, C)   transposed: HF's Conv1D
//   transformer.h.{l}.attn.c_attn.bias (3C)     qkvb [l]             computes x @ W, we x @ W^T
//   transformer.h.{l}.attn.c_proj.weight (C, C) attprojw [l]         transposed
//   transformer.h.{l}.attn.c_proj.bias (C)      attprojb [l]
//   transformer.h.{l}.ln_2.weight / .bias       ln2w / ln2b [l]
//   transformer.h.{l}.mlp.c_fc.weight (C, 4C)   fcw [l] (4C, C)      transposed
//   transformer.h.{l}.mlp.c_fc.bias (4C)        fcb [l]
//   transformer.h.{l}.mlp.c_proj.weight (4C, C) fcprojw [l] (C, 4C)  transposed
//   transformer.h.{l}.mlp.c_proj.bias (C)       fcprojb [l]
//   transformer.ln_f.weight / .bias             lnfw / lnfb
//   lm_head.weight (V, C)                       wte                  the tied head, written out
//                                                                    (equal to wte)
// The qkv output order is GPT-2's: Q, K, V, each NH heads of HS. config.json: model_type gpt2,
// vocab_size = V, n_positions = n_ctx = maxT, n_embd C, n_layer L, n_head NH, n_inner null
// (4C), activation_function gelu_new (tanh GELU, ours), layer_norm_epsilon 1e-5 (ours), no
// dropout, tie_word_embeddings true, bos/eos = the tokenizer's <|endoftext|>.
// vocab_size is V, not the padded Vp: our padded rows are never a token (their logits are left
// out of the loss, and they stay zero: no gradient reaches them), while transformers would put
// them into its softmax and every loss would differ. Trimmed, HF's loss on the same tokens is
// ours to fp32 rounding (scripts/check_hf_export.py checks it with transformers).
// Models the GPT-2 class cannot express are refused: RoPE (--pos rope) and grouped-query
// attention (--kv-heads < --heads).
//
// Import (`--init DIR` or `--init FILE.safetensors`, also sample/eval --checkpoint): the same
// layout, with or without the "transformer." prefix (the Hub's gpt2 files have none), any of
// F32/F16/BF16; the shape comes from config.json (in DIR, or beside the file), else from our
// own export's metadata. An lm_head.weight that differs from wte is refused (we tie the head),
// as are configs we do not compute the same way (another activation, LayerNorm epsilon, inner
// size, cross-attention). The shape must account for every tensor: a missing one is refused
// naming it, and so is one the shape has no place for (a layer past n_layer, a tensor GPT-2
// lacks; only the causal-mask buffers h.N.attn.bias / .masked_bias of older Hub files are
// skipped), as is an n_head other than the one our export recorded. wte is padded back to Vp
// with zero rows.
// Test: build/test_cpu --gtest_filter='HfExport*'
#pragma once
#include <string>
#include <vector>

#include "kernels/attention/mask.h"
#include "model/config.h"

// model.safetensors' metadata "producer": how export recognises its own earlier output.
constexpr const char* kHfExportProducer = "flashgpt export --format hf";

// eot_token: the <|endoftext|> id for config.json (bos/eos), -1 for V-1.
void export_hf_gpt2(const std::string& dir, const GPTConfig& c, const std::vector<float>& params,
                    int eot_token = -1);
// path: a directory holding model.safetensors (+ config.json) or a .safetensors file.
void load_hf_gpt2(const std::string& path, GPTConfig& c, std::vector<float>& params);
// Whether path names a Hugging Face model (a directory, or a file ending in .safetensors).
bool is_hf_model_path(const std::string& path);
// load_hf_gpt2 or load_model_file (model/checkpoint.h), by is_hf_model_path.
void load_any_model(const std::string& path, GPTConfig& c, std::vector<float>& params);
// The mask a model was trained with: read_model_mask for our files, causal for a Hugging Face
// GPT-2 (it has no other).
MaskSpec read_any_model_mask(const std::string& path);
