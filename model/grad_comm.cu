// grad_comm.cu — see grad_comm.cuh.
#include "model/grad_comm.cuh"

#include <exception>

#include "model/nccl_comm.cuh"

GradComm::GradComm(DistComm* comm, int zero, bool overlap, const ParamLayout& layout,
                   int num_layers)
    : comm_(comm), zero_(comm ? zero : 0), layout_(layout), L_(num_layers) {
  overlap_ = multi() && !zero_ && overlap;
  params_alloc_ = opt_size_ = layout.total;
  if (zero_) {
    shard_ = zero_shard(layout.total, comm_->world(), comm_->rank());
    params_alloc_ = shard_.padded_total;
    opt_size_ = shard_.shard_size;
    for (const ShardSegment& sg : shard_segments(layout.offsets.data(), layout.sizes.data(),
                                                 kNumParamTensors, shard_.begin, shard_.end))
      ranges_.push_back({sg.tensor, sg.begin, sg.count, sg.begin - shard_.begin});
  } else {
    for (int i = 0; i < kNumParamTensors; i++)
      ranges_.push_back({i, layout.offsets[i], layout.sizes[i], layout.offsets[i]});
  }
}

void GradComm::attach(float* grads, floatX* params, float* master, cudaStream_t stream) {
  grads_ = grads, params_ = params, master_ = master, stream_ = stream;
  if (comm_) comm_->set_stream(stream_);
  if (overlap_) {
    int lo = 0, hi = 0;
    CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
    CUDA_CHECK(cudaStreamCreateWithPriority(&comm_stream_, cudaStreamNonBlocking, hi));
    CUDA_CHECK(cudaEventCreateWithFlags(&layer_done_, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&comm_done_, cudaEventDisableTiming));
  }
}

GradComm::~GradComm() {
  if (layer_done_) cudaEventDestroy(layer_done_);
  if (comm_done_) cudaEventDestroy(comm_done_);
  if (comm_stream_) cudaStreamDestroy(comm_stream_);
}

void GradComm::sync() const {
  if (comm_) comm_->wait(stream_);
  else CUDA_CHECK(cudaStreamSynchronize(stream_));
}

bool GradComm::drain() {
  if (!stream_ || !comm_) return true;
  // Collectives may be pending: wait for them, but while an exception unwinds (a peer or this
  // rank failed) only briefly, then abort the communicator so the stream drains.
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
  return drained;
}

bool GradComm::begin_backward() {
  const bool overlap = overlap_ && last_micro_;
  last_micro_ = false;
  return overlap;
}

void GradComm::layer_done(int layer) {
  static const int kLayerTensors[] = {P_LN1W, P_LN1B, P_QKVW,    P_QKVB,    P_ATTPROJW, P_ATTPROJB,
                                      P_LN2W, P_LN2B, P_FCW,     P_FCB,     P_FCPROJW,  P_FCPROJB};
  reduce_async(kLayerTensors, 12, layer);
}

void GradComm::backward_done() {
  static const int kOtherTensors[] = {P_WTE, P_WPE, P_LNFW, P_LNFB};
  reduce_async(kOtherTensors, 4, -1);
  CUDA_CHECK(cudaEventRecord(comm_done_, comm_stream_));
  reduced_in_backward_ = true;
}

// All-reduces (average) the given tensors' gradients of one layer (layer >= 0: the layer's
// slice of each (L, ...) tensor) or whole (layer < 0), as one NCCL group on comm_stream_ once
// stream_ has reached this point.
void GradComm::reduce_async(const int* tensors, int n, int layer) {
  CHECK(comm_->nccl_comm(), "the NCCL communicator was aborted after an error");
  CUDA_CHECK(cudaEventRecord(layer_done_, stream_));
  CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, layer_done_, 0));
  const size_t L = L_;
  NCCL_CHECK(ncclGroupStart());
  for (int k = 0; k < n; k++) {
    const int i = tensors[k];
    const size_t count = layer >= 0 ? layout_.sizes[i] / L : layout_.sizes[i];
    float* g = grads_ + layout_.offsets[i] + (layer >= 0 ? (size_t)layer * count : 0);
    NCCL_CHECK(ncclAllReduce(g, g, count, ncclFloat, ncclAvg, as_nccl(comm_), comm_stream_));
  }
  NCCL_CHECK(ncclGroupEnd());
}

void GradComm::reduce_grads() {
  if (!multi()) return;
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

void GradComm::sum_norm(double* norm_dev) {
  if (zero_)
    NCCL_CHECK(ncclAllReduce(norm_dev, norm_dev, 1, ncclDouble, ncclSum, as_nccl(comm_), stream_));
}

void GradComm::after_update() {
  if (!zero_) return;
#if defined(ENABLE_FP32)
  const ncclDataType_t xtype = ncclFloat;
#else
  const ncclDataType_t xtype = ncclBfloat16;
#endif
  NCCL_CHECK(ncclAllGather(params_ + shard_.begin, params_, shard_.shard_size, xtype,
                           as_nccl(comm_), stream_));
}

void GradComm::gather_master() {
  if (!zero_) return;
  NCCL_CHECK(ncclAllGather(master_ + shard_.begin, master_, shard_.shard_size, ncclFloat,
                           as_nccl(comm_), stream_));
}
