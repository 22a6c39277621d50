// ring_attention — context-parallel attention on the GPU: this rank's zigzag chunks of
// each sequence (context_parallel.h) against the K/V blocks of every rank as they come round a
// ring of NCCL send/recv, with any backend that offers the ring hooks (attention.cuh: flash,
// flash3). The CPU oracle, and the maths in the FlashAttention paper's notation, is
// ring_attention_ref.h; the layout, the pair kinds and the communication volume are in
// context_parallel.h. This file is the schedule.
//
// Forward, rank r (N = cp, kv[2] bf16 blocks (B, Tl_max, 2*NKV, HS), o_run fp32 (B, Tl, NH, HS)):
//   kv[0] = pack(K_r, V_r)                                   (one cudaMemcpy2D out of qkv)
//   comm:    send kv[0] -> r+1, recv kv[1] <- r-1             (overlaps step 0)
//   step 0:  own chunks, causal: (o_run, LSE) = flash(Q_r, K_r, V_r)     (diagonal + one full pair)
//   step s:  wait recv s; comm: send kv[s%2], recv kv[(s+1)%2] (overlaps this step)
//            src = (r - s) mod N < r: both Q chunks x K chunk src          (one full problem)
//            src > r: Q chunk 2N-1-r x both K chunks of the block         (one full problem)
//            (o_run, LSE) merged exactly with the pair's (O_blk, LSE_blk) in the kernel epilogue
//   out = bf16(o_run)
// Backward, rank r (fp32 (B, Tl_max, 2*NKV, HS) buffers: dkv_acc, this rank's dK/dV; dkv_out[2],
// contributions to other ranks' blocks in flight; dkv_in, one received):
//   D = rowsum(dO o O), dQacc = 0, dkv_acc = 0; kv[0] = pack(K_r, V_r)
//   comm:    send kv[0] -> r+1, recv kv[1] <- r-1
//   step s = 1 .. N-1 (the other ranks' blocks first), src = (r - s) mod N:
//            wait recv s; comm: send kv[s%2] -> r+1, recv kv[(s+1)%2] <- r-1 (s < N-1)
//            dkv_out[s%2] = 0; the same pairs as the forward, recomputed from the final LSE:
//            dQacc += dS K (in L2), dK, dV of block src added (fp32) into dkv_out[s%2]
//            comm: send dkv_out[s%2] -> src, recv dkv_in <- (r + s) mod N   (overlaps step s+1)
//            s > 1: wait the previous recv; dkv_acc += dkv_in  (before this step's recv lands)
//   step 0:  own chunks, causal, own K/V: dK, dV added into dkv_acc        (overlaps the last send)
//   wait the last recv; dkv_acc += dkv_in
//   dqkv = (scale dQacc, dkv_acc) -> bf16
// The K/V hop of step s+1 overlaps step s, and each dK/dV contribution's trip overlaps the next
// step: the compute stream meets the other ranks only at the first K/V hop of each layer's
// backward.
// (An accumulator that travels with its block, each rank adding to it in turn, makes two hard
// meeting points per layer at cp 2: ~4% of a step at T = 1M on 2 x H100.)
// Masks (set_mask, once per batch; context_parallel.h "Masks"): a mask other than causal runs
// one problem per chunk pair that it leaves live (cp_pair_live on the host copy of the batch's
// doc_start), each with its global q_pos0 / k_pos0 and the device doc_start (B, T): step 0
// writes the own diagonal pairs first (every row sees itself, so every row's running LSE is
// finite) and merges the third pair; later steps merge. A pair the mask empties launches
// nothing. The kernels must merge a row with no visible key in a live pair (LSE_blk = -inf) as
// nothing. K/V goes STRAIGHT instead of round the ring, and only the rows that are seen
// (cp_block_reach): kv[0] keeps this rank's own block, and at step s the rows of it that rank
// r+s's queries see go there (a span per sequence and chunk); the rows of rank r-s's block
// that this rank's queries see arrive packed in kv[1] ((B, rows, 2*NKV, HS)), and each live
// pair reads its chunk's rows there at their global positions; a step that needs neither
// exchanges nothing and computes nothing. The backward's contribution covers the same packed
// rows, goes home as on the ring, and is added into the owner's rows it came from. One receive
// buffer: an exchange waits for the previous block's step to finish reading kv[1], so only the
// first overlaps compute (the own chunks' step in the forward); every rank issues its
// exchanges in the same step order. Measured (4 H100s, d12 on real documents, T = 1M, cp 4):
// 1.47x the ring that passed whole blocks round under the document mask, 1.35x under a window
// of 4096 (bench/results/masked-context-parallel).
// take_times() (timing on) measures each step's attention and the compute stream's waits for
// the ring: what the overlap failed to hide, and the skew between the ranks.
//
// Streams: the model's compute stream and one communication stream of this ring; events order
// them. Every rank issues the same hops in the same order. A hop is a RingTransport: NCCL
// send/recv on the cp communicator between processes (one GPU each), or, for the tests on one
// GPU, copies between the buffers of virtual ranks that run as threads of one process
// (LocalRingHub): the same schedule, events and buffers, only the wire differs.
//
// Limits: bf16 (the ring hooks are bf16 kernels); the backend's own (HS 64/128, and the masks
// its spec takes); T >= 2N;
// kArrival dQ order (not bitwise reproducible: --deterministic with --cp > 1 is refused).
//
// Test:  ./build/test_gpu --gtest_filter='*RingAttention*' (tests/gpu/test_ring_attention.cu;
//        its NCCL cases need N GPUs)
// Bench: scripts/bench_cp.sh (d12 on 2 GPUs, cp 1 vs cp 2)
#pragma once
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "kernels/attention/attention.cuh"
#include "model/context_parallel.h"
#include "model/dist_comm.h"

// The device buffers the ring needs besides the backend's own (cp_ring_elems() in
// context_parallel.h sizes them; the model's buffer table holds them).
struct RingBuffers {
  floatX* kv[2] = {nullptr, nullptr};  // (B, Tl_max, 2*NKV, HS) K/V blocks in flight
  float* dkv_acc = nullptr;              // (B, Tl_max, 2*NKV, HS) this rank's dK/dV (fp32)
  float* dkv_out[2] = {nullptr, nullptr};  // (B, Tl_max, 2*NKV, HS) contributions in flight
                                           // ([1]: cp > 2 only)
  float* dkv_in = nullptr;               // (B, Tl_max, 2*NKV, HS) a contribution received
  float* o_run = nullptr;              // (B, Tl_max, NH, HS) running O of the forward
};

// The ring's buffers carved out of three allocations sized by cp_ring_elems(): kv (2 x e.kv
// bf16), dkv (e.dkv_count x e.dkv fp32) and o_run (e.o_run fp32).
inline RingBuffers carve_ring_buffers(floatX* kv, float* dkv, float* o_run, const CpRingElems& e) {
  RingBuffers rb;
  rb.kv[0] = kv;
  rb.kv[1] = kv + e.kv;
  rb.dkv_acc = dkv;
  rb.dkv_in = dkv + e.dkv;
  rb.dkv_out[0] = dkv + 2 * e.dkv;
  if (e.dkv_count > 3) rb.dkv_out[1] = dkv + 3 * e.dkv;
  rb.o_run = o_run;
  return rb;
}

// How a hop moves its bytes. On `stream`: send each span of `send` to rank `to` and fill each
// span of `recv` from rank `from`, in order (cp ranks; every rank of the group calls it at the
// same point, the receiver with spans of the sender's sizes, so sends and receives pair up);
// the stream's later work sees `recv` filled and may overwrite `send`. Either list may be
// empty: a one-way exchange.
class RingTransport {
 public:
  virtual ~RingTransport() = default;
  virtual void exchange(const std::vector<CommSpan>& send, int to,
                        const std::vector<CommSpan>& recv, int from, cudaStream_t stream) = 0;
};
// Hops between processes: DistComm::send_recv on the cp group's communicator (NCCL), whose
// rank i is cp index i; not owned (it outlives the ring).
std::unique_ptr<RingTransport> make_dist_ring_transport(DistComm& cp_comm);
// One that forwards to `t` without owning it (ModelOptions::cp_transport).
std::unique_ptr<RingTransport> borrow_ring_transport(RingTransport* t);

// Tests and bench-attention --cp: the ranks of one process (a host thread each) meet here; all n
// wait until all have arrived (reusable). Over NCCL one process may drive two GPUs, and NCCL's
// kernels spin until the peer's matching kernel runs: no rank may start the ring while another
// is still in cudaMalloc/cudaMemcpy, or free its buffers while the other's ring is in flight.
class RankBarrier {
 public:
  explicit RankBarrier(int n) : n_(n) {}
  void arrive_and_wait() {
    std::unique_lock<std::mutex> lock(m_);
    const long gen = gen_;
    if (++arrived_ == n_) {
      arrived_ = 0;
      ++gen_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return gen_ != gen; });
    }
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  int n_, arrived_ = 0;
  long gen_ = 0;
};

// Tests: n virtual ranks of one process on one GPU, each driven by its own host thread. A hop
// posts the sender's buffer (and an event: its bytes are ready), copies the previous rank's
// posted buffer on the receiver's stream, and makes the sender's stream wait for that copy.
class LocalRingHub {
 public:
  explicit LocalRingHub(int n);
  ~LocalRingHub();
  std::unique_ptr<RingTransport> transport(int r);  // rank r's end (the hub must outlive it)
  size_t bytes_sent(int r);  // what rank r has sent so far, every exchange summed

 private:
  friend class LocalRingTransport;
  struct Post {
    const void* ptr;
    size_t bytes;
    cudaEvent_t ready;
  };
  int n_;
  std::mutex m_;
  std::condition_variable cv_;
  std::vector<std::deque<Post>> posted_;             // [sender * n + receiver] sends, in order
  std::vector<std::deque<cudaEvent_t>> consumed_;    // [sender * n + receiver] "copied" events
  std::vector<cudaEvent_t> events_;                  // every event made, destroyed at the end
  std::vector<size_t> bytes_sent_;                   // [sender]
  cudaEvent_t new_event();
};

class RingAttention {
 public:
  // Rank r of L.cp(), its hops through `transport`.
  RingAttention(const CpLayout& L, int r, std::unique_ptr<RingTransport> transport);
  ~RingAttention();
  RingAttention(const RingAttention&) = delete;
  RingAttention& operator=(const RingAttention&) = delete;

  // The batch's mask, before its first forward: `device` what the kernels read (doc_start
  // (B, L.T()) on the device; {}: causal), `host` the same with doc_start on the host, which
  // the schedule plans with (the pairs to compute). B: the batch's sequences.
  void set_mask(const AttnMask& device, const AttnMask& host, int B);
  // local: (B, Tl = L.local_len(r), NH, NKV, HS). out (B, Tl, NH, HS); lse (B, NH, Tl);
  // qkv (B, Tl, NH + 2*NKV, HS) with RoPE already applied at global positions.
  void forward(const AttentionBackend& a, floatX* out, float* lse, const floatX* qkv,
               const AttnShape& local, const RingBuffers& rb, cudaStream_t st);
  // dqkv (B, Tl, NH + 2*NKV, HS) overwritten; scratch: a.scratch_bytes(local).
  void backward(const AttentionBackend& a, floatX* dqkv, void* scratch, const floatX* dout,
                const floatX* qkv, const floatX* out, const float* lse, const AttnShape& local,
                const RingBuffers& rb, cudaStream_t st);
  // With timing on, CUDA events around each backend call and each wait of the compute stream
  // for the ring; take_times() returns what they measured since the last call (RingStepTimes in
  // context_parallel.h; waits for the device). Timing off: no events, empty times.
  void set_timing(bool on) { timing_ = on; }
  RingStepTimes take_times();

 private:
  CpLayout L_;
  int r_;
  std::unique_ptr<RingTransport> transport_;
  cudaStream_t comm_st_ = nullptr;
  std::vector<cudaEvent_t> sync_;  // pool of ordering events, reused each call
  size_t next_sync_ = 0;
  bool timing_ = false;
  enum class Clock { kNone, kKvWait, kDkvWait, kForward, kBackward };  // what an interval times
  struct Interval {
    Clock what;
    int step;
    cudaEvent_t t0, t1;
  };
  std::vector<Interval> intervals_;  // timed, not yet read
  std::vector<cudaEvent_t> timing_pool_;
  size_t next_timing_ = 0;

  cudaEvent_t record(cudaStream_t s);  // an ordering event, recorded
  // waiter waits for e; timed as `what` (kKvWait / kDkvWait) when timing is on.
  void wait(cudaStream_t waiter, cudaEvent_t e, Clock what = Clock::kNone);
  // Timing on: records an interval's start (and returns its index) or end on stream st.
  int clock_start(Clock what, int step, cudaStream_t st);
  void clock_stop(int interval, cudaStream_t st);
  // What this rank computes at ring step s: its query rows [q_row0, q_row0 + Tq) against rows
  // [k_row0, k_row0 + Tk) of the K/V in hand (its own in qkv at s = 0), at global positions
  // q_pos0 / k_pos0 under a mask; causal (only at s = 0) under the causal mask; merge: into the
  // running (O, LSE) (else it writes them).
  struct Pair {
    int q_row0, Tq, k_row0, Tk, q_pos0, k_pos0;
    bool causal, merge;
  };
  // The causal mask: one fused problem per step (context_parallel.h). Another: one problem per
  // live chunk pair, planned by set_mask.
  std::vector<Pair> pairs_at(int s) const;
  AttnMask mask_;                        // the device mask of set_mask
  std::vector<std::vector<Pair>> live_;  // [step] the live chunk pairs (a mask other than causal)
  // A mask other than causal sends blocks straight (context_parallel.h "Masks"): at step s > 0
  // this rank receives, into kv[1], the rows of rank r-s's block that its queries see
  // (reach_in_[s], packed: (B, reach_in_[s].rows(), 2*NKV, HS)), and sends rank r+s the rows of
  // its own (kv[0]) that rank's queries see (reach_out_[s]); a contribution to dK/dV comes back
  // in the same rows.
  std::vector<CpReach> reach_in_, reach_out_;
  bool straight() const { return !mask_.is_causal(); }
  bool receives(int s) const { return !live_[s].empty(); }
  bool sends(int s) const { return reach_out_[s].any(); }
  // Rows per sequence of the K/V block in hand at step s > 0 (and of its dK/dV contribution).
  int block_rows(int s) const {
    return straight() ? reach_in_[s].rows() : L_.local_len(L_.ring_source(r_, s));
  }
  // Straight: step s's exchange of K/V rows (s < N; nothing when neither end needs any);
  // returns "kv[1] arrived", or null when this rank receives nothing at step s.
  cudaEvent_t straight_kv(const RingBuffers& rb, int s, const AttnShape& local);
  // The spans of a (B, Tl, row) buffer that hold rows `reach` of its two chunks (Tl =
  // reach.len[0] + reach.len[1]), or of a packed (B, reach.rows(), row) one; b-major, chunk 0
  // first, empty ranges left out: the same count and sizes at both ends of a send.
  static std::vector<CommSpan> spans(void* base, const CpReach& reach, int B, size_t row_bytes,
                                     bool packed);
  int begin(const AttentionBackend& a, const AttnShape& local);  // checks; returns Tl
  // kv[0] = this rank's K/V, its first hop (straight: step 1's exchange) posted; returns
  // "kv[1] arrived" (null for cp 1, or when step 1 receives nothing).
  cudaEvent_t send_own_kv(const floatX* qkv, const AttnShape& local, const RingBuffers& rb,
                          cudaStream_t st);
  // The K/V hop after step s: send kv[s%2], receive kv[(s+1)%2].
  void send_kv(const RingBuffers& rb, int s, const AttnShape& local);
  // Step s's K and V pointers and strides (elements): qkv at s = 0, else the block in hand.
  void set_kv(const floatX* qkv, const RingBuffers& rb, int s, const AttnShape& local,
              const __nv_bfloat16*& k, const __nv_bfloat16*& v, size_t& ld, size_t& bs) const;
  // One exchange on the comm stream (RingTransport::exchange); a hop: to r+1, from r-1.
  void exchange(const std::vector<CommSpan>& send, int to, const std::vector<CommSpan>& recv,
                int from) {
    transport_->exchange(send, to, recv, from, comm_st_);
  }
  void hop(const void* send, size_t send_bytes, void* recv, size_t recv_bytes) {
    exchange({{const_cast<void*>(send), send_bytes}}, L_.ring_next(r_), {{recv, recv_bytes}},
             L_.ring_prev(r_));
  }
};
