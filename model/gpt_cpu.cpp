// gpt_cpu.cpp — the CPU reference model. See gpt_cpu.h for the layer list.
#include "model/gpt_cpu.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/adamw.h"
#include "kernels/classifier.h"
#include "kernels/common.h"
#include "kernels/encoder.h"
#include "kernels/gelu.h"
#include "kernels/global_norm.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/residual.h"
#include "kernels/rope.h"
#include "kernels/attention/decode.h"
#include "kernels/rng.h"

std::vector<float> gpt_init_params(const GPTConfig& c, uint64_t seed) {
  ParamLayout layout(c);
  std::vector<float> p(layout.total, 0.0f);
  const double std_base = 0.02, std_resid = 0.02 / std::sqrt(2.0 * c.num_layers);
  for (int i = 0; i < kNumParamTensors; i++) {
    float* t = p.data() + layout.offsets[i];
    size_t n = layout.sizes[i];
    if (i == P_LN1W || i == P_LN2W || i == P_LNFW) {
      std::fill(t, t + n, 1.0f);
    } else if (i == P_WTE || i == P_WPE || i == P_QKVW || i == P_ATTPROJW || i == P_FCW ||
               i == P_FCPROJW) {
      // One stream per tensor, so adding a layer does not change the other tensors' values.
      Rng rng(seed * 1000003ull + (uint64_t)i);
      double sd = (i == P_ATTPROJW || i == P_FCPROJW) ? std_resid : std_base;
      for (size_t k = 0; k < n; k++) t[k] = (float)(sd * rng.normal());
      if (i == P_WTE) {  // padded vocabulary rows are never used as tokens: keep them zero
        std::fill(t + (size_t)c.vocab_size * c.channels, t + n, 0.0f);
      }
    }  // biases stay 0
  }
  return p;
}

template <typename real>
GptCpu<real>::GptCpu(const ModelOptions& opt)
    : cfg_(opt.config), layout_(opt.config), maxB_(opt.B), maxT_(opt.T) {
  validate_config(cfg_);
  CHECK(maxT_ >= 1 && maxT_ <= cfg_.max_seq_len,
        "--seq-len %d is larger than the model's maximum %d; lower --seq-len", maxT_,
        cfg_.max_seq_len);
  CHECK(maxB_ >= 1, "--batch must be at least 1 (got %d)", maxB_);
  // "auto": every CPU backend supports every shape; flash keeps the least (LSE, not P).
  attn_name_ = opt.attn == "auto" ? "flash" : opt.attn;
  attn_ = make_cpu_attention<real>(attn_name_);
  depth_ = recompute_depths(opt.recompute, cfg_.num_layers);
  validate_mask_spec(opt.mask, cfg_.vocab_size);
  mask_spec_ = opt.mask;
  CHECK(!cfg_.rope || cfg_.head_size() % 2 == 0, "RoPE needs an even head size (C / NH = %d)",
        cfg_.head_size());
  kv_ = KvCache(cfg_, mask_spec_, opt.kv_cache, maxT_);
  kv_cache_.assign((size_t)cfg_.num_layers * 2 * kv_.slots() * kv_row(), 0);
  std::vector<float> init = gpt_init_params(cfg_, opt.seed);
  params.assign(init.begin(), init.end());
  grads.assign(layout_.total, 0);
  m_.assign(layout_.total, 0);
  v_.assign(layout_.total, 0);

  const size_t L = cfg_.num_layers, C = cfg_.channels, N = (size_t)maxB_ * maxT_;
  const size_t QKV = cfg_.qkv_channels(), Vp = cfg_.padded_vocab_size;
  att_saved_per_layer_ = attn_->saved_floats(shape(maxB_, maxT_));
  struct View { real** ptr; size_t n; };
  View views[] = {{&encoded_, N * C},        {&ln1_, L * N * C},      {&ln1_mean_, L * N},
                  {&ln1_rstd_, L * N},       {&qkv_, L * N * QKV},    {&atty_, L * N * C},
                  {&att_saved_, L * att_saved_per_layer_},           {&attproj_, L * N * C},
                  {&residual2_, L * N * C},  {&ln2_, L * N * C},      {&ln2_mean_, L * N},
                  {&ln2_rstd_, L * N},       {&fch_, L * N * 4 * C},  {&fch_gelu_, L * N * 4 * C},
                  {&fcproj_, L * N * C},     {&residual3_, L * N * C}, {&lnf_, N * C},
                  {&lnf_mean_, N},           {&lnf_rstd_, N},         {&logits_, N * Vp},
                  {&losses_, N}};
  size_t total = 0;
  for (const View& v : views) total += v.n;
  acts_.assign(total, 0);
  size_t off = 0;
  for (const View& v : views) { *v.ptr = acts_.data() + off; off += v.n; }

  View dviews[] = {{&dresidual_, N * C}, {&dln_, N * C},           {&dqkv_, N * QKV},
                   {&datty_, N * C},     {&dfch_, N * 4 * C},      {&dfch_gelu_, N * 4 * C}};
  total = 0;
  for (const View& v : dviews) total += v.n;
  dacts_.assign(total, 0);
  off = 0;
  for (const View& v : dviews) { *v.ptr = dacts_.data() + off; off += v.n; }
  dlogits_ = logits_;  // the classifier writes dlogits in place over the logits
}

template <typename real>
AttnShape GptCpu<real>::shape(int B, int T) const {
  return AttnShape{B, T, cfg_.num_heads, cfg_.num_kv_heads, cfg_.head_size()};
}

template <typename real>
float GptCpu<real>::forward(const int* inputs, const int* targets, int B, int T) {
  CHECK(B >= 1 && B <= maxB_ && T >= 1 && T <= maxT_,
        "batch %dx%d exceeds the model's allocation %dx%d", B, T, maxB_, maxT_);
  const int C = cfg_.channels, L = cfg_.num_layers, V = cfg_.vocab_size,
            Vp = cfg_.padded_vocab_size;
  const int N = B * T;
  for (int i = 0; i < N; i++)
    CHECK(inputs[i] >= 0 && inputs[i] < V, "token id %d at position %d is outside the vocabulary "
          "(%d); the data does not match the model's tokenizer", inputs[i], i, V);
  inputs_.assign(inputs, inputs + N);
  have_targets_ = targets != nullptr;
  if (have_targets_) {
    for (int i = 0; i < N; i++)
      CHECK(targets[i] >= 0 && targets[i] < V, "target id %d is outside the vocabulary (%d)",
            targets[i], V);
    targets_.assign(targets, targets + N);
  }
  B_ = B;
  T_ = T;
  mask_ = batch_mask(mask_spec_, inputs, B, T, V, doc_start_);

  encoder_forward_ref(encoded_, inputs, param(P_WTE), cfg_.rope ? (real*)nullptr : param(P_WPE), B,
                      T, C);
  for (int l = 0; l < L; l++) {
    block_qkv(l, B, T);
    block_attention(l, B, T);
    block_after_attention(l, B, T, true);
  }
  layernorm_forward_ref(lnf_, lnf_mean_, lnf_rstd_, acts(L - 1).residual3, param(P_LNFW),
                        param(P_LNFB), N, C);
  matmul_forward_ref(logits_, lnf_, param(P_WTE), (const real*)nullptr, N, C, Vp);
  if (!have_targets_) return 0.0f;
  classifier_ref(losses_, (real*)nullptr, logits_, targets, (real)0, N, V, Vp);
  double sum = 0;
  for (int i = 0; i < N; i++) sum += losses_[i];
  mean_loss_ = sum / N;
  forget_unkept(B, T);
  return (float)mean_loss_;
}

// Layer l's slices of the activation buffers.
template <typename real>
typename GptCpu<real>::LayerActs GptCpu<real>::acts(int l) const {
  const size_t NC = (size_t)maxB_ * maxT_ * cfg_.channels, Nrows = (size_t)maxB_ * maxT_;
  LayerActs a;
  a.residual = l == 0 ? encoded_ : layer(residual3_, l - 1, NC);
  a.ln1 = layer(ln1_, l, NC);
  a.ln1_mean = layer(ln1_mean_, l, Nrows);
  a.ln1_rstd = layer(ln1_rstd_, l, Nrows);
  a.qkv = layer(qkv_, l, Nrows * cfg_.qkv_channels());
  a.atty = layer(atty_, l, NC);
  a.att_saved = layer(att_saved_, l, att_saved_per_layer_);
  a.attproj = layer(attproj_, l, NC);
  a.residual2 = layer(residual2_, l, NC);
  a.ln2 = layer(ln2_, l, NC);
  a.ln2_mean = layer(ln2_mean_, l, Nrows);
  a.ln2_rstd = layer(ln2_rstd_, l, Nrows);
  a.fch = layer(fch_, l, 4 * NC);
  a.fch_gelu = layer(fch_gelu_, l, 4 * NC);
  a.fcproj = layer(fcproj_, l, NC);
  a.residual3 = layer(residual3_, l, NC);
  return a;
}

// ln1 -> qkv -> RoPE on Q and K.
template <typename real>
void GptCpu<real>::block_qkv(int l, int B, int T) {
  const int C = cfg_.channels, QKV = cfg_.qkv_channels(), N = B * T;
  const LayerActs a = acts(l);
  layernorm_forward_ref(a.ln1, a.ln1_mean, a.ln1_rstd, a.residual, param(P_LN1W) + l * C,
                        param(P_LN1B) + l * C, N, C);
  matmul_forward_ref(a.qkv, a.ln1, param(P_QKVW) + (size_t)l * QKV * C, param(P_QKVB) + l * QKV,
                     N, C, QKV);
  if (cfg_.rope)
    rope_forward_ref(a.qkv, B, T, cfg_.num_heads, cfg_.num_kv_heads, cfg_.head_size(), 0,
                     cfg_.rope_theta);
}

template <typename real>
void GptCpu<real>::block_attention(int l, int B, int T) {
  const LayerActs a = acts(l);
  attn_->forward(a.atty, a.att_saved, a.qkv, shape(B, T), mask_);
}

// residual2 = residual + attproj(atty) -> ln2 -> fc -> GELU, then (write_residual3) the block's
// output residual3 = residual2 + fcproj(fch_gelu).
template <typename real>
void GptCpu<real>::block_after_attention(int l, int B, int T, bool write_residual3) {
  const int C = cfg_.channels, N = B * T;
  const LayerActs a = acts(l);
  matmul_forward_ref(a.attproj, a.atty, param(P_ATTPROJW) + (size_t)l * C * C,
                     param(P_ATTPROJB) + l * C, N, C, C);
  residual_forward_ref(a.residual2, a.residual, a.attproj, (size_t)N * C);
  layernorm_forward_ref(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, param(P_LN2W) + l * C,
                        param(P_LN2B) + l * C, N, C);
  matmul_forward_ref(a.fch, a.ln2, param(P_FCW) + (size_t)l * 4 * C * C, param(P_FCB) + l * 4 * C,
                     N, C, 4 * C);
  gelu_forward_ref(a.fch_gelu, a.fch, (size_t)N * 4 * C);
  if (!write_residual3) return;
  matmul_forward_ref(a.fcproj, a.fch_gelu, param(P_FCPROJW) + (size_t)l * C * 4 * C,
                     param(P_FCPROJB) + l * C, N, 4 * C, C);
  residual_forward_ref(a.residual3, a.residual2, a.fcproj, (size_t)N * C);
}

// The recompute mode's memory, simulated: what the CUDA model holds one layer deep (recompute.h:
// depth 1 of L) is overwritten with NaN in every layer but the last, whose values the CUDA
// model's one-layer buffers still hold after the forward. A backward that used a value it did not
// recompute gives NaN gradients.
template <typename real>
void GptCpu<real>::forget_unkept(int B, int T) {
  const int L = cfg_.num_layers;
  const size_t N = (size_t)B * T, C = cfg_.channels, QKV = cfg_.qkv_channels();
  const real nan = std::numeric_limits<real>::quiet_NaN();
  auto forget = [&](real* p, size_t n) { std::fill(p, p + n, nan); };
  for (int l = 0; l < L - 1; l++) {
    const LayerActs a = acts(l);
    if (depth_.acts < L) {
      for (real* p : {a.ln1, a.attproj, a.residual2, a.ln2, a.fcproj}) forget(p, N * C);
      for (real* p : {a.ln1_mean, a.ln1_rstd, a.ln2_mean, a.ln2_rstd}) forget(p, N);
      forget(a.qkv, N * QKV);
      forget(a.fch, N * 4 * C);
    }
    if (depth_.attn < L) {
      forget(a.atty, N * C);
      forget(a.att_saved, att_saved_per_layer_);
    }
    if (depth_.fch_gelu < L) forget(a.fch_gelu, N * 4 * C);
  }
}

// Before layer l's backward: remake what the mode did not keep (the last layer's is all there).
template <typename real>
void GptCpu<real>::recompute(int l, int B, int T) {
  const int L = cfg_.num_layers;
  if (l == L - 1) return;
  if (depth_.acts < L) {
    block_qkv(l, B, T);
    if (depth_.attn < L) block_attention(l, B, T);
    block_after_attention(l, B, T, false);  // residual3[l], the next block's input, is kept
  } else if (depth_.fch_gelu < L) {
    const LayerActs a = acts(l);
    gelu_forward_ref(a.fch_gelu, a.fch, (size_t)B * T * 4 * cfg_.channels);
  }
}

template <typename real>
void GptCpu<real>::backward(float loss_scale) {
  CHECK(have_targets_, "backward() needs a forward() with targets first");
  const int B = B_, T = T_, N = B * T, C = cfg_.channels, L = cfg_.num_layers,
            V = cfg_.vocab_size, Vp = cfg_.padded_vocab_size, QKV = cfg_.qkv_channels();
  const AttnShape s = shape(B, T);

  // d(loss_scale * mean loss)/dlogits, in place over the logits (so logits_at() is invalid now).
  classifier_ref(losses_, dlogits_, logits_, targets_.data(), (real)(loss_scale / N), N, V, Vp);
  matmul_backward_ref(dln_, grad(P_WTE), (real*)nullptr, dlogits_, lnf_, param(P_WTE), N, C, Vp);
  std::fill(dresidual_, dresidual_ + (size_t)N * C, (real)0);
  layernorm_backward_ref(dresidual_, grad(P_LNFW), grad(P_LNFB), dln_, acts(L - 1).residual3,
                         param(P_LNFW), lnf_mean_, lnf_rstd_, N, C);
  for (int l = L - 1; l >= 0; l--) {
    recompute(l, B, T);
    const LayerActs a = acts(l);
    // dresidual holds d(residual3[l]); residual3 = residual2 + fcproj passes it to both.
    matmul_backward_ref(dfch_gelu_, grad(P_FCPROJW) + (size_t)l * C * 4 * C, grad(P_FCPROJB) + l * C,
                        dresidual_, a.fch_gelu, param(P_FCPROJW) + (size_t)l * C * 4 * C, N, 4 * C,
                        C);
    gelu_backward_ref(dfch_, a.fch, dfch_gelu_, (size_t)N * 4 * C);
    matmul_backward_ref(dln_, grad(P_FCW) + (size_t)l * 4 * C * C, grad(P_FCB) + l * 4 * C, dfch_,
                        a.ln2, param(P_FCW) + (size_t)l * 4 * C * C, N, C, 4 * C);
    // now dresidual += ln2 path: d(residual2[l])
    layernorm_backward_ref(dresidual_, grad(P_LN2W) + l * C, grad(P_LN2B) + l * C, dln_,
                           a.residual2, param(P_LN2W) + l * C, a.ln2_mean, a.ln2_rstd, N, C);
    matmul_backward_ref(datty_, grad(P_ATTPROJW) + (size_t)l * C * C, grad(P_ATTPROJB) + l * C,
                        dresidual_, a.atty, param(P_ATTPROJW) + (size_t)l * C * C, N, C, C);
    attn_->backward(dqkv_, datty_, a.qkv, a.atty, a.att_saved, s, mask_);
    if (cfg_.rope)  // qkv holds rotated Q, K: take dQ, dK back through the rotation
      rope_backward_ref(dqkv_, B, T, cfg_.num_heads, cfg_.num_kv_heads, cfg_.head_size(), 0,
                        cfg_.rope_theta);
    matmul_backward_ref(dln_, grad(P_QKVW) + (size_t)l * QKV * C, grad(P_QKVB) + l * QKV, dqkv_,
                        a.ln1, param(P_QKVW) + (size_t)l * QKV * C, N, C, QKV);
    // dresidual += ln1 path: d(residual3[l-1]) (or d(encoded) for l = 0)
    layernorm_backward_ref(dresidual_, grad(P_LN1W) + l * C, grad(P_LN1B) + l * C, dln_,
                           a.residual, param(P_LN1W) + l * C, a.ln1_mean, a.ln1_rstd, N, C);
  }
  encoder_backward_ref(grad(P_WTE), cfg_.rope ? (real*)nullptr : grad(P_WPE), dresidual_,
                       inputs_.data(), B, T, C);
  have_targets_ = false;  // logits were overwritten by dlogits
}

template <typename real>
void GptCpu<real>::zero_grad() {
  std::fill(grads.begin(), grads.end(), (real)0);
}

template <typename real>
float GptCpu<real>::grad_norm() {
  return grad_norm_from_squared(global_norm_squared_ref(grads.data(), grads.size()));
}

template <typename real>
float GptCpu<real>::optimizer_step(const AdamWHyper& h, float clip, int step) {
  const float norm = grad_norm_from_squared(global_norm_squared_ref(grads.data(), grads.size()));
  if (!std::isfinite(norm)) return norm;
  const float grad_scale = clip_scale(norm, clip);
  for (int i = 0; i < kNumParamTensors; i++) {
    size_t off = layout_.offsets[i];
    float wd = ParamLayout::decayed(i) ? h.weight_decay : 0.0f;
    adamw_update_ref(params.data() + off, grads.data() + off, m_.data() + off, v_.data() + off,
                     layout_.sizes[i], h.lr, h.beta1, h.beta2, h.eps, wd, grad_scale, step);
  }
  return norm;
}

template <typename real>
void GptCpu<real>::logits_at(int t, float* out) {
  CHECK(t >= 0 && t < T_, "logits_at(%d) outside the last forward's length %d", t, T_);
  const real* row = logits_ + (size_t)t * cfg_.padded_vocab_size;
  for (int v = 0; v < cfg_.padded_vocab_size; v++) out[v] = (float)row[v];
}

template <typename real>
void GptCpu<real>::prefill(const int* tokens, int n, float* logits) {
  kv_.check_prefill(n);
  forward(tokens, nullptr, 1, n);  // under the model's mask
  const size_t NQKV = (size_t)maxB_ * maxT_ * cfg_.qkv_channels();
  for (int l = 0; l < cfg_.num_layers; l++) store_kv(l, layer(qkv_, l, NQKV), 0, n);
  kv_.prefilled(tokens, n);
  logits_at(n - 1, logits);
}

// One token through the same ops as forward() on a single row (buffers' row 0), attention over
// the cache.
template <typename real>
void GptCpu<real>::decode(int token, float* logits) {
  const int C = cfg_.channels, L = cfg_.num_layers, Vp = cfg_.padded_vocab_size,
            QKV = cfg_.qkv_channels(), NH = cfg_.num_heads, NKV = cfg_.num_kv_heads,
            HS = cfg_.head_size(), pos = kv_.positions();
  kv_.check_decode(token);
  kv_.decoded(token);
  const KvCache::Keys keys = kv_.visible();
  const real* wpe = cfg_.rope ? (const real*)nullptr : param(P_WPE) + (size_t)pos * C;
  encoder_forward_ref(encoded_, &token, param(P_WTE), wpe, 1, 1, C);
  real* x = encoded_;
  for (int l = 0; l < L; l++) {
    // Row 0 of layer 0's buffers, reused by every layer; the block output goes to residual3.
    real* out = layer(residual3_, l, (size_t)maxB_ * maxT_ * C);
    layernorm_forward_ref(ln1_, ln1_mean_, ln1_rstd_, x, param(P_LN1W) + l * C,
                          param(P_LN1B) + l * C, 1, C);
    matmul_forward_ref(qkv_, ln1_, param(P_QKVW) + (size_t)l * QKV * C, param(P_QKVB) + l * QKV, 1,
                       C, QKV);
    if (cfg_.rope) rope_forward_ref(qkv_, 1, 1, NH, NKV, HS, pos, cfg_.rope_theta);
    store_kv(l, qkv_, pos, 1);
    attention_decode_ring_ref(atty_, qkv_, k_cache(l), v_cache(l), keys.n, keys.first,
                              kv_.slots(), NH, NKV, HS);
    matmul_forward_ref(attproj_, atty_, param(P_ATTPROJW) + (size_t)l * C * C,
                       param(P_ATTPROJB) + l * C, 1, C, C);
    residual_forward_ref(residual2_, x, attproj_, (size_t)C);
    layernorm_forward_ref(ln2_, ln2_mean_, ln2_rstd_, residual2_, param(P_LN2W) + l * C,
                          param(P_LN2B) + l * C, 1, C);
    matmul_forward_ref(fch_, ln2_, param(P_FCW) + (size_t)l * 4 * C * C, param(P_FCB) + l * 4 * C,
                       1, C, 4 * C);
    gelu_forward_ref(fch_gelu_, fch_, (size_t)4 * C);
    matmul_forward_ref(fcproj_, fch_gelu_, param(P_FCPROJW) + (size_t)l * C * 4 * C,
                       param(P_FCPROJB) + l * C, 1, 4 * C, C);
    residual_forward_ref(out, residual2_, fcproj_, (size_t)C);
    x = out;
  }
  layernorm_forward_ref(lnf_, lnf_mean_, lnf_rstd_, x, param(P_LNFW), param(P_LNFB), 1, C);
  matmul_forward_ref(logits_, lnf_, param(P_WTE), (const real*)nullptr, 1, C, Vp);
  T_ = 1;
  have_targets_ = false;
  logits_at(0, logits);
}

// Keys and values of positions p0 .. p0+n-1 (rows 0.. of qkv, (n, QKV)) into layer l's cache,
// at the rows the cache keeps them in.
template <typename real>
void GptCpu<real>::store_kv(int l, const real* qkv, int p0, int n) {
  const int NH = cfg_.num_heads, NKV = cfg_.num_kv_heads, HS = cfg_.head_size();
  const size_t QKV = cfg_.qkv_channels();
  kv_.for_each_store(p0, n, [&](int row, int offset, int len) {
    for (int i = 0; i < len; i++) {
      const real* src = qkv + (size_t)(offset + i) * QKV;
      std::copy_n(src + (size_t)NH * HS, kv_row(), k_cache(l) + (size_t)(row + i) * kv_row());
      std::copy_n(src + (size_t)(NH + NKV) * HS, kv_row(), v_cache(l) + (size_t)(row + i) * kv_row());
    }
  });
}

template <typename real>
void GptCpu<real>::get_params(std::vector<float>& out) const {
  out.assign(params.begin(), params.end());
}

template <typename real>
void GptCpu<real>::set_params(const std::vector<float>& in) {
  CHECK(in.size() == params.size(), "parameter count %zu does not match the model's %zu",
        in.size(), params.size());
  params.assign(in.begin(), in.end());
}

template <typename real>
void GptCpu<real>::get_adam_state(std::vector<float>& m, std::vector<float>& v) const {
  m.assign(m_.begin(), m_.end());
  v.assign(v_.begin(), v_.end());
}

template <typename real>
void GptCpu<real>::set_adam_state(const std::vector<float>& m, const std::vector<float>& v) {
  CHECK(m.size() == m_.size() && v.size() == v_.size(), "optimizer state size mismatch");
  m_.assign(m.begin(), m.end());
  v_.assign(v.begin(), v.end());
}

template <typename real>
std::vector<MemoryLine> GptCpu<real>::memory_plan() const {
  const size_t sz = sizeof(real), L = cfg_.num_layers;
  return {{"parameters", params.size() * sz},
          {"gradients", grads.size() * sz},
          {"optimizer (AdamW m, v)", 2 * m_.size() * sz},
          {"activations", (acts_.size() - L * att_saved_per_layer_) * sz},
          {"attention saved", L * att_saved_per_layer_ * sz},
          {"backward scratch", dacts_.size() * sz},
          {"KV cache", kv_cache_.size() * sz}};
}

template <typename real>
size_t GptCpu<real>::peak_memory_bytes() const {
  size_t total = 0;
  for (const MemoryLine& m : memory_plan()) total += m.bytes;
  return total;
}

template class GptCpu<float>;
template class GptCpu<double>;

std::unique_ptr<Model> make_cpu_model(const ModelOptions& opt) {
  return std::make_unique<GptCpu<float>>(opt);
}
