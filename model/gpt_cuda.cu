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
//   encoded = wte[inp] + wpe                                       encoder_forward
//   per layer: ln1 -> qkv (bias epilogue) -> attention
//              -> residual2 = residual + attproj(atty)   (bias epilogue, residual as C, beta = 1)
//              -> ln2 -> fc with GELU epilogue (stores pre-GELU fch and fch_gelu)
//              -> residual3 = residual2 + fcproj(fch_gelu)   (likewise)
//   (one rounding to floatX per fused product where the CPU model rounds nothing: fp32)
//   lnf -> logits = lnf @ wte^T over Vp -> fused classifier
// With targets, the classifier runs in the forward and writes dlogits for dloss = 1/N in place
// over the logits (llm.c's order: the logits are never read again by training, so the
// backward starts from dlogits and no second pass over the N x Vp tensor is needed); the
// backward passes loss_scale to the lm-head matmul as dout_scale. logits_at() recomputes its
// row from the saved lnf (one 1 x C x Vp product), so it is valid after any forward.
// Backward mirrors gpt_cpu.cpp: one residual-stream gradient (dresidual, floatX) accumulated
// by the LayerNorm backwards; per-layer temporaries dl_btc (N, C) and dl_bt4c (N, 4C), the
// latter reused for dqkv. The GELU backward is fused into the fcproj dinp product (DGELU
// epilogue). Bias gradients come from a deterministic reduction kernel (matmul.cuh).
//
// Memory: everything is planned at construction for (maxB, maxT) and allocated in one
// cudaMalloc after comparing with cudaMemGetInfo; memory_plan() lists the lines, and
// peak_memory_bytes() is measured (cudaMemGetInfo before construction vs. the lowest free
// memory seen since: includes cuBLAS handles and the CUDA runtime's own allocations).
// Host syncs: forward with targets reads the mean loss (4 bytes); grad_norm() reads a double.
// Nothing else in a training step waits for the GPU.
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
// Measured (H200, bf16, d12, B=32, T=1024, --attn naive; CudaModel.DISABLED_BenchD12): 69.1 ms
// per step (forward + loss 25.8, backward 42.1, grad norm + AdamW 1.3), 474k tokens/s; plan
// 24.33 GiB, measured peak 24.40 GiB.
#include "model/gpt_cuda.cuh"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "kernels/adamw.cuh"
#include "kernels/attention/attention.cuh"
#include "kernels/classifier.cuh"
#include "kernels/cuda_common.cuh"
#include "kernels/encoder.cuh"
#include "kernels/global_norm.cuh"
#include "kernels/layernorm.cuh"
#include "kernels/matmul.cuh"
#include "model/layout.h"
#include "model/nccl_comm.cuh"
#include "model/zero_shard.h"

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// Lays out sub-buffers of one allocation: first pass sizes, second pass assigns pointers.
struct Carver {
  size_t total = 0;
  char* base = nullptr;
  template <class T>
  T* take(size_t count) {
    T* p = base ? reinterpret_cast<T*>(base + total) : nullptr;
    total += align256(count * sizeof(T));
    return p;
  }
};

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
  std::vector<MemoryLine> memory_plan() const override { return plan_; }
  size_t peak_memory_bytes() const override;

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

  // Device memory: one allocation carved by plan(). Shapes for (maxB, maxT), N = maxB*maxT.
  char* mem_ = nullptr;
  floatX* params_ = nullptr;  // (total) llm.c order
  float* master_ = nullptr;   // (total) fp32 master weights
  float* grads_ = nullptr;    // (total)
  float* m_ = nullptr;        // (total)
  float* v_ = nullptr;        // (total)
  // activations
  floatX* encoded_ = nullptr;    // (N, C)
  floatX* ln1_ = nullptr;        // (L, N, C)
  float* ln1_mean_ = nullptr;    // (L, N)
  float* ln1_rstd_ = nullptr;    // (L, N)
  floatX* qkv_ = nullptr;        // (L, N, QKV)
  floatX* atty_ = nullptr;       // (L, N, C)
  floatX* residual2_ = nullptr;  // (L, N, C)
  floatX* ln2_ = nullptr;        // (L, N, C)
  float* ln2_mean_ = nullptr;    // (L, N)
  float* ln2_rstd_ = nullptr;    // (L, N)
  floatX* fch_ = nullptr;        // (L, N, 4C) pre-GELU
  floatX* fch_gelu_ = nullptr;   // (L, N, 4C)
  floatX* residual3_ = nullptr;  // (L, N, C)
  floatX* lnf_ = nullptr;        // (N, C)
  float* lnf_mean_ = nullptr;    // (N)
  float* lnf_rstd_ = nullptr;    // (N)
  int* inputs_ = nullptr;        // (N)
  int* targets_ = nullptr;       // (N)
  char* att_saved_ = nullptr;    // (L, saved_per_layer_)
  void* att_scratch_ = nullptr;  // attn_->scratch_bytes
  floatX* logits_ = nullptr;     // (N, Vp); dlogits in place after a forward with targets
  float* losses_ = nullptr;      // (N)
  float* loss_mean_ = nullptr;   // (1)
  floatX* logits_row_ = nullptr; // (Vp) logits_at()
  double* norm_ = nullptr;       // (1)
  // backward scratch
  floatX* dresidual_ = nullptr;  // (N, C)
  floatX* dl_btc_ = nullptr;     // (N, C)
  floatX* dl_bt4c_ = nullptr;    // (N, 4C), also dqkv (N, QKV)
  void* kscratch_ = nullptr;     // shared by the reducing kernels (one at a time on stream_)
  size_t kscratch_bytes_ = 0;
  void* workspace_ = nullptr;    // cuBLASLt

  size_t saved_per_layer_ = 0, scratch_bytes_ = 0, total_bytes_ = 0;
  std::vector<MemoryLine> plan_;
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
  void plan(Carver& c);
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
  saved_per_layer_ = align256(attn_->saved_bytes(s));
  scratch_bytes_ = attn_->scratch_bytes(s);

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

  Carver sizing;
  plan(sizing);
  total_bytes_ = sizing.total;
  // Headroom for what is not in the plan: cuBLAS/cuBLASLt handles and the CUDA runtime.
  const size_t headroom = 256ull << 20;
  if (total_bytes_ + headroom > free_b) {
    const bool naive = std::string(attn_->name()) == "naive";
    FAIL("the CUDA model needs %.2f GiB of GPU memory (%.2f GiB of it attention's saved state), "
         "%.2f GiB free on %s; lower --batch or --seq-len%s",
         (total_bytes_ + headroom) / kGiB, cfg_.num_layers * saved_per_layer_ / kGiB, free_b / kGiB,
         device_name_.c_str(), naive ? " (or use --attn flash)" : "");
  }
  cudaError_t err = cudaMalloc(&mem_, total_bytes_);
  if (err != cudaSuccess) {
    cudaGetLastError();
    FAIL("cudaMalloc of %.2f GiB failed (%s) with %.2f GiB reported free; lower --batch or "
         "--seq-len", total_bytes_ / kGiB, cudaGetErrorString(err), free_b / kGiB);
  }
  Carver carve;
  carve.base = mem_;
  plan(carve);
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

// Every device buffer, in one place; also fills plan_ when sizing.
void GptCuda::plan(Carver& c) {
  const size_t L = cfg_.num_layers, C = cfg_.channels, N = maxN(), Vp = cfg_.padded_vocab_size;
  const size_t QKV = cfg_.qkv_channels(), P = layout_.total;
  std::vector<MemoryLine> lines;
  size_t mark = c.total;
  auto line = [&](const std::string& what) {
    lines.push_back({what, c.total - mark});
    mark = c.total;
  };
  (void)P;
  params_ = c.take<floatX>(Ppad_);
  master_ = c.take<float>(Ppad_);
  line(std::string("parameters (") + PRECISION_NAME + " + fp32 master)");
  grads_ = c.take<float>(Ppad_);
  line("gradients (fp32)");
  m_ = c.take<float>(opt_size_);
  v_ = c.take<float>(opt_size_);
  line(zero_ ? "optimizer (AdamW m, v fp32; ZeRO-1 shard)" : "optimizer (AdamW m, v fp32)");
  encoded_ = c.take<floatX>(N * C);
  ln1_ = c.take<floatX>(L * N * C);
  ln1_mean_ = c.take<float>(L * N);
  ln1_rstd_ = c.take<float>(L * N);
  qkv_ = c.take<floatX>(L * N * QKV);
  atty_ = c.take<floatX>(L * N * C);
  residual2_ = c.take<floatX>(L * N * C);
  ln2_ = c.take<floatX>(L * N * C);
  ln2_mean_ = c.take<float>(L * N);
  ln2_rstd_ = c.take<float>(L * N);
  fch_ = c.take<floatX>(L * N * 4 * C);
  fch_gelu_ = c.take<floatX>(L * N * 4 * C);
  residual3_ = c.take<floatX>(L * N * C);
  lnf_ = c.take<floatX>(N * C);
  lnf_mean_ = c.take<float>(N);
  lnf_rstd_ = c.take<float>(N);
  inputs_ = c.take<int>(N);
  targets_ = c.take<int>(N);
  line("activations");
  att_saved_ = c.take<char>(L * saved_per_layer_);
  line(std::string("attention saved (") + attn_->name() + ", L x " +
       std::to_string(saved_per_layer_) + " B)");
  att_scratch_ = c.take<char>(scratch_bytes_);
  line(std::string("attention scratch (") + attn_->name() + ")");
  logits_ = c.take<floatX>(N * Vp);
  losses_ = c.take<float>(N);
  loss_mean_ = c.take<float>(1);
  logits_row_ = c.take<floatX>(Vp);
  line("logits / classifier (dlogits in place)");
  dresidual_ = c.take<floatX>(N * C);
  dl_btc_ = c.take<floatX>(N * C);
  dl_bt4c_ = c.take<floatX>(N * std::max(4 * C, QKV));
  kscratch_bytes_ = std::max({layernorm_backward_scratch_bytes((int)C),
                              matmul_backward_scratch_bytes((int)N, (int)std::max(4 * C, QKV)),
                              encoder_backward_scratch_bytes(maxB_, maxT_),
                              global_norm_scratch_bytes()});
  kscratch_ = c.take<char>(kscratch_bytes_);
  norm_ = c.take<double>(1);
  line("backward scratch (activation grads, reductions)");
  workspace_ = c.take<char>(matmul_workspace_bytes());
  line("cuBLASLt workspace");
  if (c.base == nullptr) plan_ = lines;
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

size_t GptCuda::peak_memory_bytes() const {
  measure();
  return std::max(peak_used_, total_bytes_);
}

float GptCuda::forward(const int* inputs, const int* targets, int B, int T) {
  CHECK(B >= 1 && B <= maxB_ && T >= 1 && T <= maxT_,
        "batch %dx%d exceeds the model's allocation %dx%d", B, T, maxB_, maxT_);
  const int C = cfg_.channels, L = cfg_.num_layers, V = cfg_.vocab_size,
            Vp = cfg_.padded_vocab_size, QKV = cfg_.qkv_channels();
  const int N = B * T;
  const size_t NC = maxN() * C, NQKV = maxN() * QKV, Nrows = maxN();
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
  const AttnShape s = shape(B, T);
  cudaStream_t st = stream_;

  encoder_forward(encoded_, inputs_, param(P_WTE), param(P_WPE), B, T, C, st);
  for (int l = 0; l < L; l++) {
    floatX* residual = l == 0 ? encoded_ : residual3_ + (l - 1) * NC;
    floatX* ln1 = ln1_ + l * NC;
    floatX* qkv = qkv_ + l * NQKV;
    floatX* atty = atty_ + l * NC;
    floatX* residual2 = residual2_ + l * NC;
    floatX* ln2 = ln2_ + l * NC;
    floatX* fch = fch_ + l * 4 * NC;
    floatX* fch_gelu = fch_gelu_ + l * 4 * NC;
    floatX* residual3 = residual3_ + l * NC;
    layernorm_forward(ln1, ln1_mean_ + l * Nrows, ln1_rstd_ + l * Nrows, residual,
                      param(P_LN1W) + l * C, param(P_LN1B) + l * C, N, C, st);
    matmul_forward(qkv, ln1, param(P_QKVW) + (size_t)l * QKV * C, param(P_QKVB) + l * QKV, N, C,
                   QKV, st);
    AttnForwardArgs fa{atty, att_saved_ + l * saved_per_layer_, att_scratch_, qkv, s};
    attn_->forward(fa, st);
    matmul_forward_residual(residual2, atty, param(P_ATTPROJW) + (size_t)l * C * C,
                            param(P_ATTPROJB) + l * C, residual, N, C, C, st);
    layernorm_forward(ln2, ln2_mean_ + l * Nrows, ln2_rstd_ + l * Nrows, residual2,
                      param(P_LN2W) + l * C, param(P_LN2B) + l * C, N, C, st);
    matmul_forward_gelu(fch_gelu, fch, ln2, param(P_FCW) + (size_t)l * 4 * C * C,
                        param(P_FCB) + l * 4 * C, N, C, 4 * C, st);
    matmul_forward_residual(residual3, fch_gelu, param(P_FCPROJW) + (size_t)l * C * 4 * C,
                            param(P_FCPROJB) + l * C, residual2, N, 4 * C, C, st);
  }
  layernorm_forward(lnf_, lnf_mean_, lnf_rstd_, residual3_ + (L - 1) * NC, param(P_LNFW),
                    param(P_LNFB), N, C, st);
  matmul_forward(logits_, lnf_, param(P_WTE), nullptr, N, C, Vp, st);
  if (!have_targets_) return 0.0f;
  // Losses, and dlogits for d(mean loss) in place over the logits (see the top of the file).
  classifier(losses_, logits_, logits_, targets_, 1.0f / N, N, V, Vp, st);
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
  const size_t NC = maxN() * C, NQKV = maxN() * QKV, Nrows = maxN();
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

  // dlogits (for dloss = 1/N) are in logits_; loss_scale enters as the product's dout scale.
  matmul_backward(dl_btc_, grad(P_WTE), nullptr, logits_, lnf_, param(P_WTE), N, C, Vp, ks, st,
                  loss_scale);
  CUDA_CHECK(cudaMemsetAsync(dresidual_, 0, (size_t)N * C * sizeof(floatX), st));
  layernorm_backward(dresidual_, grad(P_LNFW), grad(P_LNFB), dl_btc_, residual3_ + (L - 1) * NC,
                     param(P_LNFW), lnf_mean_, lnf_rstd_, N, C, ks, st);
  for (int l = L - 1; l >= 0; l--) {
    // dresidual holds d(residual3[l]); residual3 = residual2 + fcproj passes it to both.
    floatX* residual = l == 0 ? encoded_ : residual3_ + (l - 1) * NC;
    // d(fch) = (dresidual @ fcprojw) * gelu'(fch): the GELU backward rides in the epilogue.
    matmul_backward(dl_bt4c_, grad(P_FCPROJW) + (size_t)l * C * 4 * C, grad(P_FCPROJB) + l * C,
                    dresidual_, fch_gelu_ + l * 4 * NC, param(P_FCPROJW) + (size_t)l * C * 4 * C,
                    N, 4 * C, C, ks, st, 1.0f, fch_ + l * 4 * NC);
    matmul_backward(dl_btc_, grad(P_FCW) + (size_t)l * 4 * C * C, grad(P_FCB) + l * 4 * C,
                    dl_bt4c_, ln2_ + l * NC, param(P_FCW) + (size_t)l * 4 * C * C, N, C, 4 * C,
                    ks, st);
    // dresidual += ln2 path: now d(residual2[l])
    layernorm_backward(dresidual_, grad(P_LN2W) + l * C, grad(P_LN2B) + l * C, dl_btc_,
                       residual2_ + l * NC, param(P_LN2W) + l * C, ln2_mean_ + l * Nrows,
                       ln2_rstd_ + l * Nrows, N, C, ks, st);
    matmul_backward(dl_btc_, grad(P_ATTPROJW) + (size_t)l * C * C, grad(P_ATTPROJB) + l * C,
                    dresidual_, atty_ + l * NC, param(P_ATTPROJW) + (size_t)l * C * C, N, C, C,
                    ks, st);
    floatX* dqkv = dl_bt4c_;
    AttnBackwardArgs ba{dqkv, att_scratch_, dl_btc_, qkv_ + l * NQKV, atty_ + l * NC,
                        att_saved_ + l * saved_per_layer_, s};
    attn_->backward(ba, st);
    matmul_backward(dl_btc_, grad(P_QKVW) + (size_t)l * QKV * C, grad(P_QKVB) + l * QKV, dqkv,
                    ln1_ + l * NC, param(P_QKVW) + (size_t)l * QKV * C, N, C, QKV, ks, st);
    // dresidual += ln1 path: d(residual3[l-1]) (or d(encoded) for l = 0)
    layernorm_backward(dresidual_, grad(P_LN1W) + l * C, grad(P_LN1B) + l * C, dl_btc_, residual,
                       param(P_LN1W) + l * C, ln1_mean_ + l * Nrows, ln1_rstd_ + l * Nrows, N, C,
                       ks, st);
    if (overlap) reduce_async(kLayerTensors, 12, l);  // layer l's gradients are final
  }
  encoder_backward(grad(P_WTE), grad(P_WPE), dresidual_, inputs_, B, T, C, kscratch_, st);
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
  const int C = cfg_.channels, Vp = cfg_.padded_vocab_size;
  attach();
  matmul_forward(logits_row_, lnf_ + (size_t)t * C, param(P_WTE), nullptr, 1, C, Vp, stream_);
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
