// ring_attention.cu — the ring schedule of context parallelism; see ring_attention.cuh.
#include "model/ring_attention.cuh"

#include <algorithm>

RingAttention::RingAttention(const CpLayout& L, int r, std::unique_ptr<RingTransport> transport)
    : L_(L), r_(r), transport_(std::move(transport)) {
  CHECK(r >= 0 && r < L.cp(), "internal: ring rank %d of %d", r, L.cp());
  CHECK(L.cp() == 1 || transport_ != nullptr, "internal: ring of %d ranks without a transport",
        L.cp());
  // The highest priority: the block scheduler starts a hop's NCCL kernel ahead of the attention
  // kernel's waiting blocks instead of after them, so the K/V hop overlaps the step it is meant
  // to overlap. Measured (2 x H100, d12, cp 2, `train --bench` ring lines): the compute stream's
  // K/V waits per step fell from 56 / 416 ms (ranks 0 / 1) to 0.1 / 0.1 ms at T = 512K, and
  // from 68 / 1161 ms to 0.1 / 0.1 ms at 1M.
  int least = 0, greatest = 0;
  CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  CUDA_CHECK(cudaStreamCreateWithPriority(&comm_st_, cudaStreamNonBlocking, greatest));
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

int RingAttention::clock_start(Clock what, int step, cudaStream_t st) {
  if (!timing_ || what == Clock::kNone) return -1;
  while (timing_pool_.size() < next_timing_ + 2) {
    cudaEvent_t t;
    CUDA_CHECK(cudaEventCreate(&t));
    timing_pool_.push_back(t);
  }
  const Interval iv{what, step, timing_pool_[next_timing_], timing_pool_[next_timing_ + 1]};
  next_timing_ += 2;
  CUDA_CHECK(cudaEventRecord(iv.t0, st));
  intervals_.push_back(iv);
  return (int)intervals_.size() - 1;
}

void RingAttention::clock_stop(int interval, cudaStream_t st) {
  if (interval >= 0) CUDA_CHECK(cudaEventRecord(intervals_[interval].t1, st));
}

void RingAttention::wait(cudaStream_t waiter, cudaEvent_t e, Clock what) {
  // t0 completes when the waiter's earlier work is done, t1 when the wait is over: the gap is
  // the time the stream stood still for the ring.
  const int iv = clock_start(what, 0, waiter);
  CUDA_CHECK(cudaStreamWaitEvent(waiter, e, 0));
  clock_stop(iv, waiter);
}

RingStepTimes RingAttention::take_times() {
  RingStepTimes t;
  if (!intervals_.empty()) {  // every step, also one a mask left without work
    t.fwd_ms.assign(L_.cp(), 0.0);
    t.bwd_ms.assign(L_.cp(), 0.0);
  }
  for (const Interval& iv : intervals_) {
    CUDA_CHECK(cudaEventSynchronize(iv.t1));
    float ms = 0.f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, iv.t0, iv.t1));
    switch (iv.what) {
      case Clock::kKvWait: t.kv_wait_ms += ms; break;
      case Clock::kDkvWait: t.dkv_wait_ms += ms; break;
      case Clock::kForward:
      case Clock::kBackward: {
        std::vector<double>& v = iv.what == Clock::kForward ? t.fwd_ms : t.bwd_ms;
        if ((int)v.size() <= iv.step) v.resize(iv.step + 1, 0.0);
        v[iv.step] += ms;
        break;
      }
      case Clock::kNone: break;
    }
  }
  intervals_.clear();
  next_timing_ = 0;
  return t;
}

namespace {

class DistRingTransport final : public RingTransport {
 public:
  explicit DistRingTransport(DistComm& comm) : comm_(comm) {}
  void exchange(const std::vector<CommSpan>& send, int to, const std::vector<CommSpan>& recv,
                int from, cudaStream_t stream) override {
    comm_.send_recv(send, to, recv, from, stream);
  }

 private:
  DistComm& comm_;
};

class BorrowedRingTransport final : public RingTransport {
 public:
  explicit BorrowedRingTransport(RingTransport* t) : t_(t) {}
  void exchange(const std::vector<CommSpan>& send, int to, const std::vector<CommSpan>& recv,
                int from, cudaStream_t stream) override {
    t_->exchange(send, to, recv, from, stream);
  }

 private:
  RingTransport* t_;
};

}  // namespace

std::unique_ptr<RingTransport> make_dist_ring_transport(DistComm& cp_comm) {
  return std::make_unique<DistRingTransport>(cp_comm);
}

std::unique_ptr<RingTransport> borrow_ring_transport(RingTransport* t) {
  CHECK(t != nullptr, "internal: no ring transport to borrow");
  return std::make_unique<BorrowedRingTransport>(t);
}

// ---- LocalRingHub: virtual ranks on one GPU (tests) ----
class LocalRingTransport final : public RingTransport {
 public:
  LocalRingTransport(LocalRingHub& hub, int r) : hub_(hub), r_(r) {}
  void exchange(const std::vector<CommSpan>& send, int to, const std::vector<CommSpan>& recv,
                int from, cudaStream_t stream) override {
    const int n = hub_.n_;
    if (!send.empty()) {
      std::unique_lock<std::mutex> lock(hub_.m_);
      cudaEvent_t ready = hub_.new_event();
      CUDA_CHECK(cudaEventRecord(ready, stream));  // the bytes to send are final
      for (const CommSpan& x : send) {
        hub_.posted_[r_ * n + to].push_back({x.ptr, x.bytes, ready});
        hub_.bytes_sent_[r_] += x.bytes;
      }
      hub_.cv_.notify_all();
    }
    for (const CommSpan& x : recv) {
      LocalRingHub::Post in{};
      {
        std::unique_lock<std::mutex> lock(hub_.m_);
        auto& mine = hub_.posted_[from * n + r_];
        hub_.cv_.wait(lock, [&] { return !mine.empty(); });
        in = mine.front();
        mine.pop_front();
      }
      CHECK(in.bytes == x.bytes, "internal: ring exchange sends %zu bytes, receiver expects %zu",
            in.bytes, x.bytes);
      CUDA_CHECK(cudaStreamWaitEvent(stream, in.ready, 0));
      CUDA_CHECK(cudaMemcpyAsync(x.ptr, in.ptr, x.bytes, cudaMemcpyDeviceToDevice, stream));
    }
    if (!recv.empty()) {
      std::unique_lock<std::mutex> lock(hub_.m_);
      cudaEvent_t copied = hub_.new_event();
      CUDA_CHECK(cudaEventRecord(copied, stream));
      hub_.consumed_[from * n + r_].push_back(copied);
      hub_.cv_.notify_all();
    }
    if (!send.empty()) {
      cudaEvent_t copied;
      {
        std::unique_lock<std::mutex> lock(hub_.m_);
        auto& sent = hub_.consumed_[r_ * n + to];
        hub_.cv_.wait(lock, [&] { return !sent.empty(); });
        copied = sent.front();  // rank `to` has copied this exchange's spans
        sent.pop_front();
      }
      CUDA_CHECK(cudaStreamWaitEvent(stream, copied, 0));
    }
  }

 private:
  LocalRingHub& hub_;
  int r_;
};

LocalRingHub::LocalRingHub(int n) : n_(n), posted_(n * n), consumed_(n * n), bytes_sent_(n, 0) {}
size_t LocalRingHub::bytes_sent(int r) {
  std::unique_lock<std::mutex> lock(m_);
  return bytes_sent_[r];
}
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

// acc (B, Tl, row) += in (B, R, row): a dK/dV contribution received from another rank, into
// this rank's own. in's R = rows0 + rows1 rows per sequence are rows from0 .. from0+rows0-1 of
// the first chunk and from1 .. of the second (which starts at local row len0); the ring's
// contributions are whole blocks (from = 0, R = Tl).
__global__ void ring_dkv_add_kernel(float* __restrict__ acc, const float* __restrict__ in, int B,
                                    int Tl, int len0, int from0, int rows0, int from1, int R,
                                    int row) {
  const size_t n = (size_t)B * R * row;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    const size_t t = i / row;
    const int b = (int)(t / R), r = (int)(t % R);
    const int local = r < rows0 ? from0 + r : len0 + from1 + (r - rows0);
    acc[((size_t)b * Tl + local) * row + i % row] += in[i];
  }
}

unsigned grid_for(size_t n) { return (unsigned)std::min<size_t>((n + 255) / 256, 8192); }

// The problems are bf16 (attention.cuh); the FP32 build compiles this file but has no backend
// with ring hooks, so nothing reaches a kernel there.
const __nv_bfloat16* bf(const floatX* x) { return reinterpret_cast<const __nv_bfloat16*>(x); }

}  // namespace

std::vector<RingAttention::Pair> RingAttention::pairs_at(int s) const {
  if (!mask_.is_causal()) return live_[s];
  const int r = r_, Tl = L_.local_len(r);
  // Own chunks against own K/V: local rows are in global order within each chunk and chunk r
  // precedes chunk 2N-1-r, so the plain causal mask on local rows is the global one.
  if (s == 0) return {{0, Tl, 0, Tl, 0, 0, true, false}};
  const int src = L_.ring_source(r, s);
  // src < r: both Q chunks against the block's first chunk (its second follows them: skipped).
  if (src < r) return {{0, Tl, 0, L_.chunk(src, 0).len, 0, 0, false, true}};
  // src > r: Q chunk 2N-1-r against the whole block (chunk r precedes both: skipped).
  const CpChunk q1 = L_.chunk(r, 1);
  return {{q1.local_begin, q1.len, 0, L_.local_len(src), 0, 0, false, true}};
}

void RingAttention::set_mask(const AttnMask& device, const AttnMask& host, int B) {
  CHECK(device.is_causal() == host.is_causal() && device.window == host.window &&
            (device.doc_start == nullptr) == (host.doc_start == nullptr),
        "internal: the ring's device and host masks differ");
  mask_ = device;
  live_.assign(L_.cp(), {});
  reach_in_.assign(L_.cp(), CpReach{});
  reach_out_.assign(L_.cp(), CpReach{});
  if (device.is_causal()) return;
  for (int s = 0; s < L_.cp(); s++) {  // rank r+s holds this rank's block at step s
    reach_in_[s] = cp_block_reach(L_, host, B, r_, L_.ring_source(r_, s));
    reach_out_[s] = s == 0 ? CpReach{} : cp_block_reach(L_, host, B, (r_ + s) % L_.cp(), r_);
  }
  for (int s = 0; s < L_.cp(); s++) {
    const CpReach& in = reach_in_[s];
    // Step 0: the own diagonal pairs first, which write the running (O, LSE) of every row.
    std::vector<CpBlockPair> ps = L_.pairs(r_, s);
    std::stable_sort(ps.begin(), ps.end(), [](const CpBlockPair& a, const CpBlockPair& b) {
      return a.kind == CpPairKind::kDiagonal && b.kind != CpPairKind::kDiagonal;
    });
    for (const CpBlockPair& p : ps) {
      if (p.kind == CpPairKind::kSkipped || !cp_pair_live(host, B, L_.T(), p.q, p.k)) continue;
      // Its keys: the rows of the K/V chunk that arrived (s > 0: packed, chunk 0's first).
      const int w = p.k.index == L_.ring_source(r_, s) ? 0 : 1;
      const int k_row0 = s == 0 ? p.k.local_begin : (w == 0 ? 0 : in.rows(0));
      CHECK(in.rows(w) > 0, "internal: a live chunk pair whose keys were not sent");
      live_[s].push_back(Pair{p.q.local_begin, p.q.len, k_row0, in.rows(w), p.q.global_begin,
                              p.k.global_begin + in.from[w], false,
                              p.kind != CpPairKind::kDiagonal});
    }
  }
}

std::vector<CommSpan> RingAttention::spans(void* base, const CpReach& reach, int B,
                                           size_t row_bytes, bool packed) {
  std::vector<CommSpan> out;
  const size_t per_seq = packed ? reach.rows() : reach.len[0] + reach.len[1];
  for (int b = 0; b < B; b++)
    for (int w = 0; w < 2; w++) {
      if (reach.rows(w) == 0) continue;
      const size_t row0 = packed ? (w == 0 ? 0 : reach.rows(0))
                                 : (w == 0 ? 0 : reach.len[0]) + reach.from[w];
      out.push_back({static_cast<char*>(base) + (b * per_seq + row0) * row_bytes,
                     reach.rows(w) * row_bytes});
    }
  return out;
}

int RingAttention::begin(const AttentionBackend& a, const AttnShape& local) {
  CHECK(a.supports_ring(), "attention '%s' cannot run context parallel (--cp > 1): use --attn "
        "flash or flash3", a.name());
  const int Tl = L_.local_len(r_);
  CHECK(local.T == Tl, "internal: ring on %d rows, rank %d holds %d", local.T, r_, Tl);
  next_sync_ = 0;
  return Tl;
}

cudaEvent_t RingAttention::send_own_kv(const floatX* qkv, const AttnShape& local,
                                       const RingBuffers& rb, cudaStream_t st) {
  const int N = L_.cp();
  if (N == 1) return nullptr;
  const int NH = local.NH, NKV = local.NKV, HS = local.HS;
  const size_t QKV = (size_t)(NH + 2 * NKV) * HS, row = (size_t)2 * NKV * HS, es = sizeof(floatX);
  // kv[0] = this rank's K/V heads, the tail of every qkv row; then its first hop.
  CUDA_CHECK(cudaMemcpy2DAsync(rb.kv[0], row * es, qkv + (size_t)NH * HS, QKV * es, row * es,
                               (size_t)local.B * local.T, cudaMemcpyDeviceToDevice, st));
  wait(comm_st_, record(st));
  if (straight()) return straight_kv(rb, 1, local);
  send_kv(rb, 0, local);
  return record(comm_st_);
}

cudaEvent_t RingAttention::straight_kv(const RingBuffers& rb, int s, const AttnShape& local) {
  const int N = L_.cp();
  if (s >= N || (!sends(s) && !receives(s))) return nullptr;
  const size_t row = (size_t)2 * local.NKV * local.HS * sizeof(floatX);
  std::vector<CommSpan> out, in;
  if (sends(s)) out = spans(rb.kv[0], reach_out_[s], local.B, row, false);
  if (receives(s)) in = spans(rb.kv[1], reach_in_[s], local.B, row, true);
  exchange(out, (r_ + s) % N, in, L_.ring_source(r_, s));
  return receives(s) ? record(comm_st_) : nullptr;
}

void RingAttention::send_kv(const RingBuffers& rb, int s, const AttnShape& local) {
  const size_t row = (size_t)2 * local.NKV * local.HS * sizeof(floatX) * local.B;
  hop(rb.kv[s % 2], L_.local_len(L_.ring_source(r_, s)) * row, rb.kv[(s + 1) % 2],
      L_.local_len(L_.ring_source(r_, s + 1)) * row);
}

void RingAttention::set_kv(const floatX* qkv, const RingBuffers& rb, int s,
                           const AttnShape& local, const __nv_bfloat16*& k,
                           const __nv_bfloat16*& v, size_t& ld, size_t& bs) const {
  const int NH = local.NH, NKV = local.NKV, HS = local.HS;
  if (s == 0) {  // own K/V in place in qkv
    ld = (size_t)(NH + 2 * NKV) * HS;
    k = bf(qkv + (size_t)NH * HS);
    v = bf(qkv + (size_t)(NH + NKV) * HS);
    bs = (size_t)local.T * ld;
  } else {  // the block in hand: (B, Ts, 2*NKV, HS)
    const floatX* kv = straight() ? rb.kv[1] : rb.kv[s % 2];
    ld = (size_t)2 * NKV * HS;
    k = bf(kv);
    v = bf(kv + (size_t)NKV * HS);
    bs = (size_t)block_rows(s) * ld;
  }
}

void RingAttention::forward(const AttentionBackend& a, floatX* out, float* lse,
                            const floatX* qkv, const AttnShape& local, const RingBuffers& rb,
                            cudaStream_t st) {
  const int Tl = begin(a, local), N = L_.cp();
  const size_t QKV = (size_t)(local.NH + 2 * local.NKV) * local.HS,
               ldo = (size_t)local.NH * local.HS;
  cudaEvent_t kv_ready = send_own_kv(qkv, local, rb, st), done_prev = nullptr;
  AttnFwdProblem p{};
  p.B = local.B;
  p.NH = local.NH;
  p.NKV = local.NKV;
  p.HS = local.HS;
  p.q_ld = QKV;
  p.q_bs = (size_t)Tl * QKV;
  p.lse_T = Tl;
  p.o_ld = ldo;
  p.o_bs = (size_t)Tl * ldo;
  p.mask = mask_;
  p.mask_T = L_.T();
  for (int s = 0; s < N; s++) {
    if (s > 0 && straight()) {
      if (!receives(s)) {  // nothing to compute: post the next step's exchange
        kv_ready = straight_kv(rb, s + 1, local);
        continue;
      }
      wait(st, kv_ready, Clock::kKvWait);
    } else if (s > 0) {
      if (s + 1 < N) {  // the next block's hop overlaps this step
        wait(comm_st_, done_prev);  // kv[(s+1)%2] was read by step s-1
        send_kv(rb, s, local);
      }
      wait(st, kv_ready, Clock::kKvWait);
      if (s + 1 < N) kv_ready = record(comm_st_);
    }
    const __nv_bfloat16 *k, *v;
    set_kv(qkv, rb, s, local, k, v, p.kv_ld, p.kv_bs);
    const int clock = clock_start(Clock::kForward, s, st);
    for (const Pair& pr : pairs_at(s)) {
      p.q = bf(qkv + (size_t)pr.q_row0 * QKV);
      p.k = k + (size_t)pr.k_row0 * p.kv_ld;
      p.v = v + (size_t)pr.k_row0 * p.kv_ld;
      p.Tq = pr.Tq;
      p.Tk = pr.Tk;
      p.q_pos0 = pr.q_pos0;
      p.k_pos0 = pr.k_pos0;
      p.causal = pr.causal;
      p.lse = lse + pr.q_row0;
      p.o_run = rb.o_run + (size_t)pr.q_row0 * ldo;
      p.merge = pr.merge;  // step 0 writes the running (O, LSE), later steps merge into them
      a.ring_forward(p, st);
    }
    clock_stop(clock, st);
    done_prev = record(st);
    if (straight() && s > 0) {  // the next step's block into kv[1], which this step has read
      wait(comm_st_, done_prev);
      kv_ready = straight_kv(rb, s + 1, local);
    }
  }
  const size_t n = (size_t)local.B * Tl * ldo;
  ring_to_bf16_kernel<<<grid_for(n), 256, 0, st>>>(out, rb.o_run, n);
  CUDA_CHECK_LAUNCH();
}

void RingAttention::backward(const AttentionBackend& a, floatX* dqkv, void* scratch,
                             const floatX* dout, const floatX* qkv, const floatX* out,
                             const float* lse, const AttnShape& local, const RingBuffers& rb,
                             cudaStream_t st) {
  const int Tl = begin(a, local), N = L_.cp(), B = local.B, NKV = local.NKV, HS = local.HS;
  const size_t QKV = (size_t)(local.NH + 2 * NKV) * HS, row = (size_t)2 * NKV * HS,
               ldo = (size_t)local.NH * HS, frow = row * sizeof(float) * B;
  const size_t mine = (size_t)B * Tl * row;  // elements of this rank's dK/dV
  a.ring_backward_begin(scratch, dout, out, local, st);  // D, dQacc = 0
  const float* D = a.ring_D(scratch, local);
  CUDA_CHECK(cudaMemsetAsync(rb.dkv_acc, 0, mine * sizeof(float), st));
  cudaEvent_t kv_ready = send_own_kv(qkv, local, rb, st), done_prev = nullptr;
  cudaEvent_t in_ready = nullptr;                    // the last contribution received
  cudaEvent_t out_free[2] = {nullptr, nullptr};      // dkv_out[i]'s last send is done
  AttnBwdProblem p{};
  p.B = B;
  p.NH = local.NH;
  p.NKV = NKV;
  p.HS = HS;
  p.q_ld = QKV;
  p.q_bs = (size_t)Tl * QKV;
  p.do_ld = ldo;
  p.do_bs = (size_t)Tl * ldo;
  p.lse_T = Tl;
  p.dq_accum = a.ring_dq_accum(scratch, local);
  p.dq_T = Tl;
  p.dkv_ld = row;
  p.mask = mask_;
  p.mask_T = L_.T();
  // dkv_acc += the contribution in dkv_in, once it has arrived: the rows `in_rows` of this
  // rank's block (the whole block on the ring; straight, the rows it sent that step).
  bool in_pending = false;  // a contribution received and not yet added
  CpReach in_rows{};
  auto add_in = [&]() {
    wait(st, in_ready, Clock::kDkvWait);
    const size_t n = (size_t)B * in_rows.rows() * row;
    ring_dkv_add_kernel<<<grid_for(n), 256, 0, st>>>(rb.dkv_acc, rb.dkv_in, B, Tl, in_rows.len[0],
                                                     in_rows.from[0], in_rows.rows(0),
                                                     in_rows.from[1], in_rows.rows(), (int)row);
    CUDA_CHECK_LAUNCH();
    in_pending = false;
  };
  const CpReach whole = cp_block_reach(L_, AttnMask{}, B, r_, r_);  // this rank's whole block
  int sent = 0;  // contributions sent so far: the next one goes out of dkv_out[sent % 2]
  // The other ranks' blocks first, the own chunks (s = 0) last: every contribution's trip to
  // its owner then overlaps a later step (the header's schedule).
  for (int i = 1; i <= N; i++) {
    const int s = i % N, src = L_.ring_source(r_, s);
    // This step computes against a block (always on the ring; straight, if this rank's
    // queries see it) and receives rank r+s's contribution to this rank's own block.
    const bool computes = s == 0 || !straight() || receives(s),
               gets = s > 0 && (!straight() || sends(s));
    float* acc = rb.dkv_acc;  // s = 0: this rank's own
    if (s > 0 && !straight()) {
      if (s + 1 < N) {  // the next block's hop overlaps this step
        if (done_prev) wait(comm_st_, done_prev);  // kv[(s+1)%2] was read by step s-1
        send_kv(rb, s, local);
      }
      wait(st, kv_ready, Clock::kKvWait);
      if (s + 1 < N) kv_ready = record(comm_st_);
    } else if (s > 0 && computes) {
      wait(st, kv_ready, Clock::kKvWait);
    }
    if (s > 0 && computes) {
      acc = rb.dkv_out[sent % 2];  // dkv_out[1] only at cp > 2
      if (out_free[sent % 2]) wait(st, out_free[sent % 2]);  // its send two sends ago is done
      CUDA_CHECK(cudaMemsetAsync(acc, 0, (size_t)block_rows(s) * frow, st));
    }
    if (computes) {
      const __nv_bfloat16 *k, *v;
      set_kv(qkv, rb, s, local, k, v, p.kv_ld, p.kv_bs);
      p.dkv_bs = (size_t)(s == 0 ? Tl : block_rows(s)) * row;
      const int clock = clock_start(Clock::kBackward, s, st);
      for (const Pair& pr : pairs_at(s)) {
        p.k = k + (size_t)pr.k_row0 * p.kv_ld;
        p.v = v + (size_t)pr.k_row0 * p.kv_ld;
        p.dk_acc = acc + (size_t)pr.k_row0 * row;
        p.dv_acc = p.dk_acc + (size_t)NKV * HS;
        p.q = bf(qkv + (size_t)pr.q_row0 * QKV);
        p.dout = bf(dout + (size_t)pr.q_row0 * ldo);
        p.lse = lse + pr.q_row0;
        p.D = D + pr.q_row0;
        p.dq_row0 = pr.q_row0;
        p.Tq = pr.Tq;
        p.Tk = pr.Tk;
        p.q_pos0 = pr.q_pos0;
        p.k_pos0 = pr.k_pos0;
        p.causal = pr.causal;
        a.ring_backward(p, st);
      }
      clock_stop(clock, st);
    }
    if (in_pending && gets) add_in();  // the last contribution, before dkv_in is reused
    done_prev = record(st);
    if (s > 0 && (computes || gets)) {
      // This contribution goes home to src; rank r+s's to this rank's block comes in.
      wait(comm_st_, done_prev);
      if (gets) in_rows = straight() ? reach_out_[s] : whole;
      std::vector<CommSpan> home, back;
      if (computes) home.push_back({acc, (size_t)block_rows(s) * frow});
      if (gets) back.push_back({rb.dkv_in, (size_t)in_rows.rows() * frow});
      exchange(home, src, back, (r_ + s) % N);
      cudaEvent_t e = record(comm_st_);
      if (computes) out_free[sent++ % 2] = e;
      if (gets) in_ready = e, in_pending = true;
    }
    if (straight() && s > 0) {  // the next step's block into kv[1], which this step has read
      wait(comm_st_, done_prev);
      kv_ready = straight_kv(rb, s + 1, local);
    }
  }
  if (in_pending) add_in();  // the last contribution, which the own step overlapped
  ring_dkv_to_dqkv_kernel<<<grid_for(mine), 256, 0, st>>>(dqkv, rb.dkv_acc, (size_t)B * Tl,
                                                          (int)row, (int)QKV, local.NH * HS);
  CUDA_CHECK_LAUNCH();
  a.ring_backward_end(dqkv, scratch, local, st);
}
