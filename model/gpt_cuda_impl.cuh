// gpt_cuda_impl.cuh — the CUDA model's class, shared by its two files: gpt_cuda.cu (construction,
// memory, state in and out, generation) and gpt_cuda_step.cu (a training step's maths). Others
// reach the model through model/model.h (make_cuda_model) and model/gpt_cuda.cuh.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/adamw.cuh"
#include "kernels/attention/attention.cuh"
#include "kernels/attention/mask.cuh"
#include "model/context_parallel.h"
#include "model/ring_attention.cuh"
#include "kernels/attention/decode.cuh"
#include "kernels/classifier.cuh"
#include "kernels/cuda_common.cuh"
#include "kernels/cuda_timer.cuh"
#include "kernels/encoder.cuh"
#include "kernels/gelu.cuh"
#include "kernels/global_norm.cuh"
#include "kernels/layernorm.cuh"
#include "kernels/matmul.cuh"
#include "kernels/rope.cuh"
#include "kernels/rope.h"
#include "kernels/scale.cuh"
#include "model/grad_comm.cuh"
#include "model/kv_cache.h"
#include "model/layout.h"
#include "model/memory_plan.h"
#include "model/model.h"

namespace gpt_cuda {

inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

#if !defined(ENABLE_FP32)
inline float bf16_bits_to_float(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
#endif

// Typed pointers into the model's one allocation, one per line of FLASHGPT_MODEL_BUFFERS
// (model/memory_plan.h gives each one's shape); nullptr where the plan holds nothing.
struct DeviceBuffers {
  using fx = floatX;
  using f32 = float;
  using f64 = double;
  using i32 = int;
  using byte = char;
#define FLASHGPT_BUFFER_POINTER(name, cat, type, kept, count) type* name = nullptr;
  FLASHGPT_MODEL_BUFFERS(FLASHGPT_BUFFER_POINTER)
#undef FLASHGPT_BUFFER_POINTER

  void carve(char* base, const MemoryPlan& p) {
#define FLASHGPT_BUFFER_CARVE(name, cat, type, kept, count)                                   \
  name = p.buffers[kBuf_##name].bytes                                                        \
             ? reinterpret_cast<type*>(base + p.buffers[kBuf_##name].offset)                 \
             : nullptr;
    FLASHGPT_MODEL_BUFFERS(FLASHGPT_BUFFER_CARVE)
#undef FLASHGPT_BUFFER_CARVE
  }
};

class GptCuda : public Model {
 public:
  explicit GptCuda(const ModelOptions& opt);
  ~GptCuda() override;

  const GPTConfig& config() const override { return cfg_; }
  const char* device_name() const override { return device_name_.c_str(); }
  const char* attention_name() const override { return attn_->name(); }
  size_t num_parameters() const override { return layout_.total; }

  // A training step (gpt_cuda_step.cu); with peers, GradComm averages the gradients.
  float forward(const int* inputs, const int* targets, int B, int T) override;
  void backward(float loss_scale) override;
  void mark_last_micro_step() override { comm_->mark_last_micro_step(); }
  void reduce_grads() override { comm_->reduce_grads(); }
  void zero_grad() override;
  float grad_norm() override;
  float optimizer_step(const AdamWHyper& h, float clip, int step) override;

  // State in and out (gpt_cuda.cu); with ZeRO-1 this rank's shard of the AdamW moments.
  void get_params(std::vector<float>& out) const override;
  void set_params(const std::vector<float>& in) override;
  size_t adam_state_size() const override { return comm_->opt_size(); }
  void get_adam_state(std::vector<float>& m, std::vector<float>& v) const override;
  void set_adam_state(const std::vector<float>& m, const std::vector<float>& v) override;
  void get_grads(std::vector<float>& out) const { download(out, b_.grads, layout_.total); }

  // Measurements.
  std::vector<MemoryLine> memory_plan() const override { return plan_.lines; }
  size_t peak_memory_bytes() const override;
  double attention_ms() override;
  RingStepTimes cp_times() override { return ring_ && att_timer_ ? ring_->take_times() : RingStepTimes{}; }

  // Generation: a row of the last forward's logits, or the KV cache.
  void logits_at(int t, float* out) override;
  void prefill(const int* tokens, int n, float* logits) override;
  void decode(int token, float* logits) override;
  int cached_positions() const override { return kv_.positions(); }
  bool can_decode() const override { return kv_.can_decode(); }

  // Tests: the guard bytes after every buffer (memory_plan.h).
  std::vector<std::string> guard_violations() const;
  void write_past_end(const std::string& name, size_t bytes);
  long long graph_launches() const { return graph_launches_; }
  static constexpr unsigned char kGuardByte = 0xA5;

 private:
  GPTConfig cfg_;
  ParamLayout layout_;
  int maxB_, maxT_;
  std::string device_name_;
  std::unique_ptr<AttentionBackend> attn_;
  cudaStream_t stream_ = nullptr;
  // The backward's weight gradients (each product's dweight and dbias) run on wgrad_stream_,
  // beside the chain of input gradients on stream_ that every later layer waits for: a product
  // forks when its dout is ready (wgrad_fork: the chain's event i), and the chain waits for it
  // (wgrad_join) before it overwrites what the product reads. One event pair per product of a
  // layer. d12 B 32 x T 1024 on an H100: the step 1.4-1.7% faster, the same bits
  // (docs/notes/training-step.md).
  cudaStream_t wgrad_stream_ = nullptr;
  static constexpr int kWgradForks = 4;  // fcproj, fc, attproj, qkv
  cudaEvent_t chain_ready_[kWgradForks] = {}, wgrad_done_[kWgradForks] = {};
  void wgrad_fork(int i) {
    CUDA_CHECK(cudaEventRecord(chain_ready_[i], stream_));
    CUDA_CHECK(cudaStreamWaitEvent(wgrad_stream_, chain_ready_[i], 0));
  }
  void wgrad_done(int i) { CUDA_CHECK(cudaEventRecord(wgrad_done_[i], wgrad_stream_)); }
  void wgrad_join(int i) { CUDA_CHECK(cudaStreamWaitEvent(stream_, wgrad_done_[i], 0)); }
  cudaEvent_t inputs_copied_ = nullptr;
  cudaEvent_t norm_copied_ = nullptr;  // optimizer_step(): the norm is on the host
  std::unique_ptr<GradComm> comm_;  // multi-GPU gradient traffic (no-ops on one process)

  // Device memory: one allocation laid out by plan_memory() (model/memory_plan.h). Shapes for
  // (maxB, maxT), N = maxB*maxT; K, KA, KG = layers kept (L, or 1) of activations, of atty and
  // attention's saved state, of fch_gelu, by the recompute mode (model/recompute.h).
  MemoryPlan plan_;
  char* mem_ = nullptr;
  DeviceBuffers b_;
  size_t guard_bytes_ = 0;  // tests: checked guards after every buffer (memory_plan.h)

  // long context and generation: b_.kv_cache (L, 2, slots, NKV, HS), per layer K then V; which
  // position is in which row: model/kv_cache.h
  KvCache kv_;
  bool kv_fill_ = false;         // the running forward is a prefill: copy K, V into the cache
  // The attention mask (ModelOptions.mask): mask_ of the last forward, its doc_start in
  // b_.doc_start (B, T of the whole sequence), made once per batch and read by every layer's
  // forward, backward and recomputation.
  MaskSpec mask_spec_;
  AttnMask mask_;
  std::vector<int> host_doc_start_;  // context parallel: the starts the ring plans with
  Recompute recompute_ = Recompute::kNone;  // ModelOptions.recompute
  bool deterministic_ = false;  // ModelOptions.deterministic
  bool tune_matmul_ = false;    // ModelOptions.tune_matmul
  // ModelOptions.cuda_graphs where usable: one process, no cp, no attention timer. A forward with
  // targets and a backward each run eagerly on their first call of a shape (B, T, and the
  // backward's loss scale), so that lazy set-up (cuBLASLt's algorithm choice, --tune-matmul's
  // timing) happens outside a capture; the second call is captured and every later one of the
  // same shape replays the graph. Another shape is captured anew.
  struct CapturedCall {
    int B = 0, T = 0;
    float loss_scale = 0;
    int calls = 0;
    cudaGraphExec_t exec = nullptr;
  };
  bool cuda_graphs_ = false;
  CapturedCall fwd_graph_, bwd_graph_;
  long long graph_launches_ = 0;  // replays (and first launches) of either graph
  template <class Body>
  void run_captured(CapturedCall& g, int B, int T, float loss_scale, Body&& body);
  void drop_graph(CapturedCall& g);
  // ModelOptions.time_attention: CUDA events around every attention call
  std::unique_ptr<CudaEventTimer> att_timer_;

  size_t total_bytes_ = 0;
  size_t free_at_start_ = 0;
  mutable size_t peak_used_ = 0;

  // pinned host staging
  int* h_tokens_ = nullptr;  // (2N): inputs, targets
  float* h_rope_row_ = nullptr;  // (HS) RoPE models with a KV cache: decode()'s position
  float* h_loss_ = nullptr;  // (1)
  double* h_norm_ = nullptr; // (1)

  int B_ = 0, T_ = 0;  // of the last forward: T_ = rows per sequence held (Tl with --cp)

  // Context parallel (ModelOptions.cp > 1): this rank's zigzag chunks of every sequence. maxT_
  // and T_ count the rows held (local); cp_->T() is the sequence length. Positions (wpe, RoPE)
  // are global, attention is the ring (ring_attention.cuh), the loss is the sequence's.
  std::unique_ptr<CpLayout> cp_;
  int cp_rank_ = 0;
  DistComm* world_comm_ = nullptr;  // ModelOptions.comm: the loss's sum over the cp group
  DistComm* cp_comm_ = nullptr;     // ModelOptions.cp_comm: the ring's (aborted first on errors)
  std::unique_ptr<RingAttention> ring_;
  RingBuffers ring_bufs_;
  // Calls fn(row0, pos0, len) for each run of rows of the B x T local rows whose positions are
  // consecutive: (b*T, 0, T) per batch row, or with cp one run per chunk (global positions).
  template <class Fn>
  void for_each_run(int B, int T, Fn fn) const {
    if (cp_)
      cp_for_each_chunk(*cp_, cp_rank_, B, [&](size_t row, size_t, int pos, int len) { fn(row, pos, len); });
    else
      for (int b = 0; b < B; b++) fn((size_t)b * T, 0, T);
  }
  void encode(int B, int T);                          // encoded = wte[inp] (+ wpe at positions)
  void rope(floatX* x, bool backward, int B, int T);  // x (B, T, QKV): RoPE at positions
  bool have_targets_ = false;

  void init(const ModelOptions& opt);
  void release();
  size_t guard_end(const PlannedBuffer& pb) const;

  // Layer l's activation buffers (slot 0 of the one-layer-deep ones when recomputing).
  struct LayerActs {
    const floatX* residual;  // (N, C) block input
    floatX *ln1, *qkv, *atty, *residual2, *ln2, *fch, *fch_gelu, *residual3;
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd;
    char* att_saved;
  };
  LayerActs acts(int l) const;
  // One transformer block's forward over B x T rows. decode_pos < 0: a sequence from position
  // 0 (training, eval, prefill: attention over it; a prefill also copies its keys and values
  // into the cache). decode_pos >= 0: one token (B = T = 1) at that position, attention over
  // the KV cache. In three parts, so that the backward can recompute a part alone:
  void block_forward(int l, int B, int T, int decode_pos);
  void block_qkv(int l, int B, int T, int decode_pos);        // ln1 -> qkv -> RoPE (-> KV cache)
  void block_attention(int l, int B, int T, int decode_pos);  // atty (and attention's saved state)
  // residual2 = residual + attproj(atty) -> ln2 -> fc + GELU [-> residual3 = residual2 + fcproj]
  void block_after_attention(int l, int N, bool write_residual3);
  void recompute(int l, int B, int T);  // before layer l's backward: what the mode did not keep
  floatX* k_cache(int l) const {  // (slots, NKV, HS) of layer l, then its values
    return b_.kv_cache + (size_t)l * 2 * kv_.slots() * cfg_.num_kv_heads * cfg_.head_size();
  }
  floatX* v_cache(int l) const {
    return k_cache(l) + (size_t)kv_.slots() * cfg_.num_kv_heads * cfg_.head_size();
  }
  // The forward's batch mask from its inputs: doc_start on the device, and with --cp on the
  // host too (the ring skips the chunk pairs it empties).
  void make_mask(const int* inputs, int B, int Tseq);
  void attention_timer(bool start) {  // CUDA event before / after an attention call
    if (att_timer_) start ? att_timer_->start(stream_) : att_timer_->stop(stream_);
  }
  void logits_row(const floatX* lnf_row, float* out);  // out (Vp) = lnf_row @ wte^T
  AttnShape shape(int B, int T) const {
    return AttnShape{B, T, cfg_.num_heads, cfg_.num_kv_heads, cfg_.head_size()};
  }
  size_t maxN() const { return (size_t)maxB_ * maxT_; }
  floatX* param(int i) const { return b_.params + layout_.offsets[i]; }
  float* grad(int i) const { return b_.grads + layout_.offsets[i]; }
  void attach() const {
    matmul_init(b_.workspace, matmul_workspace_bytes(), tune_matmul_, wgrad_stream_,
                b_.wgrad_workspace, b_.tune_scratch, plan_.buffers[kBuf_tune_scratch].bytes);
  }
  void measure() const;
  void queue_grad_norm();  // the gradients' sum of squares into b_.norm, and its copy to h_norm_
  void download(std::vector<float>& out, const float* src, size_t n) const;
  void upload(float* dst, const std::vector<float>& in, size_t n, const char* what);
  void sync() const { comm_->sync(); }  // waits for stream_; with peers, watching for failure
};

}  // namespace gpt_cuda
