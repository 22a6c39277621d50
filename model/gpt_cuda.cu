// gpt_cuda.cu — the CUDA GPT-2 model: the CPU reference model's maths (model/gpt_cpu.h, the
// layer list is there) on the GPU in floatX (bf16 by default) with fp32 master weights. This
// file: construction and memory, parameters and optimizer state in and out, generation with a
// KV cache; a training step's maths (forward, backward, AdamW): gpt_cuda_step.cu; the class:
// gpt_cuda_impl.cuh.
//
// Types: parameters floatX (one allocation, llm.c order), fp32 master copy, fp32 gradients,
// fp32 AdamW m and v. Gradients are fp32 (not bf16 as in llm.c): micro-batch accumulation and
// the small per-step updates stay exact to fp32, and the dweight GEMMs accumulate into them
// directly (cuBLASLt beta = 1, fp32 D; same speed, the output is tiny next to the operands).
// Activations floatX, LayerNorm statistics and losses fp32.
//
// Generation (ModelOptions.kv_cache = rows): prefill() is a forward over the prompt that
// also copies every layer's K and V (after RoPE) into the cache (two strided 2-D copies per
// layer and run of rows); decode() runs one token through block_forward with decode_pos = its
// position: the same kernels on one row, and attention_decode_ring (split-K online softmax over
// the cache rows its mask lets it see; a sliding window keeps a ring: model/kv_cache.h).
//
// Memory: every device buffer is a line of FLASHGPT_MODEL_BUFFERS (model/memory_plan.h, with its
// shape), sized at construction for (maxB, maxT) by plan_memory() (host code: --plan-only and
// profile print the same numbers), allocated in one cudaMalloc after comparing with
// cudaMemGetInfo and carved by the same table into b_; memory_plan() lists the lines, and
// peak_memory_bytes() is measured (cudaMemGetInfo before construction vs. the
// lowest free memory seen since: includes cuBLAS handles and the CUDA runtime's allocations).
// Host syncs: forward with targets reads the mean loss (4 bytes); optimizer_step() reads the
// gradient norm (a double), after AdamW is queued behind it: the clip scale is computed on the
// GPU, so the GPU does not wait for the host there (with peers it waits for the whole stream,
// watching for a failed rank). Nothing else in a training step waits for
// the GPU (attention_ms() waits when asked).
//
// Multi-GPU (ModelOptions.comm, one process per GPU): the gradient all-reduce overlapped with
// the backward, and ZeRO-1, are model/grad_comm.cuh's; the model calls it at the points named
// there (layer_done, reduce_grads, the AdamW ranges, ...).
#include "model/gpt_cuda.cuh"

#include <exception>

#include "model/dist_comm.h"
#include "model/gpt_cuda_impl.cuh"

namespace gpt_cuda {

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
  comm_ = std::make_unique<GradComm>(opt.comm, opt.zero, opt.overlap_comm, layout_,
                                     cfg_.num_layers);
  CHECK(maxT_ >= 1 && maxT_ <= cfg_.max_seq_len,
        "--seq-len %d is larger than the model's maximum %d; lower --seq-len", maxT_,
        cfg_.max_seq_len);
  CHECK(maxB_ >= 1, "--batch must be at least 1 (got %d)", maxB_);
  if (opt.cp > 1) {  // context parallel: this rank holds its zigzag share of each sequence
#if defined(ENABLE_FP32)
    THROW_ERROR("--cp %d needs the bf16 build: the ring's kernels are bf16", opt.cp);
#else
    CHECK(opt.comm != nullptr && (opt.cp_comm != nullptr || opt.cp_transport != nullptr),
          "internal: --cp %d without its communicators", opt.cp);
    CHECK(opt.cp_rank >= 0 && opt.cp_rank < opt.cp, "internal: cp rank %d of %d", opt.cp_rank,
          opt.cp);
    CHECK(opt.kv_cache == 0, "--cp %d is for training: sample and prefill run on one GPU",
          opt.cp);
    CHECK(!opt.deterministic,
          "--deterministic with --cp %d: the ring's backward adds dQ in arrival order; drop "
          "--deterministic or use --cp 1", opt.cp);
    cp_ = std::make_unique<CpLayout>(opt.cp, maxT_);  // names --cp and --seq-len when T < 2 cp
    cp_rank_ = opt.cp_rank;
    world_comm_ = opt.comm;
    cp_comm_ = opt.cp_comm;
    maxT_ = cp_->max_local_len();
#endif
  }
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    cudaGetLastError();
    THROW_ERROR("--device cuda: no CUDA GPU is visible (cudaGetDeviceCount found none); use --device cpu");
  }
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  device_name_ = prop.name;
  attn_ = make_attention(opt.attn);
  const AttnShape s = shape(maxB_, maxT_);
  validate_mask_spec(opt.mask, cfg_.vocab_size);
  mask_spec_ = opt.mask;
  const std::string why = attn_->unsupported_reason(s, mask_spec_);
  CHECK(why.empty(), "--attn %s cannot run this model: %s", opt.attn.c_str(), why.c_str());
  CHECK(!cp_ || attn_->supports_ring(),
        "--attn %s cannot run context parallel (--cp %d): it saves more than the LSE; use --attn "
        "flash or flash3", attn_->name(), opt.cp);
  recompute_ = opt.recompute;
  deterministic_ = opt.deterministic;
  tune_matmul_ = opt.tune_matmul;
  cuda_graphs_ = opt.cuda_graphs && opt.comm == nullptr && opt.cp == 1 && !opt.time_attention;
  CHECK(opt.kv_cache >= 0, "internal: negative KV cache length");
  CHECK(!cfg_.rope || cfg_.head_size() % 2 == 0, "RoPE needs an even head size (C / NH = %d)",
        cfg_.head_size());
  kv_ = KvCache(cfg_, mask_spec_, opt.kv_cache, maxT_);
  MemoryPlanInputs in = memory_plan_inputs(opt);
  in.params_alloc = comm_->params_alloc();
  in.opt_size = comm_->opt_size();
  guard_bytes_ = in.guard_bytes;
  plan_ = plan_memory(in);
  // Forward, backward and recomputed forward of every layer between two attention_ms() calls.
  if (opt.time_attention) att_timer_ = std::make_unique<CudaEventTimer>(4 * cfg_.num_layers + 4);

  CUDA_CHECK(cudaStreamCreate(&stream_));
  CUDA_CHECK(cudaStreamCreate(&wgrad_stream_));
  for (int i = 0; i < kWgradForks; i++) {
    CUDA_CHECK(cudaEventCreateWithFlags(&chain_ready_[i], cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&wgrad_done_[i], cudaEventDisableTiming));
  }
  CUDA_CHECK(cudaEventCreateWithFlags(&inputs_copied_, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&norm_copied_, cudaEventDisableTiming));
  size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  free_at_start_ = free_b;

  total_bytes_ = plan_.total;
  // Headroom for what is not in the plan: cuBLAS/cuBLASLt handles and the CUDA runtime.
  const size_t headroom = 256ull << 20;
  if (total_bytes_ + headroom > free_b) {
    const bool naive = std::string(attn_->name()) == "naive";
    const char* less = recompute_ == Recompute::kLayer ? ""
                       : recompute_ == Recompute::kLayerButAttn
                           ? ", or --recompute layer"
                           : ", or --recompute layer-but-attn or layer";
    THROW_ERROR("the CUDA model needs %.2f GiB of GPU memory (%.2f GiB of it attention's saved state), "
                "%.2f GiB free on %s; lower --batch or --seq-len%s%s",
                (total_bytes_ + headroom) / kGiB, plan_.buffers[kBuf_att_saved].bytes / kGiB,
                free_b / kGiB, device_name_.c_str(), naive ? ", use --attn flash" : "", less);
  }
  cudaError_t err = cudaMalloc(&mem_, total_bytes_);
  if (err != cudaSuccess) {
    cudaGetLastError();
    THROW_ERROR("cudaMalloc of %.2f GiB failed (%s) with %.2f GiB reported free; lower --batch or "
                "--seq-len", total_bytes_ / kGiB, cudaGetErrorString(err), free_b / kGiB);
  }
  b_.carve(mem_, plan_);
  if (cp_) {
    const CpRingElems e = cp_ring_elems(*cp_, maxB_, cfg_.num_heads, cfg_.num_kv_heads,
                                        cfg_.head_size());
    ring_bufs_ = carve_ring_buffers(b_.cp_kv, b_.cp_dkv, b_.cp_o, e);
    ring_ = std::make_unique<RingAttention>(
        *cp_, cp_rank_,
        opt.cp_transport ? borrow_ring_transport(opt.cp_transport)
                         : make_dist_ring_transport(*opt.cp_comm));
    ring_->set_timing(opt.time_attention);
  }
  comm_->attach(b_.grads, b_.params, b_.master, stream_);
  if (guard_bytes_) {  // the pattern cuda_model_guard_violations() checks
    for (const PlannedBuffer& pb : plan_.buffers)
      if (pb.bytes)
        CUDA_CHECK(cudaMemsetAsync(mem_ + pb.offset + pb.bytes, kGuardByte,
                                   guard_end(pb) - (pb.offset + pb.bytes), stream_));
  }
  if (cfg_.rope) {  // cos/sin table made in double on the host (kernels/rope.h says why)
    std::vector<float> table(plan_.rope_rows * cfg_.head_size());
    rope_table_ref(table.data(), (int)plan_.rope_rows, cfg_.head_size(), cfg_.rope_theta);
    CUDA_CHECK(cudaMemcpy(b_.rope_table, table.data(), table.size() * sizeof(float),
                          cudaMemcpyHostToDevice));
  }
  CUDA_CHECK(cudaMallocHost(&h_tokens_, 2 * maxN() * sizeof(int)));
  CUDA_CHECK(cudaMallocHost(&h_loss_, sizeof(float)));
  CUDA_CHECK(cudaMallocHost(&h_norm_, sizeof(double)));
  if (b_.rope_decode) CUDA_CHECK(cudaMallocHost(&h_rope_row_, cfg_.head_size() * sizeof(float)));

  // Deterministic initialisation, the same values as the CPU model (and on every rank).
  const size_t P = comm_->params_alloc(), S = comm_->opt_size();  // ZeRO-1 padding included
  CUDA_CHECK(cudaMemsetAsync(b_.params, 0, P * sizeof(floatX), stream_));
  CUDA_CHECK(cudaMemsetAsync(b_.master, 0, P * sizeof(float), stream_));
  upload(b_.master, gpt_init_params(cfg_, opt.seed), layout_.total, "initial parameters");
  CUDA_CHECK(cudaMemsetAsync(b_.grads, 0, P * sizeof(float), stream_));
  CUDA_CHECK(cudaMemsetAsync(b_.m, 0, S * sizeof(float), stream_));
  CUDA_CHECK(cudaMemsetAsync(b_.v, 0, S * sizeof(float), stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  measure();
}

GptCuda::~GptCuda() { release(); }

void GptCuda::release() {
  // Pending collectives finish first; one that never completes may still occupy the stream:
  // then the memory is left to the process exit that follows rather than waited on here.
  // After an error, a ring transfer to a failed peer may still spin on this GPU, and the drain's
  // abort of the world's communicator frees memory, which waits for the whole device: the cp
  // group's communicator is aborted first (without it rank 0 of 2 GPUs hangs there).
  if (cp_comm_ && std::uncaught_exceptions() > 0) {
    cp_comm_->abort();
    cp_comm_ = nullptr;
  }
  if (comm_ && !comm_->drain()) return;
  if (stream_) cudaStreamSynchronize(stream_);
  if (wgrad_stream_) cudaStreamSynchronize(wgrad_stream_);
  drop_graph(fwd_graph_);
  drop_graph(bwd_graph_);
  ring_.reset();
  if (mem_ && b_.workspace) matmul_init(nullptr, 0);  // detach our workspace from cuBLASLt calls
  if (mem_) cudaFree(mem_);
  if (h_tokens_) cudaFreeHost(h_tokens_);
  if (h_loss_) cudaFreeHost(h_loss_);
  if (h_norm_) cudaFreeHost(h_norm_);
  if (h_rope_row_) cudaFreeHost(h_rope_row_);
  if (inputs_copied_) cudaEventDestroy(inputs_copied_);
  if (norm_copied_) cudaEventDestroy(norm_copied_);
  for (int i = 0; i < kWgradForks; i++) {
    if (chain_ready_[i]) cudaEventDestroy(chain_ready_[i]);
    if (wgrad_done_[i]) cudaEventDestroy(wgrad_done_[i]);
    chain_ready_[i] = wgrad_done_[i] = nullptr;
  }
  att_timer_.reset();
  comm_.reset();
  if (stream_) cudaStreamDestroy(stream_);
  if (wgrad_stream_) cudaStreamDestroy(wgrad_stream_);
  wgrad_stream_ = nullptr;
  mem_ = nullptr;
  b_ = DeviceBuffers{};
  h_tokens_ = nullptr;
  h_loss_ = nullptr;
  h_norm_ = nullptr;
  h_rope_row_ = nullptr;
  inputs_copied_ = nullptr;
  norm_copied_ = nullptr;
  stream_ = nullptr;
}

// The end of buffer pb's guard: the next buffer's offset (its 256-byte rounding and the guard).
size_t GptCuda::guard_end(const PlannedBuffer& pb) const {
  return pb.offset + (pb.bytes + guard_bytes_ + 255) / 256 * 256;
}

void GptCuda::write_past_end(const std::string& name, size_t bytes) {
  for (const PlannedBuffer& pb : plan_.buffers)
    if (name == pb.name && pb.bytes) {
      CHECK(bytes <= guard_end(pb) - (pb.offset + pb.bytes), "write_past_end: past the guard");
      CUDA_CHECK(cudaMemsetAsync(mem_ + pb.offset + pb.bytes, 0, bytes, stream_));
      return;
    }
  THROW_ERROR("write_past_end: no buffer '%s' in the plan", name.c_str());
}

std::vector<std::string> GptCuda::guard_violations() const {
  std::vector<std::string> bad;
  if (!guard_bytes_) return bad;
  sync();
  std::vector<unsigned char> host;
  for (const PlannedBuffer& pb : plan_.buffers) {
    if (!pb.bytes) continue;
    const size_t begin = pb.offset + pb.bytes, n = guard_end(pb) - begin;
    host.resize(n);
    CUDA_CHECK(cudaMemcpy(host.data(), mem_ + begin, n, cudaMemcpyDeviceToHost));
    size_t first = n;
    for (size_t i = 0; i < n && first == n; i++)
      if (host[i] != kGuardByte) first = i;
    if (first < n)
      bad.push_back(flashgpt::strformat("%s (%zu bytes planned): written %zu bytes past its end",
                                        pb.name, pb.bytes, first + 1));
  }
  return bad;
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

void GptCuda::logits_at(int t, float* out) {
  CHECK(t >= 0 && t < T_, "logits_at(%d) outside the last forward's length %d", t, T_);
  logits_row(b_.lnf + (size_t)t * cfg_.channels, out);
}

void GptCuda::logits_row(const floatX* lnf_row, float* out) {
  const int C = cfg_.channels, Vp = cfg_.padded_vocab_size;
  attach();
  matmul_forward(b_.logits_row, lnf_row, param(P_WTE), nullptr, 1, C, Vp, stream_);
  std::vector<floatX> row(Vp);
  CUDA_CHECK(cudaMemcpyAsync(row.data(), b_.logits_row, Vp * sizeof(floatX), cudaMemcpyDeviceToHost,
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
  kv_.check_prefill(n);
  kv_fill_ = true;
  try {
    forward(tokens, nullptr, 1, n);
  } catch (...) {
    kv_fill_ = false;
    throw;
  }
  kv_fill_ = false;
  kv_.prefilled(tokens, n);
  logits_at(n - 1, logits);
}

void GptCuda::decode(int token, float* logits) {
  const int C = cfg_.channels, L = cfg_.num_layers, pos = kv_.positions();
  kv_.check_decode(token);
  attach();
  CUDA_CHECK(cudaEventSynchronize(inputs_copied_));
  h_tokens_[0] = token;
  CUDA_CHECK(cudaMemcpyAsync(b_.inputs, h_tokens_, sizeof(int), cudaMemcpyHostToDevice, stream_));
  if (cfg_.rope) {  // this position's rotation: any position, past the table's (memory_plan.h)
    rope_table_ref(h_rope_row_, 1, cfg_.head_size(), cfg_.rope_theta, pos);
    CUDA_CHECK(cudaMemcpyAsync(b_.rope_decode, h_rope_row_, cfg_.head_size() * sizeof(float),
                               cudaMemcpyHostToDevice, stream_));
  }
  CUDA_CHECK(cudaEventRecord(inputs_copied_, stream_));
  kv_.decoded(token);
  encoder_forward(b_.encoded, b_.inputs, param(P_WTE),
                  cfg_.rope ? nullptr : param(P_WPE) + (size_t)pos * C, 1, 1, C, stream_);
  for (int l = 0; l < L; l++) block_forward(l, 1, 1, pos);
  const size_t NC = maxN() * C;
  layernorm_forward(b_.lnf, b_.lnf_mean, b_.lnf_rstd, b_.residual3 + (L - 1) * NC, param(P_LNFW),
                    param(P_LNFB), 1, C, stream_);
  T_ = 1;  // logits_at(0) is this token's
  have_targets_ = false;
  logits_row(b_.lnf, logits);
}

void GptCuda::download(std::vector<float>& out, const float* src, size_t n) const {
  out.resize(n);
  CUDA_CHECK(cudaMemcpyAsync(out.data(), src, n * sizeof(float), cudaMemcpyDeviceToHost, stream_));
  sync();
}

void GptCuda::upload(float* dst, const std::vector<float>& in, size_t n, const char* what) {
  CHECK(in.size() == n, "%s: %zu values where the model expects %zu", what, in.size(), n);
  CUDA_CHECK(cudaMemcpyAsync(dst, in.data(), n * sizeof(float), cudaMemcpyHostToDevice, stream_));
  if (dst == b_.master) copy_float_to_floatX(b_.params, b_.master, layout_.total, stream_);
  sync();
}

void GptCuda::get_params(std::vector<float>& out) const {
  comm_->gather_master();  // ZeRO-1: the master weights outside this rank's slice are stale
  download(out, b_.master, layout_.total);
}
void GptCuda::set_params(const std::vector<float>& in) {
  upload(b_.master, in, layout_.total, "set_params");
}
void GptCuda::get_adam_state(std::vector<float>& m, std::vector<float>& v) const {
  download(m, b_.m, comm_->opt_size());
  download(v, b_.v, comm_->opt_size());
}
void GptCuda::set_adam_state(const std::vector<float>& m, const std::vector<float>& v) {
  upload(b_.m, m, comm_->opt_size(), "optimizer state m");
  upload(b_.v, v, comm_->opt_size(), "optimizer state v");
}

}  // namespace gpt_cuda

using gpt_cuda::GptCuda;

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

// The kernels' scratch sizes (their CUDA-free headers) with this build's floatX and CUB's own
// sort temporary (host functions; a GPU must be present for CUB to answer).
MemoryPlanInputs memory_plan_inputs(const ModelOptions& opt) {
  if (!cuda_device_available()) return memory_plan_inputs_host(opt);
  return memory_plan_inputs_for(opt, sizeof(floatX),
                                encoder_sort_temp_bytes(opt.B, plan_rows_per_sequence(opt)));
}

bool cuda_device_available() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return n > 0;
}

// opt.attn "auto" (the default): the first backend in registry order that supports the shape.
std::unique_ptr<Model> make_cuda_model(const ModelOptions& opt) {
  if (opt.attn != "auto") return std::make_unique<GptCuda>(opt);
  const GPTConfig& c = opt.config;
  ModelOptions chosen = opt;
  chosen.attn = attention_auto({opt.B, opt.T, c.num_heads, c.num_kv_heads, c.head_size()},
                               sizeof(floatX), opt.mask);
  return std::make_unique<GptCuda>(chosen);
}

void cuda_model_get_grads(const Model& m, std::vector<float>& out) {
  const GptCuda* g = dynamic_cast<const GptCuda*>(&m);
  CHECK(g != nullptr, "cuda_model_get_grads: not a CUDA model");
  g->get_grads(out);
}

std::vector<std::string> cuda_model_guard_violations(const Model& m) {
  const GptCuda* g = dynamic_cast<const GptCuda*>(&m);
  CHECK(g != nullptr, "cuda_model_guard_violations: not a CUDA model");
  return g->guard_violations();
}

void cuda_model_write_past_end(Model& m, const std::string& name, size_t bytes) {
  GptCuda* g = dynamic_cast<GptCuda*>(&m);
  CHECK(g != nullptr, "cuda_model_write_past_end: not a CUDA model");
  g->write_past_end(name, bytes);
}

long long cuda_model_graph_launches(const Model& m) {
  const GptCuda* g = dynamic_cast<const GptCuda*>(&m);
  CHECK(g != nullptr, "cuda_model_graph_launches: not a CUDA model");
  return g->graph_launches();
}
