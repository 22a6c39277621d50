// model — the interface the trainer drives; implemented by the CPU reference model
// (model/gpt_cpu.cpp, the oracle) and the CUDA model (model/gpt_cuda.cu).
//
// One training micro-step:  loss = forward(inputs, targets, B, T); backward(1/accum_steps);
// after the micro-steps:    norm = optimizer_step(...); zero_grad().
// All host-facing arrays are host memory; the CUDA model copies as needed.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/attention/mask.h"
#include "model/context_parallel.h"
#include "model/config.h"
#include "model/recompute.h"

struct AdamWHyper {
  float lr = 3e-4f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.0f;
};

struct MemoryLine {
  std::string what;  // "parameters", "gradients", "optimizer", "activations", "attention saved", ...
  size_t bytes = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const GPTConfig& config() const = 0;
  virtual const char* device_name() const = 0;  // "cpu" or the GPU's name
  virtual const char* attention_name() const = 0;  // the backend that runs ("auto" resolved)
  virtual size_t num_parameters() const = 0;

  // inputs, targets: (B, T) token ids, host memory. B, T must be <= the sizes given at creation.
  // Returns the mean loss over B*T positions; keeps what backward needs.
  // targets == nullptr: logits only (no loss; returns 0).
  virtual float forward(const int* inputs, const int* targets, int B, int T) = 0;
  // Accumulates parameter gradients of (loss_scale * mean loss) of the last forward.
  virtual void backward(float loss_scale) = 0;
  virtual void zero_grad() = 0;
  // Multi-GPU: average the gradients over the ranks (all-reduce, or reduce-scatter with
  // ZeRO-1). Called once per optimizer step after the last backward; no-op on one process.
  virtual void reduce_grads() {}
  // The next backward() is the last before reduce_grads(): the model may start averaging the
  // gradients of finished layers during it (overlap with the backward). Optional to call.
  virtual void mark_last_micro_step() {}
  virtual float grad_norm() = 0;  // global L2 norm of all parameter gradients
  // One optimizer step after the micro-steps: the global gradient norm, the gradients scaled by
  // clip_scale(norm, clip) (kernels/adamw.h: min(1, clip / norm); clip <= 0: none), one AdamW
  // step on every parameter (decay on matrices only). step counts from 1. Returns the norm
  // before clipping; a non-finite norm skips the update (parameters and moments unchanged).
  virtual float optimizer_step(const AdamWHyper& h, float clip, int step) = 0;
  // Logits (Vp floats, host) at position t of batch row 0 from the last forward.
  virtual void logits_at(int t, float* out) = 0;

  // fp32 master weights in llm.c order (ParamLayout), and the AdamW moments, for checkpoints.
  virtual void get_params(std::vector<float>& out) const = 0;
  virtual void set_params(const std::vector<float>& in) = 0;
  virtual void get_adam_state(std::vector<float>& m, std::vector<float>& v) const = 0;
  virtual void set_adam_state(const std::vector<float>& m, const std::vector<float>& v) = 0;
  // Elements of m (and of v) this process holds: num_parameters(), or its shard with ZeRO-1.
  // get_params() with ZeRO-1 gathers the master weights: every rank must call it.
  virtual size_t adam_state_size() const { return num_parameters(); }

  // The memory plan made at creation (one line per category) and the measured peak.
  virtual std::vector<MemoryLine> memory_plan() const = 0;
  virtual size_t peak_memory_bytes() const = 0;

  // Milliseconds spent in attention (forward, backward and any recomputed forward) since the
  // last call, measured with CUDA events around every attention call when the model was made
  // with ModelOptions.time_attention; -1 otherwise. Waits for the device.
  virtual double attention_ms() { return -1.0; }
  // Context parallel (--cp > 1) with ModelOptions.time_attention: this rank's ring times since
  // the last call (each step's attention, and the compute stream's waits for the ring: what
  // the overlap did not hide); empty otherwise. Waits for the device.
  virtual RingStepTimes cp_times() { return {}; }

  // Generation with a KV cache (ModelOptions.kv_cache > 0 rows, batch row 0 only):
  // prefill() runs the prompt (n <= ModelOptions.T tokens) as one forward, stores every
  // layer's keys and values (after RoPE) of positions 0..n-1 and writes the logits (Vp floats)
  // of its last position; decode() appends one token at the next position, attends over the
  // cache and writes that token's next-token logits. Both run under the model's mask: with a
  // sliding window W <= kv_cache rows the cache is a ring of the last W positions and decoding
  // goes on past the cache's size (model/kv_cache.h). Throws when no position is left.
  virtual void prefill(const int* tokens, int n, float* logits) = 0;
  virtual void decode(int token, float* logits) = 0;
  virtual int cached_positions() const = 0;  // prompt + decoded tokens so far
  virtual bool can_decode() const = 0;       // decode() has room for one more position
};

class DistComm;  // the multi-GPU process group: model/dist_comm.h
class RingTransport;  // how the context-parallel ring moves its blocks: model/ring_attention.cuh

struct ModelOptions {
  GPTConfig config;
  int B = 4, T = 64;            // largest micro-batch the model must hold
  std::string attn = "auto";    // attention backend name; auto: the CPU model's "flash", the
                                // CUDA model's first supported backend (attention_auto)
  uint64_t seed = 1337;         // parameter initialisation
  DistComm* comm = nullptr;     // multi-GPU (CUDA model only); nullptr = one process
  int zero = 0;                 // 1: ZeRO-1, AdamW state sharded over the ranks
  bool overlap_comm = true;     // multi-GPU without ZeRO: all-reduce per layer during backward
  // Long context (model/memory_plan.h has what each choice keeps):
  Recompute recompute = Recompute::kNone;  // what the backward recomputes (model/recompute.h)
  int classifier_chunk = 0;        // logits rows at once; 0 = kDefaultClassifierChunk
  int kv_cache = 0;                // positions of KV cache for prefill()/decode(); 0 = none
  bool time_attention = false;     // attention_ms(): CUDA events around attention calls
  // --deterministic: attention backends with a deterministic mode sum dQ in a fixed order, so
  // a step is bitwise reproducible (AttnBackwardArgs::deterministic); CUDA model only, the CPU
  // model always is.
  bool deterministic = false;
  // --tune-matmul: the CUDA model times cuBLASLt's candidate algorithms on each product's first
  // call (kernels/matmul.cuh); the choice may differ between processes.
  bool tune_matmul = false;
  // The CUDA model captures a forward with targets and a backward as CUDA graphs on their second
  // call of a shape and replays them after (one launch each instead of one per kernel); one
  // process without --cp and without time_attention only, else ignored. `train` sets it unless
  // --no-cuda-graphs.
  bool cuda_graphs = false;
  // --mask / --window (kernels/attention/mask.h): which keys attention lets each query see;
  // the document mask's documents come from each batch's input tokens.
  MaskSpec mask;
  size_t guard_bytes = 0;          // tests: guards after every device buffer (memory_plan.h)
  // Context parallelism (--cp, CUDA model only; model/context_parallel.h): each
  // sequence of T tokens (T above is the GLOBAL length) is split in 2*cp zigzag chunks; this
  // process holds chunks cp_rank and 2*cp-1-cp_rank. forward() still takes the whole (B, T)
  // batch (every cp rank of a dp group the same one), keeps its own rows of it (cp_scatter)
  // and returns the mean loss over all B*T tokens of the cp group. cp_comm: the cp group's
  // communicator (cp consecutive ranks); the gradient all-reduce stays on `comm` (the whole
  // dp x cp world).
  int cp = 1;
  int cp_rank = 0;
  DistComm* cp_comm = nullptr;
  // Tests: the ring's hops through this transport (ring_attention.cuh, LocalRingHub's: virtual
  // ranks on one GPU) instead of NCCL on cp_comm; not owned.
  RingTransport* cp_transport = nullptr;
};
constexpr int kDefaultClassifierChunk = 8192;

// GPT-2 initialisation (llm.c/nanoGPT): weights N(0, 0.02), residual projections
// (attprojw, fcprojw) N(0, 0.02/sqrt(2L)), biases 0, LayerNorm weight 1 / bias 0.
// Deterministic from the seed, and identical for the CPU and CUDA models.
std::vector<float> gpt_init_params(const GPTConfig& c, uint64_t seed);

std::unique_ptr<Model> make_cpu_model(const ModelOptions& opt);
// device "cpu", "cuda", or "auto" (cuda when a device is present). Prints nothing.
std::unique_ptr<Model> make_model(const std::string& device, const ModelOptions& opt);
// Throws flashgpt::Error when flashgpt was built without CUDA or no GPU is present.
std::unique_ptr<Model> make_cuda_model(const ModelOptions& opt);
bool cuda_device_available();  // false in CPU-only builds
// Free and total memory of the current GPU (cudaMemGetInfo) and its name; false without one.
bool cuda_memory_info(size_t& free_bytes, size_t& total_bytes, std::string& name);
