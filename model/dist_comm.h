// dist_comm — the multi-GPU process group as the model sees it: one communicator per process,
// one GPU per process (model/nccl_comm.cu implements it on NCCL; the trainer's train/dist.*
// finds the ranks and exchanges the NCCL id). Free of CUDA and NCCL types, so g++-compiled code
// can hold it; make_nccl_comm() in a CPU-only build throws.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

// A contiguous piece of device memory that a point-to-point exchange sends or fills.
struct CommSpan {
  void* ptr;
  size_t bytes;
};

class DistComm {
 public:
  virtual ~DistComm() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  virtual void* nccl_comm() const = 0;  // the ncclComm_t
  // The cudaStream_t (as void*) every collective goes on, the model's own: one stream per
  // communicator keeps the collectives in the same order on every rank.
  virtual void set_stream(void* stream) = 0;
  // Mean of x over the ranks (collective: every rank calls it).
  virtual float all_reduce_mean(float x) = 0;
  // Point to point, on a cudaStream_t (given as void*): sends each span of `send` (device
  // memory) to rank `to` and receives each span of `recv` from rank `from`, in order, as one
  // group, so that a ring of ranks each sending to the next and receiving from the previous
  // cannot deadlock (the context-parallel ring's hops, model/ring_attention.cuh). Every rank of
  // the ring calls it at the same point, the receiver with spans of the sender's sizes; the
  // stream's later work sees `recv` filled. Either list may be empty (a one-way exchange).
  virtual void send_recv(const std::vector<CommSpan>& send, int to,
                         const std::vector<CommSpan>& recv, int from, void* stream) = 0;
  // Waits for a cudaStream_t (given as void*) to drain, watching for NCCL errors, a failed peer
  // (peer_failed() returns its message) and the timeout; throws flashgpt::Error on any.
  // timeout_s < 0: the communicator's own timeout.
  virtual void wait(void* stream, double timeout_s = -1) = 0;
  // Aborts the communicator (pending collectives end on every rank); safe to call twice.
  virtual void abort() = 0;
  // A new communicator of the ranks that pass the same color, ranked by key (ncclCommSplit;
  // collective: every rank of this one calls it). It watches the same failure markers with the
  // same timeout, has its own stream (set_stream to change it) and its own abort(). Context
  // parallelism: split(dp_index, cp_index) gives each cp group its own ring, so the ring's
  // send/recv never interleave with the gradient all-reduce on this communicator.
  virtual std::unique_ptr<DistComm> split(int color, int key) = 0;
};
// Rank 0 makes the NCCL unique id, exchange_id(id, 128) passes it (rank 0 sends, the others
// receive), then cudaSetDevice(local_rank) and ncclCommInitRank.
std::unique_ptr<DistComm> make_nccl_comm(int rank, int world, int local_rank,
                                         const std::function<void(unsigned char*)>& exchange_id,
                                         const std::function<std::string()>& peer_failed,
                                         double timeout_s);

