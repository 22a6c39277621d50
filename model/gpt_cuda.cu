// gpt_cuda.cu — the CUDA GPT-2 model: the CPU reference model's maths (model/gpt_cpu.h, the
// layer list is there) on the GPU in floatX (bf16 by default) with fp32 master weights.
//
// Types: parameters floatX (one allocation, llm.c order), fp32 master copy, fp32 gradients,
// fp32 AdamW m and v. Gradients are fp32 (not bf16 as in llm.c): micro-batch accumulation and
// the small per-step updates stay exact to fp32, and the dweight GEMMs accumulate into them
// directly (cuBLASLt beta = 1, fp32 D; same speed, the output is tiny next to the operands).
// Activations floatX, LayerNorm statistics and losses fp32.
//
// Forward, N = B*T (as gpt_cpu.cpp; attention from the backend chosen by ModelOptions.attn):
//   encoded = wte[inp] + wpe   (RoPE models: wte[inp] only)         encoder_forward
//   per layer (block_forward): ln1 -> qkv (bias epilogue) -> [RoPE on Q, K in place]
//              -> attention
//              -> residual2 = residual + attproj(atty)   (bias epilogue, residual as C, beta = 1)
//              -> ln2 -> fc with GELU epilogue (stores pre-GELU fch and fch_gelu)
//              -> residual3 = residual2 + fcproj(fch_gelu)   (likewise)
//   (one rounding to floatX per fused product where the CPU model rounds nothing: fp32)
//   lnf -> chunked classifier
// Classifier (with targets), in chunks of ModelOptions.classifier_chunk rows (8192: 0.8 GB of
// logits at Vp = 50304) so that B x T x Vp logits never exist: per chunk logits = lnf @ wte^T,
// the fused classifier writes losses and dlogits for dloss = 1/N in place, and the lm head's
// backward for those rows runs at once: d(lnf) into dl_btc, d(wte) summed into an fp32
// (Vp, C) buffer. backward(loss_scale) adds loss_scale x that buffer to the wte gradient and
// scales d(lnf) (one elementwise pass each), then goes on. So the logits are made once and
// used while they are in memory (llm.c's order); the price is 154 MB for the d(wte) buffer at
// d12 and one extra rounding of d(lnf) when loss_scale is not 1. Without targets no logits are
// made at all: logits_at() computes its row from the saved lnf (one 1 x C x Vp product).
// Backward mirrors gpt_cpu.cpp: one residual-stream gradient (dresidual, floatX) accumulated
// by the LayerNorm backwards; per-layer temporaries dl_btc (N, C) and dl_bt4c (N, 4C), the
// latter reused for dqkv (RoPE: rotated back in place before the qkv product). The GELU
// backward is fused into the fcproj dinp product (DGELU epilogue). Bias gradients come from a
// deterministic reduction kernel (matmul.cuh).
// Recompute (ModelOptions.recompute): gelu keeps one fch_gelu buffer and recomputes it from
// fch with the elementwise kernel before each layer's backward (saves L-1 of L x N x 4C);
// layer keeps only residual3 (each block's output = the next block's input) per layer, every
// other activation and attention's saved state one layer deep, and re-runs block_forward(l)
// before layer l's backward (the last layer's buffers still hold its forward: not re-run).
// Per layer kept: 16 N x C floatX + 4 N fp32 (none), 12 N x C + 4 N (gelu), N x C (layer).
//
// Generation (ModelOptions.kv_cache = positions): prefill() is a forward over the prompt that
// also copies every layer's K and V (after RoPE) into the cache (two strided 2-D copies per
// layer); decode() runs one token through block_forward with decode_pos = its position: the
// same kernels on one row, and attention_decode (split-K online softmax over the cache).
//
// Memory: everything is planned at construction for (maxB, maxT) by plan_memory()
// (model/memory_plan.cpp, host code: --plan-only and profile print the same numbers) and
// allocated in one cudaMalloc after comparing with cudaMemGetInfo; memory_plan() lists the
// lines, and peak_memory_bytes() is measured (cudaMemGetInfo before construction vs. the
// lowest free memory seen since: includes cuBLAS handles and the CUDA runtime's allocations).
// Host syncs: forward with targets reads the mean loss (4 bytes); grad_norm() reads a double.
// Nothing else in a training step waits for the GPU (attention_ms() waits when asked).
//
// Multi-GPU (ModelOptions.comm, one process per GPU, NCCL on this model's stream):
//   data parallel: the fp32 gradients are averaged with ncclAllReduce(avg) once per optimizer
//     step. Overlapped (default; ModelOptions.overlap_comm): during the last micro-step's
//     backward (the trainer says which with mark_last_micro_step()), as soon as layer l's
//     backward is done its 12 gradient slices are all-reduced as one NCCL group on a second,
//     high-priority stream (comm_stream_, after an event on stream_), while the backward goes
//     on with layer l-1; wte, wpe and lnf (written last, by the encoder backward) go at the
//     end; reduce_grads() then only makes stream_ wait for comm_stream_. Not overlapped:
//     reduce_grads() = one ncclAllReduce over the whole buffer. Then every rank runs the same
//     grad norm and AdamW.
//   --zero 1 (ModelOptions.zero): parameters, master weights and gradients are padded to
//     model/zero_shard.h's padded_total; reduce_grads() is an in-place ncclReduceScatter(avg)
//     that leaves this rank's slice [begin, begin + shard) averaged; grad_norm() = sqrt of the
//     ncclAllReduce(sum) of the slices' sums of squares; AdamW runs on the slice only, cut at
//     tensor boundaries so that weight decay stays per tensor, with m and v of shard size; then
//     an in-place ncclAllGather of the floatX parameters. The fp32 master weights outside the
//     slice go stale and are gathered only when get_params() needs them (every rank calls it).
//   Host waits go through DistComm::wait, which notices failed peers instead of hanging.
// Measured before the long-context changes (H200, bf16, d12, B=32, T=1024, --attn naive;
// CudaModel.DISABLED_BenchD12): 69.1 ms per step (forward + loss 25.8, backward 42.1, grad
// norm + AdamW 1.3), 474k tokens/s; plan 24.33 GiB, measured peak 24.40 GiB. After them, at
// 128K tokens on an H100: README "Long context".
#include "model/gpt_cuda.cuh"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "kernels/adamw.cuh"
#include "kernels/attention/attention.cuh"
#include "kernels/classifier.cuh"
#include "kernels/cuda_common.cuh"
#include "kernels/attention/decode.cuh"
#include "kernels/encoder.cuh"
#include "kernels/gelu.cuh"
#include "kernels/global_norm.cuh"
#include "kernels/layernorm.cuh"
#include "kernels/matmul.cuh"
#include "kernels/rope.cuh"
#include "kernels/rope.h"
#include "kernels/scale.cuh"
#include "model/layout.h"
#include "model/memory_plan.h"
#include "model/nccl_comm.cuh"
#include "model/zero_shard.h"

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

#if !defined(ENABLE_FP32)
float bf16_bits_to_float(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
#endif

class GptCuda : public Model {
 public:
  explicit GptCuda(const ModelOptions& opt);
  ~GptCuda() override;

  const GPTConfig& config() const override { return cfg_; }
  const char* device_name() const override { return device_name_.c_str(); }
  size_t num_parameters() const override { return layout_.total; }
  float forward(const int* inputs, const int* targets, int B, int T) override;
  void backward(float loss_scale) override;
  void zero_grad() override;
  float grad_norm() override;
  void adamw_step(const AdamWHyper& h, float grad_scale, int step) override;
  void logits_at(int t, float* out) override;
  void get_params(std::vector<float>& out) const override;
  void set_params(const std::vector<float>& in) override;
  void get_adam_state(std::vector<float>& m, std::vector<float>& v) const override;
  void set_adam_state(const std::vector<float>& m, const std::vector<float>& v) override;
  std::vector<MemoryLine> memory_plan() const override { return plan_.lines; }
  size_t peak_memory_bytes() const override;
  double attention_ms() override;
  void prefill(const int* tokens, int n, float* logits) override;
  void decode(int token, float* logits) override;
  int cached_positions() const override { return kv_len_; }

  void get_grads(std::vector<float>& out) const { download(out, grads_, layout_.total); }
  void reduce_grads() override;
  void mark_last_micro_step() override { last_micro_ = true; }
  size_t adam_state_size() const override { return opt_size_; }

 private:
  GPTConfig cfg_;
  ParamLayout layout_;
  int maxB_, maxT_;
  std::string device_name_;
  std::unique_ptr<AttentionBackend> attn_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t inputs_copied_ = nullptr;
  // multi-GPU (nullptr / 0 on one process)
  DistComm* comm_ = nullptr;
  int zero_ = 0;
  ZeroShard shard_;                 // this rank's ZeRO-1 slice (zero_ == 1)
  std::vector<ShardSegment> segs_;  // the slice cut at tensor boundaries
  size_t Ppad_ = 0;                 // parameters/master/gradients allocated (>= layout_.total)
  size_t opt_size_ = 0;             // AdamW m, v elements (layout_.total, or shard_.shard_size)
  bool overlap_ = false;            // all-reduce per layer during the last backward
  bool last_micro_ = false;         // the next backward is the last before reduce_grads()
  bool reduced_in_backward_ = false;
  cudaStream_t comm_stream_ = nullptr;  // overlapped all-reduces
  cudaEvent_t layer_done_ = nullptr;    // stream_ -> comm_stream_: a layer's gradients are final
  cudaEvent_t comm_done_ = nullptr;     // comm_stream_ -> stream_: all gradients reduced
  void reduce_async(const int* tensors, int n, int layer);  // on comm_stream_, after stream_

  // Device memory: one allocation laid out by plan_memory() (model/memory_plan.h). Shapes for
  // (maxB, maxT), N = maxB*maxT; K = layers kept (L, or 1 with --recompute layer), KG = layers
  // of fch_gelu kept (L with --recompute none, else 1).
  MemoryPlan plan_;
  char* mem_ = nullptr;
  floatX* params_ = nullptr;  // (total) llm.c order
  float* master_ = nullptr;   // (total) fp32 master weights
  float* grads_ = nullptr;    // (total)
  float* m_ = nullptr;        // (total)
  float* v_ = nullptr;        // (total)
  // activations
  floatX* encoded_ = nullptr;    // (N, C)
  floatX* ln1_ = nullptr;        // (K, N, C)
  float* ln1_mean_ = nullptr;    // (K, N)
  float* ln1_rstd_ = nullptr;    // (K, N)
  floatX* qkv_ = nullptr;        // (K, N, QKV) after RoPE when cfg_.rope
  floatX* atty_ = nullptr;       // (K, N, C)
  floatX* residual2_ = nullptr;  // (K, N, C)
  floatX* ln2_ = nullptr;        // (K, N, C)
  float* ln2_mean_ = nullptr;    // (K, N)
  float* ln2_rstd_ = nullptr;    // (K, N)
  floatX* fch_ = nullptr;        // (K, N, 4C) pre-GELU
  floatX* fch_gelu_ = nullptr;   // (KG, N, 4C)
  floatX* residual3_ = nullptr;  // (L, N, C): block l's output = block l+1's input
  floatX* lnf_ = nullptr;        // (N, C)
  float* lnf_mean_ = nullptr;    // (N)
  float* lnf_rstd_ = nullptr;    // (N)
  int* inputs_ = nullptr;        // (N)
  int* targets_ = nullptr;       // (N)
  char* att_saved_ = nullptr;    // (K, saved_per_layer_)
  void* att_scratch_ = nullptr;  // attn_->scratch_bytes
  floatX* logits_ = nullptr;     // (chunk, Vp): one classifier chunk, dlogits in place
  float* losses_ = nullptr;      // (N)
  float* loss_mean_ = nullptr;   // (1)
  floatX* logits_row_ = nullptr; // (Vp) logits_at()
  float* dwte_chunk_ = nullptr;  // (Vp, C) lm-head weight gradient of d(mean loss), from forward
  double* norm_ = nullptr;       // (1)
  // backward scratch
  floatX* dresidual_ = nullptr;  // (N, C)
  floatX* dl_btc_ = nullptr;     // (N, C); after a forward with targets: d(mean loss)/d(lnf)
  floatX* dl_bt4c_ = nullptr;    // (N, 4C), also dqkv (N, QKV)
  void* kscratch_ = nullptr;     // shared by the reducing kernels (one at a time on stream_)
  size_t kscratch_bytes_ = 0;
  void* workspace_ = nullptr;    // cuBLASLt
  // long context and generation
  float* rope_table_ = nullptr;  // (rope_rows, HS/2, 2) cos, sin; RoPE models only
  floatX* kv_cache_ = nullptr;   // (L, 2, kv_cache, NKV, HS): per layer K then V
  void* decode_scratch_ = nullptr;
  int kv_cap_ = 0, kv_len_ = 0;  // cache capacity and positions filled
  bool kv_fill_ = false;         // the running forward is a prefill: copy K, V into the cache
  bool recompute_gelu_ = false, recompute_layer_ = false;
  // attention timing (ModelOptions.time_attention): event pairs around attention calls
  std::vector<cudaEvent_t> att_events_;
  int att_events_used_ = 0;
  double att_ms_ = 0;

  size_t saved_per_layer_ = 0, scratch_bytes_ = 0, total_bytes_ = 0;
  size_t free_at_start_ = 0;
  mutable size_t peak_used_ = 0;

  // pinned host staging
  int* h_tokens_ = nullptr;  // (2N): inputs, targets
  float* h_loss_ = nullptr;  // (1)
  double* h_norm_ = nullptr; // (1)

  int B_ = 0, T_ = 0;
  bool have_targets_ = false;

  void init(const ModelOptions& opt);
  void release();
  void carve(char* base);  // sets every buffer pointer from plan_

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
  // the KV cache.
  void block_forward(int l, int B, int T, int decode_pos);
  void attention_timer(bool start);  // CUDA event before / after an attention call
  void attention_ms_flush();
  void logits_row(const floatX* lnf_row, float* out);  // out (Vp) = lnf_row @ wte^T
  AttnShape shape(int B, int T) const {
    return AttnShape{B, T, cfg_.num_heads, cfg_.num_kv_heads, cfg_.head_size()};
  }
  size_t maxN() const { return (size_t)maxB_ * maxT_; }
  floatX* param(int i) const { return params_ + layout_.offsets[i]; }
  float* grad(int i) const { return grads_ + layout_.offsets[i]; }
  void attach() const { matmul_init(workspace_, matmul_workspace_bytes()); }
  void measure() const;
  void download(std::vector<float>& out, const float* src, size_t n) const;
  void upload(float* dst, const std::vector<float>& in, size_t n, const char* what);
  void sync() const {  // waits for stream_; with peers, watching for their failure
    if (comm_) comm_->wait(stream_);
    else CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
};

GptCuda::GptCuda(const ModelOptions& opt)
    : cfg_(opt.config), layout_(opt.config), maxB_(opt.B), maxT_(opt.T) {
  try {
    init(opt);
  } catch (...) {
    release();  // a throwing constructor runs no destructor
    throw;
  }
}

void GptCuda::init(const ModelOptions& opt) {
  validate_config(cfg_);
  comm_ = opt.comm;
  zero_ = comm_ ? opt.zero : 0;
  Ppad_ = opt_size_ = layout_.total;
  if (zero_) {
    shard_ = zero_shard(layout_.total, comm_->world(), comm_->rank());
    segs_ = shard_segments(layout_.offsets.data(), layout_.sizes.data(), kNumParamTensors,
                           shard_.begin, shard_.end);
    Ppad_ = shard_.padded_total;
    opt_size_ = shard_.shard_size;
  }
  overlap_ = comm_ && comm_->world() > 1 && !zero_ && opt.overlap_comm;
  CHECK(maxT_ >= 1 && maxT_ <= cfg_.max_seq_len,
        "--seq-len %d is larger than the model's maximum %d; lower --seq-len", maxT_,
        cfg_.max_seq_len);
  CHECK(maxB_ >= 1, "--batch must be at least 1 (got %d)", maxB_);
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    cudaGetLastError();
    FAIL("--device cuda: no CUDA GPU is visible (cudaGetDeviceCount found none); use --device cpu");
  }
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  device_name_ = prop.name;
  attn_ = make_attention(opt.attn);
  const AttnShape s = shape(maxB_, maxT_);
  const std::string why = attn_->unsupported_reason(s);
  CHECK(why.empty(), "--attn %s cannot run this model: %s", opt.attn.c_str(), why.c_str());
  validate_recompute(opt.recompute);
  recompute_gelu_ = opt.recompute != "none";
  recompute_layer_ = opt.recompute == "layer";
  CHECK(opt.kv_cache >= 0, "internal: negative KV cache length");
  CHECK(!cfg_.rope || cfg_.head_size() % 2 == 0, "RoPE needs an even head size (C / NH = %d)",
        cfg_.head_size());
  kv_cap_ = opt.kv_cache;
  MemoryPlanInputs in = memory_plan_inputs(opt);
  in.params_alloc = Ppad_;
  in.opt_size = opt_size_;
  plan_ = plan_memory(in);
  saved_per_layer_ = plan_.att_saved_per_layer;
  scratch_bytes_ = plan_.att_scratch_bytes;
  kscratch_bytes_ = in.kernel_scratch;
  if (opt.time_attention) {
    att_events_.resize(8 * cfg_.num_layers + 8);
    for (cudaEvent_t& e : att_events_) CUDA_CHECK(cudaEventCreate(&e));
  }

  CUDA_CHECK(cudaStreamCreate(&stream_));
  if (comm_) comm_->set_stream(stream_);
  if (overlap_) {
    int lo = 0, hi = 0;
    CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
    CUDA_CHECK(cudaStreamCreateWithPriority(&comm_stream_, cudaStreamNonBlocking, hi));
    CUDA_CHECK(cudaEventCreateWithFlags(&layer_done_, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&comm_done_, cudaEventDisableTiming));
  }
  CUDA_CHECK(cudaEventCreateWithFlags(&inputs_copied_, cudaEventDisableTiming));
  size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  free_at_start_ = free_b;

  total_bytes_ = plan_.total;
  // Headroom for what is not in the plan: cuBLAS/cuBLASLt handles and the CUDA runtime.
  const size_t headroom = 256ull << 20;
  if (total_bytes_ + headroom > free_b) {
    const bool naive = std::string(attn_->name()) == "naive";
    FAIL("the CUDA model needs %.2f GiB of GPU memory (%.2f GiB of it attention's saved state), "
         "%.2f GiB free on %s; lower --batch or --seq-len%s%s",
         (total_bytes_ + headroom) / kGiB, plan_.layers_kept * saved_per_layer_ / kGiB,
         free_b / kGiB, device_name_.c_str(), naive ? ", use --attn flash" : "",
         recompute_layer_ ? "" : ", or --recompute layer");
  }
  cudaError_t err = cudaMalloc(&mem_, total_bytes_);
  if (err != cudaSuccess) {
    cudaGetLastError();
    FAIL("cudaMalloc of %.2f GiB failed (%s) with %.2f GiB reported free; lower --batch or "
         "--seq-len", total_bytes_ / kGiB, cudaGetErrorString(err), free_b / kGiB);
  }
  carve(mem_);
  if (cfg_.rope) {  // cos/sin table made in double on the host (kernels/rope.h says why)
    std::vector<float> table(plan_.rope_rows * cfg_.head_size());
    rope_table_ref(table.data(), (int)plan_.rope_rows, cfg_.head_size(), cfg_.rope_theta);
    CUDA_CHECK(cudaMemcpy(rope_table_, table.data(), table.size() * sizeof(float),
                          cudaMemcpyHostToDevice));
  }
  CUDA_CHECK(cudaMallocHost(&h_tokens_, 2 * maxN() * sizeof(int)));
  CUDA_CHECK(cudaMallocHost(&h_loss_, sizeof(float)));
  CUDA_CHECK(cudaMallocHost(&h_norm_, sizeof(double)));

  // Deterministic initialisation, the same values as the CPU model (and on every rank).
  CUDA_CHECK(cudaMemsetAsync(params_, 0, Ppad_ * sizeof(floatX), stream_));  // ZeRO padding
  CUDA_CHECK(cudaMemsetAsync(master_, 0, Ppad_ * sizeof(float), stream_));
  upload(master_, gpt_init_params(cfg_, opt.seed), layout_.total, "initial parameters");
  CUDA_CHECK(cudaMemsetAsync(grads_, 0, Ppad_ * sizeof(float), stream_));
  CUDA_CHECK(cudaMemsetAsync(m_, 0, opt_size_ * sizeof(float), stream_));
  CUDA_CHECK(cudaMemsetAsync(v_, 0, opt_size_ * sizeof(float), stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  measure();
}

// Every device buffer's pointer, from the plan (model/memory_plan.cpp sizes and orders them).
void GptCuda::carve(char* base) {
  const MemoryPlan& p = plan_;
  auto at = [&](auto*& ptr, size_t off) { ptr = reinterpret_cast<std::remove_reference_t<decltype(ptr)>>(base + off); };
  at(params_, p.params);
  at(master_, p.master);
  at(grads_, p.grads);
  at(m_, p.m);
  at(v_, p.v);
  at(encoded_, p.encoded);
  at(ln1_, p.ln1);
  at(ln1_mean_, p.ln1_mean);
  at(ln1_rstd_, p.ln1_rstd);
  at(qkv_, p.qkv);
  at(atty_, p.atty);
  at(residual2_, p.residual2);
  at(ln2_, p.ln2);
  at(ln2_mean_, p.ln2_mean);
  at(ln2_rstd_, p.ln2_rstd);
  at(fch_, p.fch);
  at(fch_gelu_, p.fch_gelu);
  at(residual3_, p.residual3);
  at(lnf_, p.lnf);
  at(lnf_mean_, p.lnf_mean);
  at(lnf_rstd_, p.lnf_rstd);
  at(inputs_, p.inputs);
  at(targets_, p.targets);
  at(att_saved_, p.att_saved);
  at(att_scratch_, p.att_scratch);
  at(logits_, p.logits);
  at(losses_, p.losses);
  at(loss_mean_, p.loss_mean);
  at(logits_row_, p.logits_row);
  at(dwte_chunk_, p.dwte_chunk);
  at(dresidual_, p.dresidual);
  at(dl_btc_, p.dl_btc);
  at(dl_bt4c_, p.dl_bt4c);
  at(kscratch_, p.kscratch);
  at(norm_, p.norm);
  if (kv_cap_ > 0) {
    at(kv_cache_, p.kv_cache);
    at(decode_scratch_, p.decode_scratch);
  }
  if (cfg_.rope) at(rope_table_, p.rope_table);
  at(workspace_, p.workspace);
}

GptCuda::~GptCuda() { release(); }

void GptCuda::release() {
  if (stream_ && comm_) {
    // Collectives may be pending: wait for them, but while an exception unwinds (a peer or
    // this rank failed) only briefly, then abort the communicator so the stream drains.
    bool drained = true;
    if (comm_stream_ && comm_done_) {  // fold pending overlapped all-reduces into stream_
      cudaEventRecord(comm_done_, comm_stream_);
      cudaStreamWaitEvent(stream_, comm_done_, 0);
    }
    try {
      comm_->wait(stream_, std::uncaught_exceptions() > 0 ? 5.0 : -1.0);
    } catch (...) {
      drained = false;
      comm_->abort();
    }
    comm_->set_stream(nullptr);
    comm_ = nullptr;
    // A collective that never completes may still occupy the stream: leave the memory to the
    // process exit that follows rather than wait on it here.
    if (!drained) return;
  }
  if (stream_) cudaStreamSynchronize(stream_);
  if (mem_ && workspace_) matmul_init(nullptr, 0);  // detach our workspace from cuBLASLt calls
  if (mem_) cudaFree(mem_);
  if (h_tokens_) cudaFreeHost(h_tokens_);
  if (h_loss_) cudaFreeHost(h_loss_);
  if (h_norm_) cudaFreeHost(h_norm_);
  if (inputs_copied_) cudaEventDestroy(inputs_copied_);
  for (cudaEvent_t e : att_events_) cudaEventDestroy(e);
  att_events_.clear();
  if (layer_done_) cudaEventDestroy(layer_done_);
  if (comm_done_) cudaEventDestroy(comm_done_);
  if (comm_stream_) cudaStreamDestroy(comm_stream_);
  layer_done_ = comm_done_ = nullptr;
  comm_stream_ = nullptr;
  if (stream_) cudaStreamDestroy(stream_);
  mem_ = nullptr;
  h_tokens_ = nullptr;
  h_loss_ = nullptr;
  h_norm_ = nullptr;
  inputs_copied_ = nullptr;
  stream_ = nullptr;
}

void GptCuda::measure() const {
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return;
  if (free_at_start_ > free_b) peak_used_ = std::max(peak_used_, free_at_start_ - free_b);
}

// Measured: the lowest free memory seen (after each forward, and now) against the free memory
// before the model was made. Counts the plan plus cuBLAS's handles and anything else allocated
// since; the memory_plan() lines are the prediction.
size_t GptCuda::peak_memory_bytes() const {
  measure();
  return peak_used_;
}

GptCuda::LayerActs GptCuda::acts(int l) const {
  const size_t NC = maxN() * cfg_.channels, NQKV = maxN() * cfg_.qkv_channels(), Nrows = maxN();
  const int k = recompute_layer_ ? 0 : l, g = recompute_gelu_ ? 0 : l;
  LayerActs a;
  a.residual = l == 0 ? encoded_ : residual3_ + (l - 1) * NC;
  a.ln1 = ln1_ + k * NC;
  a.ln1_mean = ln1_mean_ + k * Nrows;
  a.ln1_rstd = ln1_rstd_ + k * Nrows;
  a.qkv = qkv_ + k * NQKV;
  a.atty = atty_ + k * NC;
  a.att_saved = att_saved_ + k * saved_per_layer_;
  a.residual2 = residual2_ + k * NC;
  a.ln2 = ln2_ + k * NC;
  a.ln2_mean = ln2_mean_ + k * Nrows;
  a.ln2_rstd = ln2_rstd_ + k * Nrows;
  a.fch = fch_ + k * 4 * NC;
  a.fch_gelu = fch_gelu_ + g * 4 * NC;
  a.residual3 = residual3_ + l * NC;
  return a;
}

void GptCuda::attention_timer(bool start) {
  if (att_events_.empty()) return;
  if (start && att_events_used_ + 2 > (int)att_events_.size()) attention_ms_flush();
  CUDA_CHECK(cudaEventRecord(att_events_[att_events_used_++], stream_));
}

// Adds the finished event pairs' times to att_ms_ (waits for them).
void GptCuda::attention_ms_flush() {
  for (int i = 0; i + 1 < att_events_used_; i += 2) {
    CUDA_CHECK(cudaEventSynchronize(att_events_[i + 1]));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, att_events_[i], att_events_[i + 1]));
    att_ms_ += ms;
  }
  att_events_used_ = 0;
}

double GptCuda::attention_ms() {
  if (att_events_.empty()) return -1.0;
  attention_ms_flush();
  const double ms = att_ms_;
  att_ms_ = 0;
  return ms;
}

void GptCuda::block_forward(int l, int B, int T, int decode_pos) {
  const int C = cfg_.channels, QKV = cfg_.qkv_channels(), NH = cfg_.num_heads,
            NKV = cfg_.num_kv_heads, HS = cfg_.head_size();
  const int N = B * T;
  const LayerActs a = acts(l);
  cudaStream_t st = stream_;
  layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, a.residual, param(P_LN1W) + l * C,
                    param(P_LN1B) + l * C, N, C, st);
  matmul_forward(a.qkv, a.ln1, param(P_QKVW) + (size_t)l * QKV * C, param(P_QKVB) + l * QKV, N, C,
                 QKV, st);
  if (cfg_.rope)
    rope_forward(a.qkv, rope_table_, B, T, NH, NKV, HS, decode_pos < 0 ? 0 : decode_pos, st);
  // Keys and values (after RoPE) into the cache: K rows at qkv + NH*HS, V at + (NH+NKV)*HS.
  const size_t es = sizeof(floatX), kv_row = (size_t)NKV * HS;
  floatX* k_cache = kv_cache_ ? kv_cache_ + (size_t)l * 2 * kv_cap_ * kv_row : nullptr;
  floatX* v_cache = k_cache ? k_cache + (size_t)kv_cap_ * kv_row : nullptr;
  if (decode_pos >= 0 || kv_fill_) {
    const int pos0 = decode_pos >= 0 ? decode_pos : 0;
    CUDA_CHECK(cudaMemcpy2DAsync(k_cache + pos0 * kv_row, kv_row * es, a.qkv + (size_t)NH * HS,
                                 (size_t)QKV * es, kv_row * es, T, cudaMemcpyDeviceToDevice, st));
    CUDA_CHECK(cudaMemcpy2DAsync(v_cache + pos0 * kv_row, kv_row * es,
                                 a.qkv + (size_t)(NH + NKV) * HS, (size_t)QKV * es, kv_row * es, T,
                                 cudaMemcpyDeviceToDevice, st));
  }
  attention_timer(true);
  if (decode_pos >= 0) {
    attention_decode(a.atty, a.qkv, k_cache, v_cache, decode_pos + 1, NH, NKV, HS,
                     decode_scratch_, st);
  } else {
    AttnForwardArgs fa{a.atty, a.att_saved, att_scratch_, a.qkv, shape(B, T)};
    attn_->forward(fa, st);
  }
  attention_timer(false);
  matmul_forward_residual(a.residual2, a.atty, param(P_ATTPROJW) + (size_t)l * C * C,
                          param(P_ATTPROJB) + l * C, a.residual, N, C, C, st);
  layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, param(P_LN2W) + l * C,
                    param(P_LN2B) + l * C, N, C, st);
  matmul_forward_gelu(a.fch_gelu, a.fch, a.ln2, param(P_FCW) + (size_t)l * 4 * C * C,
                      param(P_FCB) + l * 4 * C, N, C, 4 * C, st);
  matmul_forward_residual(a.residual3, a.fch_gelu, param(P_FCPROJW) + (size_t)l * C * 4 * C,
                          param(P_FCPROJB) + l * C, a.residual2, N, 4 * C, C, st);
}

float GptCuda::forward(const int* inputs, const int* targets, int B, int T) {
  CHECK(B >= 1 && B <= maxB_ && T >= 1 && T <= maxT_,
        "batch %dx%d exceeds the model's allocation %dx%d", B, T, maxB_, maxT_);
  const int C = cfg_.channels, L = cfg_.num_layers, V = cfg_.vocab_size,
            Vp = cfg_.padded_vocab_size;
  const int N = B * T;
  const size_t NC = maxN() * C;
  for (int i = 0; i < N; i++)
    CHECK(inputs[i] >= 0 && inputs[i] < V, "token id %d at position %d is outside the vocabulary "
          "(%d); the data does not match the model's tokenizer", inputs[i], i, V);
  if (targets)
    for (int i = 0; i < N; i++)
      CHECK(targets[i] >= 0 && targets[i] < V, "target id %d is outside the vocabulary (%d)",
            targets[i], V);
  attach();
  // The staging buffer may still feed the previous forward's copy.
  CUDA_CHECK(cudaEventSynchronize(inputs_copied_));
  std::memcpy(h_tokens_, inputs, N * sizeof(int));
  if (targets) std::memcpy(h_tokens_ + maxN(), targets, N * sizeof(int));
  CUDA_CHECK(cudaMemcpyAsync(inputs_, h_tokens_, N * sizeof(int), cudaMemcpyHostToDevice, stream_));
  if (targets)
    CUDA_CHECK(cudaMemcpyAsync(targets_, h_tokens_ + maxN(), N * sizeof(int),
                               cudaMemcpyHostToDevice, stream_));
  CUDA_CHECK(cudaEventRecord(inputs_copied_, stream_));
  B_ = B;
  T_ = T;
  have_targets_ = targets != nullptr;
  cudaStream_t st = stream_;

  encoder_forward(encoded_, inputs_, param(P_WTE), cfg_.rope ? nullptr : param(P_WPE), B, T, C, st);
  for (int l = 0; l < L; l++) block_forward(l, B, T, -1);
  layernorm_forward(lnf_, lnf_mean_, lnf_rstd_, residual3_ + (L - 1) * NC, param(P_LNFW),
                    param(P_LNFB), N, C, st);
  // Without targets no logits are made here: logits_at() computes the row it is asked for.
  if (!have_targets_) return 0.0f;
  // The classifier, chunk by chunk so that (N, Vp) logits never exist at once. Per chunk of
  // rows: logits = lnf @ wte^T; losses, and dlogits for d(mean loss) = 1/N in place; then at
  // once the lm head's backward for those rows: d(lnf) into dl_btc_ and d(wte) accumulated in
  // dwte_chunk_ (fp32). backward() scales both by its loss_scale (the loss scale is not known
  // yet), so the logits are used while they are in memory and never recomputed.
  CUDA_CHECK(cudaMemsetAsync(dwte_chunk_, 0, (size_t)Vp * C * sizeof(float), st));
  float* ks = static_cast<float*>(kscratch_);
  for (int r0 = 0; r0 < N; r0 += plan_.chunk_rows) {
    const int n = std::min(plan_.chunk_rows, N - r0);
    const floatX* lnf = lnf_ + (size_t)r0 * C;
    matmul_forward(logits_, lnf, param(P_WTE), nullptr, n, C, Vp, st);
    classifier(losses_ + r0, logits_, logits_, targets_ + r0, 1.0f / N, n, V, Vp, st);
    matmul_backward(dl_btc_ + (size_t)r0 * C, dwte_chunk_, nullptr, logits_, lnf, param(P_WTE), n,
                    C, Vp, ks, st);
  }
  mean_loss(loss_mean_, losses_, N, st);
  CUDA_CHECK(cudaMemcpyAsync(h_loss_, loss_mean_, sizeof(float), cudaMemcpyDeviceToHost, st));
  sync();
  measure();
  return *h_loss_;
}

void GptCuda::backward(float loss_scale) {
  CHECK(have_targets_, "backward() needs a forward() with targets first");
  const int B = B_, T = T_, N = B * T, C = cfg_.channels, L = cfg_.num_layers,
            Vp = cfg_.padded_vocab_size, QKV = cfg_.qkv_channels();
  const size_t NC = maxN() * C;
  const AttnShape s = shape(B, T);
  cudaStream_t st = stream_;
  float* ks = static_cast<float*>(kscratch_);
  const bool overlap = overlap_ && last_micro_;
  last_micro_ = false;
  static const int kLayerTensors[] = {P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_ATTPROJW, P_ATTPROJB,
                                      P_LN2W, P_LN2B, P_FCW, P_FCB, P_FCPROJW, P_FCPROJB};
  static const int kOtherTensors[] = {P_WTE, P_WPE, P_LNFW, P_LNFB};
  CHECK(encoder_backward_scratch_bytes(B, T) <= kscratch_bytes_,
        "internal: encoder scratch for %dx%d exceeds the plan", B, T);
  attach();

  // The lm head's gradients were made in the forward for d(mean loss): scale them now.
  scale_add(grad(P_WTE), dwte_chunk_, loss_scale, (size_t)Vp * C, st);
  if (loss_scale != 1.0f) scale_floatX(dl_btc_, loss_scale, (size_t)N * C, st);
  CUDA_CHECK(cudaMemsetAsync(dresidual_, 0, (size_t)N * C * sizeof(floatX), st));
  layernorm_backward(dresidual_, grad(P_LNFW), grad(P_LNFB), dl_btc_, residual3_ + (L - 1) * NC,
                     param(P_LNFW), lnf_mean_, lnf_rstd_, N, C, ks, st);
  for (int l = L - 1; l >= 0; l--) {
    // Recompute what was not kept. The last layer's one-deep buffers still hold its forward.
    if (recompute_layer_ && l < L - 1) {
      block_forward(l, B, T, -1);
    } else if (recompute_gelu_ && !recompute_layer_ && l < L - 1) {
      gelu_forward(acts(l).fch_gelu, acts(l).fch, (size_t)N * 4 * C, st);
    }
    const LayerActs a = acts(l);
    // dresidual holds d(residual3[l]); residual3 = residual2 + fcproj passes it to both.
    // d(fch) = (dresidual @ fcprojw) * gelu'(fch): the GELU backward rides in the epilogue.
    matmul_backward(dl_bt4c_, grad(P_FCPROJW) + (size_t)l * C * 4 * C, grad(P_FCPROJB) + l * C,
                    dresidual_, a.fch_gelu, param(P_FCPROJW) + (size_t)l * C * 4 * C, N, 4 * C, C,
                    ks, st, 1.0f, a.fch);
    matmul_backward(dl_btc_, grad(P_FCW) + (size_t)l * 4 * C * C, grad(P_FCB) + l * 4 * C,
                    dl_bt4c_, a.ln2, param(P_FCW) + (size_t)l * 4 * C * C, N, C, 4 * C, ks, st);
    // dresidual += ln2 path: now d(residual2[l])
    layernorm_backward(dresidual_, grad(P_LN2W) + l * C, grad(P_LN2B) + l * C, dl_btc_,
                       a.residual2, param(P_LN2W) + l * C, a.ln2_mean, a.ln2_rstd, N, C, ks, st);
    matmul_backward(dl_btc_, grad(P_ATTPROJW) + (size_t)l * C * C, grad(P_ATTPROJB) + l * C,
                    dresidual_, a.atty, param(P_ATTPROJW) + (size_t)l * C * C, N, C, C, ks, st);
    floatX* dqkv = dl_bt4c_;
    AttnBackwardArgs ba{dqkv, att_scratch_, dl_btc_, a.qkv, a.atty, a.att_saved, s};
    attention_timer(true);
    attn_->backward(ba, st);
    attention_timer(false);
    // qkv holds rotated Q, K: take dQ, dK back through the rotation.
    if (cfg_.rope)
      rope_backward(dqkv, rope_table_, B, T, cfg_.num_heads, cfg_.num_kv_heads, cfg_.head_size(),
                    0, st);
    matmul_backward(dl_btc_, grad(P_QKVW) + (size_t)l * QKV * C, grad(P_QKVB) + l * QKV, dqkv,
                    a.ln1, param(P_QKVW) + (size_t)l * QKV * C, N, C, QKV, ks, st);
    // dresidual += ln1 path: d(residual3[l-1]) (or d(encoded) for l = 0)
    layernorm_backward(dresidual_, grad(P_LN1W) + l * C, grad(P_LN1B) + l * C, dl_btc_,
                       a.residual, param(P_LN1W) + l * C, a.ln1_mean, a.ln1_rstd, N, C, ks, st);
    if (overlap) reduce_async(kLayerTensors, 12, l);  // layer l's gradients are final
  }
  encoder_backward(grad(P_WTE), cfg_.rope ? nullptr : grad(P_WPE), dresidual_, inputs_, B, T, C,
                   kscratch_, st);
  if (overlap) {
    reduce_async(kOtherTensors, 4, -1);
    CUDA_CHECK(cudaEventRecord(comm_done_, comm_stream_));
    reduced_in_backward_ = true;
  }
  have_targets_ = false;
}

void GptCuda::zero_grad() {
  CUDA_CHECK(cudaMemsetAsync(grads_, 0, Ppad_ * sizeof(float), stream_));
}

// All-reduces (average) the given tensors' gradients of one layer (layer >= 0: the layer's
// slice of each (L, ...) tensor) or whole (layer < 0), as one NCCL group on comm_stream_ once
// stream_ has reached this point.
void GptCuda::reduce_async(const int* tensors, int n, int layer) {
  CHECK(comm_->nccl_comm(), "the NCCL communicator was aborted after an error");
  CUDA_CHECK(cudaEventRecord(layer_done_, stream_));
  CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, layer_done_, 0));
  const size_t L = cfg_.num_layers;
  NCCL_CHECK(ncclGroupStart());
  for (int k = 0; k < n; k++) {
    const int i = tensors[k];
    const size_t count = layer >= 0 ? layout_.sizes[i] / L : layout_.sizes[i];
    float* g = grad(i) + (layer >= 0 ? (size_t)layer * count : 0);
    NCCL_CHECK(ncclAllReduce(g, g, count, ncclFloat, ncclAvg, as_nccl(comm_), comm_stream_));
  }
  NCCL_CHECK(ncclGroupEnd());
}

void GptCuda::reduce_grads() {
  if (!comm_ || comm_->world() == 1) return;
  CHECK(comm_->nccl_comm(), "the NCCL communicator was aborted after an error");
  if (reduced_in_backward_) {  // done during the backward: wait for it on stream_
    reduced_in_backward_ = false;
    CUDA_CHECK(cudaStreamWaitEvent(stream_, comm_done_, 0));
    return;
  }
  if (zero_) {
    // In place: this rank's slice of grads_ receives the average of every rank's slice.
    NCCL_CHECK(ncclReduceScatter(grads_, grads_ + shard_.begin, shard_.shard_size, ncclFloat,
                                 ncclAvg, as_nccl(comm_), stream_));
  } else {
    NCCL_CHECK(ncclAllReduce(grads_, grads_, layout_.total, ncclFloat, ncclAvg, as_nccl(comm_),
                             stream_));
  }
}

float GptCuda::grad_norm() {
  if (zero_) {
    // Sum of squares of this slice (padding holds zeros), summed over the ranks.
    global_norm_squared(norm_, grads_ + shard_.begin, shard_.shard_size,
                        static_cast<double*>(kscratch_), stream_);
    NCCL_CHECK(ncclAllReduce(norm_, norm_, 1, ncclDouble, ncclSum, as_nccl(comm_), stream_));
  } else {
    global_norm_squared(norm_, grads_, layout_.total, static_cast<double*>(kscratch_), stream_);
  }
  CUDA_CHECK(cudaMemcpyAsync(h_norm_, norm_, sizeof(double), cudaMemcpyDeviceToHost, stream_));
  sync();
  return (float)std::sqrt(*h_norm_);
}

void GptCuda::adamw_step(const AdamWHyper& h, float grad_scale, int step) {
  if (zero_) {
    for (const ShardSegment& sg : segs_) {
      const size_t g = sg.begin, o = sg.begin - shard_.begin;
      const float wd = ParamLayout::decayed(sg.tensor) ? h.weight_decay : 0.0f;
      adamw_update(master_ + g, params_ + g, grads_ + g, m_ + o, v_ + o, sg.count, h.lr, h.beta1,
                   h.beta2, h.eps, wd, grad_scale, step, stream_);
    }
#if defined(ENABLE_FP32)
    const ncclDataType_t xtype = ncclFloat;
#else
    const ncclDataType_t xtype = ncclBfloat16;
#endif
    NCCL_CHECK(ncclAllGather(params_ + shard_.begin, params_, shard_.shard_size, xtype,
                             as_nccl(comm_), stream_));
    return;
  }
  for (int i = 0; i < kNumParamTensors; i++) {
    const size_t off = layout_.offsets[i];
    const float wd = ParamLayout::decayed(i) ? h.weight_decay : 0.0f;
    adamw_update(master_ + off, params_ + off, grads_ + off, m_ + off, v_ + off, layout_.sizes[i],
                 h.lr, h.beta1, h.beta2, h.eps, wd, grad_scale, step, stream_);
  }
}

void GptCuda::logits_at(int t, float* out) {
  CHECK(t >= 0 && t < T_, "logits_at(%d) outside the last forward's length %d", t, T_);
  logits_row(lnf_ + (size_t)t * cfg_.channels, out);
}

void GptCuda::logits_row(const floatX* lnf_row, float* out) {
  const int C = cfg_.channels, Vp = cfg_.padded_vocab_size;
  attach();
  matmul_forward(logits_row_, lnf_row, param(P_WTE), nullptr, 1, C, Vp, stream_);
  std::vector<floatX> row(Vp);
  CUDA_CHECK(cudaMemcpyAsync(row.data(), logits_row_, Vp * sizeof(floatX), cudaMemcpyDeviceToHost,
                             stream_));
  sync();
  for (int v = 0; v < Vp; v++) {
#if defined(ENABLE_FP32)
    out[v] = row[v];
#else
    uint16_t bits;
    std::memcpy(&bits, &row[v], 2);
    out[v] = bf16_bits_to_float(bits);
#endif
  }
}

void GptCuda::prefill(const int* tokens, int n, float* logits) {
  check_prefill(n, kv_cap_, maxT_);
  kv_fill_ = true;
  try {
    forward(tokens, nullptr, 1, n);
  } catch (...) {
    kv_fill_ = false;
    throw;
  }
  kv_fill_ = false;
  kv_len_ = n;
  logits_at(n - 1, logits);
}

void GptCuda::decode(int token, float* logits) {
  const int C = cfg_.channels, L = cfg_.num_layers, pos = kv_len_;
  check_decode(cfg_, kv_cap_, kv_len_, token);
  attach();
  CUDA_CHECK(cudaEventSynchronize(inputs_copied_));
  h_tokens_[0] = token;
  CUDA_CHECK(cudaMemcpyAsync(inputs_, h_tokens_, sizeof(int), cudaMemcpyHostToDevice, stream_));
  CUDA_CHECK(cudaEventRecord(inputs_copied_, stream_));
  encoder_forward(encoded_, inputs_, param(P_WTE),
                  cfg_.rope ? nullptr : param(P_WPE) + (size_t)pos * C, 1, 1, C, stream_);
  for (int l = 0; l < L; l++) block_forward(l, 1, 1, pos);
  const size_t NC = maxN() * C;
  layernorm_forward(lnf_, lnf_mean_, lnf_rstd_, residual3_ + (L - 1) * NC, param(P_LNFW),
                    param(P_LNFB), 1, C, stream_);
  T_ = 1;  // logits_at(0) is this token's
  have_targets_ = false;
  kv_len_ = pos + 1;
  logits_row(lnf_, logits);
}

void GptCuda::download(std::vector<float>& out, const float* src, size_t n) const {
  out.resize(n);
  CUDA_CHECK(cudaMemcpyAsync(out.data(), src, n * sizeof(float), cudaMemcpyDeviceToHost, stream_));
  sync();
}

void GptCuda::upload(float* dst, const std::vector<float>& in, size_t n, const char* what) {
  CHECK(in.size() == n, "%s: %zu values where the model expects %zu", what, in.size(), n);
  CUDA_CHECK(cudaMemcpyAsync(dst, in.data(), n * sizeof(float), cudaMemcpyHostToDevice, stream_));
  if (dst == master_) copy_float_to_floatX(params_, master_, layout_.total, stream_);
  sync();
}

void GptCuda::get_params(std::vector<float>& out) const {
  if (zero_)  // the master weights outside this rank's slice are stale: gather them first
    NCCL_CHECK(ncclAllGather(master_ + shard_.begin, master_, shard_.shard_size, ncclFloat,
                             as_nccl(comm_), stream_));
  download(out, master_, layout_.total);
}
void GptCuda::set_params(const std::vector<float>& in) {
  upload(master_, in, layout_.total, "set_params");
}
void GptCuda::get_adam_state(std::vector<float>& m, std::vector<float>& v) const {
  download(m, m_, opt_size_);
  download(v, v_, opt_size_);
}
void GptCuda::set_adam_state(const std::vector<float>& m, const std::vector<float>& v) {
  upload(m_, m, opt_size_, "optimizer state m");
  upload(v_, v, opt_size_, "optimizer state v");
}

}  // namespace

bool cuda_memory_info(size_t& free_bytes, size_t& total_bytes, std::string& name) {
  if (!cuda_device_available()) return false;
  int dev = 0;
  cudaDeviceProp prop;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess ||
      cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  name = prop.name;
  return true;
}

// The CUDA kernels' own scratch sizes for this shape (host functions; no GPU needed).
MemoryPlanInputs memory_plan_inputs(const ModelOptions& opt) {
  if (!cuda_device_available()) return memory_plan_inputs_host(opt);
  const GPTConfig& c = opt.config;
  MemoryPlanInputs in;
  in.opt = opt;
  in.es = sizeof(floatX);
  const int N = opt.B * opt.T, OC = std::max(4 * c.channels, c.qkv_channels());
  in.kernel_scratch = std::max({layernorm_backward_scratch_bytes(c.channels),
                                matmul_backward_scratch_bytes(N, OC),
                                encoder_backward_scratch_bytes(opt.B, opt.T),
                                global_norm_scratch_bytes()});
  in.workspace = matmul_workspace_bytes();
  in.decode_scratch =
      opt.kv_cache > 0 ? attention_decode_scratch_bytes(opt.kv_cache, c.num_heads, c.head_size()) : 0;
  return in;
}

bool cuda_device_available() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return n > 0;
}

std::unique_ptr<Model> make_cuda_model(const ModelOptions& opt) {
  return std::make_unique<GptCuda>(opt);
}

void cuda_model_get_grads(const Model& m, std::vector<float>& out) {
  const GptCuda* g = dynamic_cast<const GptCuda*>(&m);
  CHECK(g != nullptr, "cuda_model_get_grads: not a CUDA model");
  g->get_grads(out);
}
