// grad_comm — how the CUDA model's gradients and parameters travel between ranks (one process
// per GPU, NCCL on the model's stream), kept apart from the model's maths as llm.c keeps zero.cuh
// apart from its model. On one process (no communicator, or world 1) every step is a no-op.
//
//   data parallel: the fp32 gradients are averaged with ncclAllReduce(avg) once per optimizer
//     step. Overlapped (default, --no-overlap turns it off): during the last micro-step's
//     backward (the trainer says which with mark_last_micro_step()), as soon as layer l's
//     backward is done (layer_done(l)) its 12 gradient slices are all-reduced as one NCCL group
//     on a second, high-priority stream (after an event on the model's stream), while the
//     backward goes on with layer l-1; wte, wpe and lnf (written last, by the encoder backward)
//     go at backward_done(); reduce_grads() then only makes the model's stream wait for them.
//     Not overlapped: reduce_grads() = one ncclAllReduce over the whole buffer. Then every rank
//     runs the same grad norm and AdamW.
//   ZeRO-1 (--zero 1): parameters, master weights and gradients are padded to
//     model/zero_shard.h's padded_total; reduce_grads() is an in-place ncclReduceScatter(avg)
//     that leaves this rank's slice [begin, begin + shard) averaged; the grad norm is the
//     ncclAllReduce(sum) of the slices' sums of squares; AdamW runs on the slice only, cut at
//     tensor boundaries so that weight decay stays per tensor (update_segments), with m and v
//     of shard size; then an in-place ncclAllGather of the floatX parameters. The fp32 master
//     weights outside the slice go stale and are gathered only when a checkpoint needs them
//     (gather_master; every rank calls it).
// Host waits go through DistComm::wait (sync), which notices failed peers instead of hanging.
// Test (2+ GPUs): scripts/test_multigpu.sh; the shard arithmetic: build/test_cpu
// --gtest_filter='Dist.Zero*' (tests/cpu/test_dist.cpp).
#pragma once
#include <vector>

#include "kernels/cuda_common.cuh"
#include "model/dist_comm.h"
#include "model/layout.h"
#include "model/zero_shard.h"

class GradComm {
 public:
  // comm: the process group, or nullptr on one process. zero: 1 for ZeRO-1. overlap: all-reduce
  // per layer during the last backward (ignored with ZeRO-1). layout: the model's parameters,
  // num_layers of them per (L, ...) tensor.
  GradComm(DistComm* comm, int zero, bool overlap, const ParamLayout& layout, int num_layers);
  ~GradComm();
  GradComm(const GradComm&) = delete;
  GradComm& operator=(const GradComm&) = delete;

  // Elements to allocate for parameters, master weights and gradients (ZeRO-1 pads them), and
  // for each of AdamW's m and v (this rank's shard with ZeRO-1).
  size_t params_alloc() const { return params_alloc_; }
  size_t opt_size() const { return opt_size_; }
  bool sharded() const { return zero_ != 0; }
  const ZeroShard& shard() const { return shard_; }

  // Once the buffers exist: they and the model's stream, on which every collective goes.
  void attach(float* grads, floatX* params, float* master, cudaStream_t stream);
  // Waits for the model's stream; with peers, watching for their failure.
  void sync() const;
  bool has_peers() const { return comm_ != nullptr; }

  void mark_last_micro_step() { last_micro_ = true; }
  // At the start of a backward: whether it reduces layer by layer (overlap, last micro-step).
  bool begin_backward();
  void layer_done(int layer);  // layer's gradient slices are final: all-reduce them
  void backward_done();        // wte, wpe, lnf are final: all-reduce them, mark the end
  void reduce_grads();         // after the last backward of an optimizer step

  // The gradients whose squared norm this rank computes: all of them, or its ZeRO-1 slice (its
  // padding holds zeros). sum_norm: that partial sum (device double) becomes the sum over the
  // ranks (ZeRO-1; otherwise every rank already holds all of it).
  size_t norm_begin() const { return zero_ ? shard_.begin : 0; }
  size_t norm_count() const { return zero_ ? shard_.shard_size : layout_.total; }
  void sum_norm(double* norm_dev);
  // The ranges AdamW updates on this rank: whole tensors, or ZeRO-1's segments. opt_offset is
  // where the range's m and v start.
  struct UpdateRange {
    int tensor;
    size_t begin, count, opt_offset;
  };
  const std::vector<UpdateRange>& update_ranges() const { return ranges_; }
  void after_update();  // ZeRO-1: all-gather the updated floatX parameters
  void gather_master(); // ZeRO-1: the master weights outside this rank's slice, before reading

  // Before the model frees its memory: pending collectives finish (briefly, while an exception
  // unwinds), or the communicator is aborted. false: a collective may still use the memory, so
  // the model must leave it to the process exit.
  bool drain();

 private:
  DistComm* comm_ = nullptr;
  int zero_ = 0;
  bool overlap_ = false;
  const ParamLayout& layout_;
  int L_;
  ZeroShard shard_;
  std::vector<UpdateRange> ranges_;
  size_t params_alloc_ = 0, opt_size_ = 0;
  float* grads_ = nullptr;   // (params_alloc)
  floatX* params_ = nullptr; // (params_alloc)
  float* master_ = nullptr;  // (params_alloc)
  cudaStream_t stream_ = nullptr;       // the model's
  cudaStream_t comm_stream_ = nullptr;  // overlapped all-reduces
  cudaEvent_t layer_done_ = nullptr;    // stream_ -> comm_stream_: a layer's gradients are final
  cudaEvent_t comm_done_ = nullptr;     // comm_stream_ -> stream_: all gradients reduced
  bool last_micro_ = false;             // the next backward is the last before reduce_grads()
  bool reduced_in_backward_ = false;
  bool multi() const { return comm_ && comm_->world() > 1; }
  void reduce_async(const int* tensors, int n, int layer);  // on comm_stream_, after stream_
};
