// gpt_cpu — the CPU reference GPT-2: plain loops over the kernels/*_ref ops, fp32 (or double,
// for finite-difference checks of the whole model). It is the oracle for the CUDA model.
//
// Forward (llm.c's train_gpt2.c order), N = B*T rows:
//   x = wte[inp] + wpe[t]          (RoPE models: x = wte[inp])   encoder
//   for each layer l:
//     qkv = ln1(x) @ qkvw^T + qkvb                               (N, (NH+2NKV)*HS)
//     RoPE models: rotate Q and K heads of qkv in place (kernels/rope.h)
//     x2  = x + (attention(qkv) @ attprojw^T + attprojb)         residual2
//     x   = x2 + (gelu(ln2(x2) @ fcw^T + fcb) @ fcprojw^T + fcprojb)   residual3
//   logits = lnf(x) @ wte^T                                      (N, Vp), tied embedding
//   loss = mean cross-entropy over the V real tokens
// Backward walks the same list in reverse with one residual-stream gradient buffer.
// Recompute (ModelOptions.recompute, model/recompute.h) as the CUDA model does it: every layer's
// buffers exist here, but after a forward with targets what the mode does not keep is overwritten
// with NaN (forget_unkept; all layers but the last, as the CUDA model's one-layer buffers hold
// the last), and the backward recomputes it before each layer (recompute): a value the backward
// uses without recomputing makes the gradients NaN. Same ops on the same inputs, so the
// gradients equal those of `none` bit for bit. classifier_chunk is a CUDA-model memory choice
// (same maths; ignored here). prefill()/decode(): the KV cache path of model.h, one token at a
// time through the same ops with attention_decode_ref.
// All activations for (maxB, maxT) are one allocation, sized at construction; attention's
// saved state comes from the backend (naive: P (B,NH,T,T); flash: LSE (B,NH,T)).
// Masks (ModelOptions.mask, kernels/attention/mask.h): every layer's attention runs under the
// mask of the batch, made in forward() from its input tokens (the document mask's documents
// start at each EOT, which belongs to the document it starts) and kept for the backward and
// recompute. Positions stay the window's: a document that starts at row p sees position
// embeddings (or RoPE angles) p, p+1, ..., as the GPU model does; only the attention mask
// changes. prefill()/decode() run under the mask too: a sliding window keeps a ring of the
// last W positions, a generated end-of-text token starts a new document (model/kv_cache.h).
#pragma once
#include <memory>
#include <vector>

#include "kernels/attention/attention_ref.h"
#include "model/kv_cache.h"
#include "model/layout.h"
#include "model/model.h"

template <typename real>
class GptCpu : public Model {
 public:
  explicit GptCpu(const ModelOptions& opt);

  const GPTConfig& config() const override { return cfg_; }
  const char* device_name() const override { return "cpu"; }
  const char* attention_name() const override { return attn_name_.c_str(); }
  size_t num_parameters() const override { return layout_.total; }
  float forward(const int* inputs, const int* targets, int B, int T) override;
  void backward(float loss_scale) override;
  void zero_grad() override;
  float grad_norm() override;
  float optimizer_step(const AdamWHyper& h, float clip, int step) override;
  void logits_at(int t, float* out) override;
  void get_params(std::vector<float>& out) const override;
  void set_params(const std::vector<float>& in) override;
  void get_adam_state(std::vector<float>& m, std::vector<float>& v) const override;
  void set_adam_state(const std::vector<float>& m, const std::vector<float>& v) override;
  std::vector<MemoryLine> memory_plan() const override;
  size_t peak_memory_bytes() const override;
  void prefill(const int* tokens, int n, float* logits) override;
  void decode(int token, float* logits) override;
  int cached_positions() const override { return kv_.positions(); }
  bool can_decode() const override { return kv_.can_decode(); }

  // Public for the finite-difference tests.
  std::vector<real> params, grads;  // (layout.total) in llm.c order
  real* param(int i) { return params.data() + layout_.offsets[i]; }
  real* grad(int i) { return grads.data() + layout_.offsets[i]; }
  const ParamLayout& layout() const { return layout_; }
  double last_loss() const { return mean_loss_; }
  // Layer l's slices of the activation buffers (the recompute tests look at what is forgotten).
  struct LayerActs {
    real* residual;  // (N, C) block input: encoded or residual3[l-1]
    real *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *att_saved, *attproj, *residual2, *ln2,
        *ln2_mean, *ln2_rstd, *fch, *fch_gelu, *fcproj, *residual3;
  };
  LayerActs acts(int l) const;

 private:
  GPTConfig cfg_;
  ParamLayout layout_;
  int maxB_, maxT_;
  std::unique_ptr<CpuAttention<real>> attn_;
  std::string attn_name_;  // ModelOptions.attn, "auto" resolved to "flash"
  std::vector<real> m_, v_;  // AdamW moments
  // Activations (one allocation, carved into the views below; sizes for maxB x maxT).
  std::vector<real> acts_;
  real *encoded_, *ln1_, *ln1_mean_, *ln1_rstd_, *qkv_, *atty_, *att_saved_, *attproj_,
      *residual2_, *ln2_, *ln2_mean_, *ln2_rstd_, *fch_, *fch_gelu_, *fcproj_, *residual3_,
      *lnf_, *lnf_mean_, *lnf_rstd_, *logits_, *losses_;
  size_t att_saved_per_layer_ = 0;
  // Backward scratch (one allocation): residual-stream gradient and per-layer temporaries.
  std::vector<real> dacts_;
  real *dresidual_, *dln_, *dqkv_, *datty_, *dfch_, *dfch_gelu_, *dlogits_;
  std::vector<int> inputs_, targets_;
  MaskSpec mask_spec_;
  std::vector<int> doc_start_;  // (B, T) of the last forward's inputs (document mask)
  AttnMask mask_;               // the last forward's mask (into doc_start_)
  // KV cache (ModelOptions.kv_cache rows, model/kv_cache.h says which position is where): per
  // layer K (slots, NKV, HS) then V, after RoPE.
  std::vector<real> kv_cache_;
  KvCache kv_;
  real* k_cache(int l) { return kv_cache_.data() + (size_t)l * 2 * kv_.slots() * kv_row(); }
  real* v_cache(int l) { return k_cache(l) + (size_t)kv_.slots() * kv_row(); }
  void store_kv(int l, const real* qkv, int p0, int n);
  size_t kv_row() const { return (size_t)cfg_.num_kv_heads * cfg_.head_size(); }
  int B_ = 0, T_ = 0;
  bool have_targets_ = false;
  double mean_loss_ = 0;
  RecomputeDepths depth_;  // layers of each kind the recompute mode keeps (model/recompute.h)
  AttnShape shape(int B, int T) const;
  real* layer(real* base, int l, size_t per_layer) const { return base + (size_t)l * per_layer; }

  // One block's forward in three parts, so that the backward can recompute a part alone:
  void block_qkv(int l, int B, int T);        // ln1 -> qkv -> RoPE
  void block_attention(int l, int B, int T);  // atty and attention's saved state
  // residual2 = residual + attproj(atty) -> ln2 -> fc -> GELU [-> residual3 = residual2 + fcproj]
  void block_after_attention(int l, int B, int T, bool write_residual3);
  void forget_unkept(int B, int T);
  void recompute(int l, int B, int T);
};
