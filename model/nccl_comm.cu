// nccl_comm.cu — DistComm on NCCL: one communicator per process, one GPU per process.
//
// Creation: rank 0 calls ncclGetUniqueId; the id travels to the other ranks through the
// trainer's exchange (train/dist.cpp: a shared file or TCP); every rank sets its device
// (local rank) and calls ncclCommInitRank. split() makes sub-communicators (the cp groups of
// context parallelism) with ncclCommSplit (NCCL >= 2.18). Blocking communicator: the collectives are enqueued
// on the model's stream without host waits; the host waits only in wait(), which polls the
// stream, ncclCommGetAsyncError, the peers' failure markers and a timeout, so a dead or failed
// rank ends the others with a message instead of a hang.
#include "model/nccl_comm.cuh"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "kernels/cuda_common.cuh"

namespace {

using Clock = std::chrono::steady_clock;

// Runs a blocking NCCL call that returns only when every rank has made it (ncclCommInitRank,
// ncclCommSplit). A rank that fails before making it (bad data, no GPU) would leave the others
// there forever: a watchdog thread watches the peers' failure markers and the timeout meanwhile
// and ends this process with a message naming `what`.
ncclResult_t with_watchdog(int rank, const char* what, const std::function<std::string()>& peer_failed,
                           double timeout_s, const std::function<ncclResult_t()>& call) {
  std::atomic<bool> joined{false};
  std::thread watchdog([&] {
    const auto t0 = Clock::now();
    while (!joined.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (joined.load()) return;
      std::string why = peer_failed ? peer_failed() : "";
      double waited = std::chrono::duration<double>(Clock::now() - t0).count();
      if (why.empty() && waited < timeout_s) continue;
      if (why.empty())
        why = flashgpt::strformat("waited %.0f s in %s for the other ranks (--dist-timeout); is "
                                  "every rank running?", waited, what);
      std::fflush(stdout);
      std::fprintf(stderr, "flashgpt: error: rank %d: gave up in %s: %s\n", rank, what, why.c_str());
      std::fflush(stderr);
      std::_Exit(1);
    }
  });
  ncclResult_t result = call();
  joined.store(true);
  watchdog.join();
  return result;
}

class NcclComm : public DistComm {
 public:
  NcclComm(int rank, int world, int local_rank,
           const std::function<void(unsigned char*)>& exchange_id,
           std::function<std::string()> peer_failed, double timeout_s)
      : rank_(rank), world_(world), peer_failed_(std::move(peer_failed)), timeout_s_(timeout_s) {
    static_assert(sizeof(ncclUniqueId) == 128, "the exchange carries 128 bytes");
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
      cudaGetLastError();
      THROW_ERROR("no CUDA GPU is visible; multi-GPU training needs one GPU per process");
    }
    CHECK(local_rank < ndev, "local rank %d but only %d GPU(s) are visible to this process; "
          "start at most %d processes per node (or set CUDA_VISIBLE_DEVICES / --local-rank)",
          local_rank, ndev, ndev);
    CUDA_CHECK(cudaSetDevice(local_rank));
    setenv("NCCL_NVLS_ENABLE", "0", 0);  // NVLink multicast stays off unless asked for
    ncclUniqueId id;
    if (rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    exchange_id(reinterpret_cast<unsigned char*>(&id));
    NCCL_CHECK(with_watchdog(rank_, "ncclCommInitRank", peer_failed_, timeout_s_,
                             [&] { return ncclCommInitRank(&comm_, world, id, rank); }));
    create_buffers();
  }
  // A communicator made by split() of a parent: same device, failure markers and timeout.
  NcclComm(ncclComm_t comm, std::function<std::string()> peer_failed, double timeout_s)
      : peer_failed_(std::move(peer_failed)), timeout_s_(timeout_s), comm_(comm) {
    NCCL_CHECK(ncclCommUserRank(comm_, &rank_));
    NCCL_CHECK(ncclCommCount(comm_, &world_));
    create_buffers();
  }
  ~NcclComm() override {
    if (comm_) {
      cudaStreamSynchronize(stream_);
      ncclCommDestroy(comm_);
    }
    if (d_scalar_) cudaFree(d_scalar_);
    if (h_scalar_) cudaFreeHost(h_scalar_);
    if (own_stream_) cudaStreamDestroy(own_stream_);
  }

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  void* nccl_comm() const override { return comm_; }
  void set_stream(void* s) override { stream_ = s ? static_cast<cudaStream_t>(s) : own_stream_; }

  float all_reduce_mean(float x) override {
    CHECK(comm_, "the NCCL communicator was aborted after an error");
    *h_scalar_ = x;
    CUDA_CHECK(cudaMemcpyAsync(d_scalar_, h_scalar_, sizeof(float), cudaMemcpyHostToDevice, stream_));
    NCCL_CHECK(ncclAllReduce(d_scalar_, d_scalar_, 1, ncclFloat, ncclAvg, comm_, stream_));
    CUDA_CHECK(cudaMemcpyAsync(h_scalar_, d_scalar_, sizeof(float), cudaMemcpyDeviceToHost, stream_));
    wait(stream_);
    return *h_scalar_;
  }

  void send_recv(const std::vector<CommSpan>& send, int to, const std::vector<CommSpan>& recv,
                 int from, void* stream) override {
    CHECK(comm_, "the NCCL communicator was aborted after an error");
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    NCCL_CHECK(ncclGroupStart());
    for (const CommSpan& x : send) NCCL_CHECK(ncclSend(x.ptr, x.bytes, ncclUint8, to, comm_, s));
    for (const CommSpan& x : recv) NCCL_CHECK(ncclRecv(x.ptr, x.bytes, ncclUint8, from, comm_, s));
    NCCL_CHECK(ncclGroupEnd());
  }

  void wait(void* stream, double timeout_s = -1) override {
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    const double limit = timeout_s >= 0 ? timeout_s : timeout_s_;
    const auto t0 = Clock::now();
    auto last_marker_check = t0;
    for (long spin = 0;; spin++) {
      cudaError_t q = cudaStreamQuery(s);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) CUDA_CHECK(q);
      if (spin < 2000) continue;  // short waits (most of them) return without sleeping
      if (comm_) {
        ncclResult_t async = ncclSuccess;
        ncclCommGetAsyncError(comm_, &async);
        if (async != ncclSuccess && async != ncclInProgress)
          THROW_ERROR("NCCL reported %s while waiting for a collective (%s); another rank probably "
                      "failed", ncclGetErrorString(async), ncclGetLastError(comm_));
      }
      auto now = Clock::now();
      if (peer_failed_ && std::chrono::duration<double>(now - last_marker_check).count() > 0.2) {
        last_marker_check = now;
        std::string why = peer_failed_();
        if (!why.empty()) THROW_ERROR("%s", why.c_str());  // "rank R failed: cause"
      }
      double waited = std::chrono::duration<double>(now - t0).count();
      CHECK(waited < limit, "waited %.0f s for the GPU work of a step that includes collectives "
            "with the other ranks; one of them has probably failed or hangs (--dist-timeout)",
            waited);
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  void abort() override {
    if (comm_) {
      ncclCommAbort(comm_);
      comm_ = nullptr;
    }
  }

  std::unique_ptr<DistComm> split(int color, int key) override {
    CHECK(comm_, "the NCCL communicator was aborted after an error");
    CHECK(color >= 0 && key >= 0, "internal: split(color %d, key %d) needs both >= 0", color, key);
    ncclComm_t child = nullptr;
    NCCL_CHECK(with_watchdog(rank_, "ncclCommSplit", peer_failed_, timeout_s_,
                             [&] { return ncclCommSplit(comm_, color, key, &child, nullptr); }));
    CHECK(child, "internal: ncclCommSplit(color %d, key %d) returned no communicator", color, key);
    return std::make_unique<NcclComm>(child, peer_failed_, timeout_s_);
  }

 private:
  void create_buffers() {
    CUDA_CHECK(cudaMalloc(&d_scalar_, sizeof(float)));
    CUDA_CHECK(cudaMallocHost(&h_scalar_, sizeof(float)));
    CUDA_CHECK(cudaStreamCreate(&own_stream_));
    stream_ = own_stream_;
  }

  int rank_ = 0, world_ = 1;
  std::function<std::string()> peer_failed_;
  double timeout_s_;
  ncclComm_t comm_ = nullptr;
  float* d_scalar_ = nullptr;
  float* h_scalar_ = nullptr;
  cudaStream_t own_stream_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

}  // namespace

std::unique_ptr<DistComm> make_nccl_comm(int rank, int world, int local_rank,
                                         const std::function<void(unsigned char*)>& exchange_id,
                                         const std::function<std::string()>& peer_failed,
                                         double timeout_s) {
  return std::make_unique<NcclComm>(rank, world, local_rank, exchange_id, peer_failed, timeout_s);
}

std::unique_ptr<DistComm> adopt_nccl_comm(ncclComm_t comm, double timeout_s) {
  CHECK(comm != nullptr, "internal: no NCCL communicator to adopt");
  return std::make_unique<NcclComm>(comm, nullptr, timeout_s);
}
