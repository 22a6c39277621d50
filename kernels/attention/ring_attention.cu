// ring_attention.cu — the ring schedule of context parallelism; see ring_attention.cuh.
#include "kernels/attention/ring_attention.cuh"

#include <nccl.h>

#include <algorithm>

#define RING_NCCL_CHECK(call)                                                                 \
  do {                                                                                        \
    const ncclResult_t nccl_result_ = (call);                                                           \
    CHECK(nccl_result_ == ncclSuccess, "context parallel ring: %s failed: %s", #call,                 \
          ncclGetErrorString(nccl_result_));                                                            \
  } while (0)

RingAttention::RingAttention(const CpLayout& L, int r, std::unique_ptr<RingTransport> transport)
    : L_(L), r_(r), transport_(std::move(transport)) {
  CHECK(r >= 0 && r < L.cp(), "internal: ring rank %d of %d", r, L.cp());
  CHECK(L.cp() == 1 || transport_ != nullptr, "internal: ring of %d ranks without a transport",
        L.cp());
  CUDA_CHECK(cudaStreamCreateWithFlags(&comm_st_, cudaStreamNonBlocking));
}

RingAttention::~RingAttention() {
  for (cudaEvent_t e : sync_) cudaEventDestroy(e);
  for (cudaEvent_t e : timing_pool_) cudaEventDestroy(e);
  if (comm_st_) cudaStreamDestroy(comm_st_);
}

cudaEvent_t RingAttention::record(cudaStream_t s) {
  if (next_sync_ == sync_.size()) {
    cudaEvent_t e;
    CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    sync_.push_back(e);
  }
  cudaEvent_t e = sync_[next_sync_++];
  CUDA_CHECK(cudaEventRecord(e, s));
  return e;
}

void RingAttention::wait(cudaStream_t waiter, cudaEvent_t e, bool timed) {
  if (!(timing_ && timed)) {
    CUDA_CHECK(cudaStreamWaitEvent(waiter, e, 0));
    return;
  }
  // t0 completes when the waiter's earlier work is done, t1 when the wait is over: the gap is
  // the time the stream stood still for the ring.
  while (timing_pool_.size() < next_timing_ + 2) {
    cudaEvent_t t;
    CUDA_CHECK(cudaEventCreate(&t));
    timing_pool_.push_back(t);
  }
  cudaEvent_t t0 = timing_pool_[next_timing_++], t1 = timing_pool_[next_timing_++];
  CUDA_CHECK(cudaEventRecord(t0, waiter));
  CUDA_CHECK(cudaStreamWaitEvent(waiter, e, 0));
  CUDA_CHECK(cudaEventRecord(t1, waiter));
  waits_.push_back({t0, t1});
}

double RingAttention::comm_wait_ms() {
  double ms = 0.0;
  for (auto& w : waits_) {
    CUDA_CHECK(cudaEventSynchronize(w.second));
    float x = 0.f;
    CUDA_CHECK(cudaEventElapsedTime(&x, w.first, w.second));
    ms += x;
  }
  waits_.clear();
  next_timing_ = 0;
  return ms;
}

namespace {

class NcclRingTransport final : public RingTransport {
 public:
  NcclRingTransport(void* comm, int next, int prev)
      : comm_(static_cast<ncclComm_t>(comm)), next_(next), prev_(prev) {}
  void hop(const void* send, size_t send_bytes, void* recv, size_t recv_bytes,
           cudaStream_t stream) override {
    // Send and receive in one group: every rank sends and receives at once, no deadlock round
    // the ring (for cp = 2 next and prev are the same rank).
    RING_NCCL_CHECK(ncclGroupStart());
    RING_NCCL_CHECK(ncclSend(send, send_bytes, ncclUint8, next_, comm_, stream));
    RING_NCCL_CHECK(ncclRecv(recv, recv_bytes, ncclUint8, prev_, comm_, stream));
    RING_NCCL_CHECK(ncclGroupEnd());
  }

 private:
  ncclComm_t comm_;
  int next_, prev_;
};

}  // namespace

std::unique_ptr<RingTransport> make_nccl_ring_transport(void* nccl_comm, int next, int prev) {
  CHECK(nccl_comm != nullptr, "internal: NCCL ring transport without a communicator");
  return std::make_unique<NcclRingTransport>(nccl_comm, next, prev);
}

namespace {
class BorrowedRingTransport final : public RingTransport {
 public:
  explicit BorrowedRingTransport(RingTransport* t) : t_(t) {}
  void hop(const void* send, size_t send_bytes, void* recv, size_t recv_bytes,
           cudaStream_t stream) override {
    t_->hop(send, send_bytes, recv, recv_bytes, stream);
  }

 private:
  RingTransport* t_;
};
}  // namespace

std::unique_ptr<RingTransport> borrow_ring_transport(RingTransport* t) {
  CHECK(t != nullptr, "internal: no ring transport to borrow");
  return std::make_unique<BorrowedRingTransport>(t);
}

// ---- LocalRingHub: virtual ranks on one GPU (tests) ----
class LocalRingTransport final : public RingTransport {
 public:
  LocalRingTransport(LocalRingHub& hub, int r) : hub_(hub), r_(r) {}
  void hop(const void* send, size_t send_bytes, void* recv, size_t recv_bytes,
           cudaStream_t stream) override {
    const int prev = (r_ + hub_.n_ - 1) % hub_.n_;
    LocalRingHub::Post in{};
    {
      std::unique_lock<std::mutex> lock(hub_.m_);
      cudaEvent_t ready = hub_.new_event();
      CUDA_CHECK(cudaEventRecord(ready, stream));  // the bytes to send are final
      hub_.posted_[r_].push_back({send, send_bytes, ready});
      hub_.cv_.notify_all();
      hub_.cv_.wait(lock, [&] { return !hub_.posted_[prev].empty(); });
      in = hub_.posted_[prev].front();
      hub_.posted_[prev].pop_front();
    }
    CHECK(in.bytes == recv_bytes, "internal: ring hop sends %zu bytes, receiver expects %zu",
          in.bytes, recv_bytes);
    CUDA_CHECK(cudaStreamWaitEvent(stream, in.ready, 0));
    CUDA_CHECK(cudaMemcpyAsync(recv, in.ptr, recv_bytes, cudaMemcpyDeviceToDevice, stream));
    cudaEvent_t copied;
    {
      std::unique_lock<std::mutex> lock(hub_.m_);
      copied = hub_.new_event();
      CUDA_CHECK(cudaEventRecord(copied, stream));
      hub_.consumed_[prev].push_back(copied);
      hub_.cv_.notify_all();
      hub_.cv_.wait(lock, [&] { return !hub_.consumed_[r_].empty(); });
      copied = hub_.consumed_[r_].front();  // the next rank has copied this hop's send
      hub_.consumed_[r_].pop_front();
    }
    CUDA_CHECK(cudaStreamWaitEvent(stream, copied, 0));
  }

 private:
  LocalRingHub& hub_;
  int r_;
};

LocalRingHub::LocalRingHub(int n) : n_(n), posted_(n), consumed_(n) {}
LocalRingHub::~LocalRingHub() {
  cudaDeviceSynchronize();
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
}
cudaEvent_t LocalRingHub::new_event() {  // called with m_ held
  cudaEvent_t e;
  CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  events_.push_back(e);
  return e;
}
std::unique_ptr<RingTransport> LocalRingHub::transport(int r) {
  CHECK(r >= 0 && r < n_, "internal: local ring rank %d of %d", r, n_);
  return std::make_unique<LocalRingTransport>(*this, r);
}

namespace {

// dst (n) = bf16(src (n)), the finished running O.
__global__ void ring_to_bf16_kernel(floatX* __restrict__ dst, const float* __restrict__ src,
                                    size_t n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    dst[i] = (floatX)src[i];
}

// dqkv's key and value heads (B*Tl rows of `row` = 2*NKV*HS elements at column NH*HS of a
// QKV-wide row) = bf16 of this rank's finished dK/dV accumulator (B*Tl rows of `row`).
__global__ void ring_dkv_to_dqkv_kernel(floatX* __restrict__ dqkv, const float* __restrict__ dkv,
                                        size_t rows, int row, int qkv_row, int col0) {
  const size_t n = rows * row;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    const size_t t = i / row;
    const int c = (int)(i % row);
    dqkv[t * qkv_row + col0 + c] = (floatX)dkv[i];
  }
}

unsigned grid_for(size_t n) { return (unsigned)std::min<size_t>((n + 255) / 256, 8192); }

}  // namespace

void RingAttention::forward(const AttentionBackend& a, floatX* out, float* lse,
                            const floatX* qkv, const AttnShape& local, const RingBuffers& rb,
                            cudaStream_t st) {
  CHECK(a.supports_ring(), "attention '%s' cannot run context parallel (--cp > 1): use --attn "
        "flash or flash3", a.name());
  const int N = L_.cp(), r = r_, B = local.B, NH = local.NH, NKV = local.NKV, HS = local.HS;
  const int Tl = L_.local_len(r);
  CHECK(local.T == Tl, "internal: ring forward on %d rows, rank %d holds %d", local.T, r, Tl);
  const size_t QKV = (size_t)(NH + 2 * NKV) * HS, row = (size_t)2 * NKV * HS, ldo = (size_t)NH * HS;
  const size_t es = sizeof(floatX);
  next_sync_ = 0;

  // kv[0] = this rank's K/V heads (the tail of every qkv row), then its first hop.
  if (N > 1) {
    CUDA_CHECK(cudaMemcpy2DAsync(rb.kv[0], row * es, qkv + (size_t)NH * HS, QKV * es, row * es,
                                 (size_t)B * Tl, cudaMemcpyDeviceToDevice, st));
    wait(comm_st_, record(st), false);
    hop(rb.kv[0], (size_t)B * Tl * row * es, rb.kv[1],
        (size_t)B * L_.local_len(L_.ring_source(r, 1)) * row * es);
  }
  cudaEvent_t kv_ready = N > 1 ? record(comm_st_) : nullptr;

  AttnFwdProblem p{};
  p.B = B;
  p.NH = NH;
  p.NKV = NKV;
  p.HS = HS;
  p.lse_T = Tl;
  p.o_ld = ldo;
  p.o_bs = (size_t)Tl * ldo;
  // Step 0: own chunks against own K/V in place in qkv; local rows are in global order within
  // each chunk and chunk r precedes chunk 2N-1-r, so the plain causal mask on local rows is
  // the global one (context_parallel.h).
  p.q = qkv;
  p.k = qkv + (size_t)NH * HS;
  p.v = qkv + (size_t)(NH + NKV) * HS;
  p.q_ld = p.kv_ld = QKV;
  p.q_bs = p.kv_bs = (size_t)Tl * QKV;
  p.Tq = p.Tk = Tl;
  p.causal = true;
  p.lse = lse;
  p.o_run = rb.o_run;
  p.merge = false;
  a.ring_forward(p, st);
  cudaEvent_t done_prev = record(st);

  for (int s = 1; s < N; s++) {
    const int src = L_.ring_source(r, s), Ts = L_.local_len(src);
    const floatX* blk = rb.kv[s % 2];
    if (s + 1 < N) {  // the next block's hop overlaps this step
      wait(comm_st_, done_prev, false);  // kv[(s+1)%2] was read by step s-1
      hop(blk, (size_t)B * Ts * row * es, rb.kv[(s + 1) % 2],
          (size_t)B * L_.local_len(L_.ring_source(r, s + 1)) * row * es);
    }
    wait(st, kv_ready, true);
    if (s + 1 < N) kv_ready = record(comm_st_);
    const CpChunk q0 = L_.chunk(r, 0), q1 = L_.chunk(r, 1), k0 = L_.chunk(src, 0);
    p.k = blk;
    p.v = blk + (size_t)NKV * HS;
    p.kv_ld = row;
    p.kv_bs = (size_t)Ts * row;
    p.causal = false;
    p.merge = true;
    if (src < r) {  // both Q chunks x the block's first chunk (the only one before them)
      p.q = qkv;
      p.Tq = Tl;
      p.Tk = k0.len;
      p.lse = lse;
      p.o_run = rb.o_run;
    } else {  // Q chunk 2N-1-r x the whole block (chunk r precedes both of the block's: skipped)
      p.q = qkv + (size_t)q1.local_begin * QKV;
      p.Tq = q1.len;
      p.Tk = Ts;
      p.lse = lse + q0.len;
      p.o_run = rb.o_run + (size_t)q1.local_begin * ldo;
    }
    a.ring_forward(p, st);
    done_prev = record(st);
  }
  const size_t n = (size_t)B * Tl * ldo;
  ring_to_bf16_kernel<<<grid_for(n), 256, 0, st>>>(out, rb.o_run, n);
  CUDA_CHECK_LAUNCH();
}

void RingAttention::backward(const AttentionBackend& a, floatX* dqkv, void* scratch,
                             const floatX* dout, const floatX* qkv, const floatX* out,
                             const float* lse, const AttnShape& local, const RingBuffers& rb,
                             cudaStream_t st) {
  CHECK(a.supports_ring(), "attention '%s' cannot run context parallel (--cp > 1): use --attn "
        "flash or flash3", a.name());
  const int N = L_.cp(), r = r_, B = local.B, NH = local.NH, NKV = local.NKV, HS = local.HS;
  const int Tl = L_.local_len(r);
  CHECK(local.T == Tl, "internal: ring backward on %d rows, rank %d holds %d", local.T, r, Tl);
  const size_t QKV = (size_t)(NH + 2 * NKV) * HS, row = (size_t)2 * NKV * HS, ldo = (size_t)NH * HS;
  const size_t es = sizeof(floatX);
  next_sync_ = 0;

  a.ring_backward_begin(scratch, dout, out, local, st);  // D, dQacc = 0
  float* dq_accum = a.ring_dq_accum(scratch, local);
  const float* D = a.ring_D(scratch, local);
  CUDA_CHECK(cudaMemsetAsync(rb.dkv[0], 0, (size_t)B * Tl * row * sizeof(float), st));
  if (N > 1) {
    CUDA_CHECK(cudaMemcpy2DAsync(rb.kv[0], row * es, qkv + (size_t)NH * HS, QKV * es, row * es,
                                 (size_t)B * Tl, cudaMemcpyDeviceToDevice, st));
    wait(comm_st_, record(st), false);
    hop(rb.kv[0], (size_t)B * Tl * row * es, rb.kv[1],
        (size_t)B * L_.local_len(L_.ring_source(r, 1)) * row * es);
  }
  cudaEvent_t kv_ready = N > 1 ? record(comm_st_) : nullptr;
  cudaEvent_t acc_ready = nullptr;

  AttnBwdProblem p{};
  p.B = B;
  p.NH = NH;
  p.NKV = NKV;
  p.HS = HS;
  p.do_ld = ldo;
  p.do_bs = (size_t)Tl * ldo;
  p.lse_T = Tl;
  p.dq_accum = dq_accum;
  p.dq_T = Tl;
  p.dkv_ld = row;
  for (int s = 0; s < N; s++) {
    const int src = L_.ring_source(r, s), Ts = L_.local_len(src);
    if (s > 0 && s + 1 < N)  // the next block's K/V hop overlaps this step (after dkv's hop of
      hop(rb.kv[s % 2], (size_t)B * Ts * row * es, rb.kv[(s + 1) % 2],  // step s-1, which
          (size_t)B * L_.local_len(L_.ring_source(r, s + 1)) * row * es);  // waited for s-1)
    if (s > 0) {
      wait(st, kv_ready, true);
      wait(st, acc_ready, true);
      if (s + 1 < N) kv_ready = record(comm_st_);
    }
    float* acc = rb.dkv[s % 2];
    p.dk_acc = acc;
    p.dv_acc = acc + (size_t)NKV * HS;
    p.dkv_bs = (size_t)Ts * row;
    const CpChunk q0 = L_.chunk(r, 0), q1 = L_.chunk(r, 1), k0 = L_.chunk(src, 0);
    if (s == 0) {  // own chunks, causal, K/V in place in qkv
      p.q = qkv;
      p.dout = dout;
      p.lse = lse;
      p.D = D;
      p.dq_row0 = 0;
      p.k = qkv + (size_t)NH * HS;
      p.v = qkv + (size_t)(NH + NKV) * HS;
      p.q_ld = p.kv_ld = QKV;
      p.q_bs = p.kv_bs = (size_t)Tl * QKV;
      p.Tq = p.Tk = Tl;
      p.causal = true;
    } else {
      const floatX* blk = rb.kv[s % 2];
      p.k = blk;
      p.v = blk + (size_t)NKV * HS;
      p.kv_ld = row;
      p.kv_bs = (size_t)Ts * row;
      p.causal = false;
      if (src < r) {  // both Q chunks x the block's first chunk
        p.q = qkv;
        p.dout = dout;
        p.lse = lse;
        p.D = D;
        p.dq_row0 = 0;
        p.Tq = Tl;
        p.Tk = k0.len;
      } else {  // Q chunk 2N-1-r x the whole block
        p.q = qkv + (size_t)q1.local_begin * QKV;
        p.dout = dout + (size_t)q1.local_begin * ldo;
        p.lse = lse + q0.len;
        p.D = D + q0.len;
        p.dq_row0 = q1.local_begin;
        p.Tq = q1.len;
        p.Tk = Ts;
      }
    }
    a.ring_backward(p, st);
    if (N > 1) {  // the accumulator goes on to the next rank (after step N-1: home)
      wait(comm_st_, record(st), false);
      hop(acc, (size_t)B * Ts * row * sizeof(float), rb.dkv[(s + 1) % 2],
          (size_t)B * L_.local_len(L_.ring_source(r, s + 1)) * row * sizeof(float));
      acc_ready = record(comm_st_);
    }
  }
  if (N > 1) wait(st, acc_ready, true);
  const float* mine = rb.dkv[N == 1 ? 0 : N % 2];  // this rank's dK, dV, every rank's part in
  const size_t rows = (size_t)B * Tl;
  ring_dkv_to_dqkv_kernel<<<grid_for(rows * row), 256, 0, st>>>(dqkv, mine, rows, (int)row,
                                                                 (int)QKV, NH * HS);
  CUDA_CHECK_LAUNCH();
  a.ring_backward_end(dqkv, scratch, local, st);
}
