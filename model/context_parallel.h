// context_parallel — the zigzag layout of context parallelism (CP): one sequence of T tokens
// split over N ranks (the cp group) so that causal attention costs every rank the same.
// CUDA-free and kernel-free: the facts the GPU ring, the data loader, the loss and the memory
// plan all ask. The CPU oracle of the ring itself is ring_attention_ref.{h,cpp}.
//
// Chunks. The sequence is cut into 2N chunks; chunk k holds global positions [a_k, a_{k+1}),
//   a_k = floor(k * T / (2N)),  k = 0 .. 2N.
// Any T >= 2N works (ragged T: chunk lengths differ by at most one). T < 2N is refused with an
// error naming --cp and --seq-len: some chunk would be empty, and a rank with an empty chunk
// does no useful work while the kernels would have to handle zero-row blocks for nothing.
//
// Zigzag. Rank r (0 <= r < N) holds chunks r and 2N-1-r, in that order: its local buffer has
// rows [0, len_r) = positions [a_r, a_{r+1}) then rows [len_r, len_r + len_{2N-1-r}) =
// positions [a_{2N-1-r}, a_{2N-r}). Why: the causal work of a chunk grows with its position,
// and pairing the k-th earliest with the k-th latest makes the sums equal. Unmasked (q, k)
// pairs of rank r, per (batch row, head): W(a_r, a_{r+1}) + W(a_{2N-1-r}, a_{2N-r}) with
// W(x, y) = sum_{p=x}^{y-1} (p + 1). For T % 2N == 0 every rank has exactly the same count;
// for ragged T the spread between ranks is at most T (checked for N <= 8 and every T < 600
// in tests/cpu/test_context_parallel.cpp, N <= 16, T < 5000 offline), against ~T^2/(2N) per
// rank: a relative imbalance below 2N/T.
//
// Ring. N steps s = 0 .. N-1. At step s rank r holds the K/V block of rank (r - s) mod N (its
// own at s = 0), computes its local Q against it, then passes the block to rank (r + 1) mod N
// (and receives the next from rank (r - 1) mod N) unless s = N-1. Over the N steps every rank
// meets every block exactly once.
//
// Block pairs. A rank's Q (2 chunks) against a K/V block (2 chunks) is 4 chunk pairs; since
// chunks are contiguous and ordered, a pair (q chunk i, k chunk j) is
//   j <  i  full      every key precedes every query: no mask
//   j == i  diagonal  the causal mask (key position <= query position) inside the block
//   j >  i  skipped   every key follows every query: never loaded or computed
// Diagonal pairs occur only at s = 0 (a rank's own chunks). At s > 0 exactly two pairs are
// full and two skipped: with src = (r - s) mod N, src < r: both Q chunks against K chunk src;
// src > r: Q chunk 2N-1-r against both K chunks. So every step after the first costs every
// rank the same two full c x c blocks (c = T / 2N), and step 0 two diagonal blocks + one full.
//
// Masks (kernels/attention/mask.h: the document mask, a sliding window). The ring passes GLOBAL
// positions: a chunk pair (q chunk, k chunk) masks key position kp for query position qp by the
// mask of the whole sequence, lo(qp) <= kp <= qp, with doc_start of the whole (B, T) batch on
// every rank (each rank computes it from the batch tokens it reads anyway). A pair the mask
// empties in every sequence of the batch (cp_pair_live) is never computed. The causal mask keeps
// the ring and its fused problems. Any other mask sends K/V STRAIGHT to the ranks that need it,
// and only the rows they need: at step s rank r sends rank r+s the rows of its block that rank's
// queries see (cp_block_reach: a suffix of each chunk, W - 1 rows of a neighbour's chunk under a
// window W), and receives the rows of rank r-s's block its own queries see; a step that neither
// needs sends nothing and computes nothing (every rank decides from the same host doc_start, so
// both ends of a send agree). A ring could not skip a hop: with the zigzag layout a window shorter
// than a chunk lets chunk k's queries reach back into chunk k-1 only, so rank r needs the blocks
// of r - 1 (chunk r-1) and r + 1 (chunk 2N-2-r): its block is needed by the first and the LAST
// rank after it on the ring, and would travel all the way round. Straight, a window W shorter than
// a chunk costs a rank at most two K/V receives of W - 1 rows per layer at any cp (one at cp 2,
// and for ranks 0 and N-1), and a window of one (every row sees itself) none. Other masks than
// causal run one problem per live chunk pair.
// Load balance: zigzag equalises the causal triangle, not a mask. Under the document mask a
// rank's share of the visible pairs is the sum over its rows t of t - lo(t) + 1
// (cp_rank_visible_pairs); the trainer's start line prints the shares on the first windows of
// the data (tests/cpu/test_ring_attention_ref.cpp measures them on synthetic documents).
//
// Communication (per rank, per layer, per sequence of the batch; e = bytes per element), the
// causal ring (other masks: the rows each rank's queries reach, cp_comm_bytes):
//   forward   K/V of the NKV key/value heads passed N-1 times:
//               (N-1) * 2 * (T/N) * NKV * HS * e_kv
//   backward  K/V passed again N-1 times, and each rank's contribution to every other rank's
//             dK/dV sent straight to that block's owner (N-1 sends):
//               (N-1) * 2 * (T/N) * NKV * HS * e_kv  +  (N-1) * 2 * (T/N) * NKV * HS * e_dkv
// (T/N is the mean local length; cp_comm_bytes() below sums the exact ragged lengths.) With
// bf16 K/V and fp32 dK/dV the backward moves 3(N-1) K/V-sized blocks against the forward's N-1.
// Only the NKV heads travel: grouped-query attention divides the traffic by NH/NKV; queries,
// outputs and dQ never leave their rank.
//
// Data loader. Every cp rank of a dp group reads the same (B, T) batch (the loader's inputs
// window[0..T) and targets window[1..T] of each T+1-token window) and the model keeps its own
// rows of both with cp_scatter (row = one token): a position's input and target stay together,
// so every (input, target) pair of the window is on exactly one rank.
//
// Loss. The loss is the mean over all B*T tokens of the sequence, not the mean of per-rank
// means (ranks hold different token counts when T % 2N != 0): each rank sums its token losses
// and scales the sum by N / (B*T) (cp_loss_share()), so that the mean over the cp group of the
// shares is the sum over all tokens / (B*T); the model averages the shares over the world's
// ranks (each dp group's mean). For the backward, every token's dloss must be
// 1 / (B*T*grad_accum) of the whole sequence; since the gradients of replicated parameters are
// then AVERAGED over the dp x cp group (sum / (dp*cp), like data parallelism), each cp rank
// seeds its classifier with dloss = N / (B*T*grad_accum) (cp_token_dloss()): the average over
// the N cp ranks gives back the sum over all tokens.
//
// ---------------------------------------------------------------------------------------------
// GPU path (built: model/ring_attention.cuh; its oracle is ring_attention_ref.h)
//
// Kernel. The ring composes with any backend that saves only the LSE through the ring hooks of
// attention.cuh: one attention problem (AttnFwdProblem / AttnBwdProblem) with
//   - Q and K/V from different buffers: the local qkv (token stride (NH + 2*NKV) * HS) and the
//     block in hand (token stride 2 * NKV * HS), with their own lengths Tq != Tk and a Q row
//     offset;
//   - a `causal` flag instead of global offsets: with the zigzag layout every computed pair is
//     either fully visible (a rectangular, unmasked problem) or the rank's own chunks (the plain
//     causal kernel on local rows: the local order is the global one within and across them);
//     and the two pairs of a step after the first are one problem (both Q chunks against the
//     block's first chunk, or the second Q chunk against the whole block);
//   - forward: merging into a running fp32 O (B, Tl, NH, HS) and the LSE (B, NH, Tl) in the
//     kernel's epilogue (one CTA owns a Q tile: no races), exactly as attention_merge_ref does;
//     the last step converts O to bf16;
//   - backward: the final LSE and D = rowsum(dO o O) once per rank, dQ accumulated in the fp32
//     dq_accum over all steps (at the problem's row offset), dK/dV ADDED by each block's
//     epilogue into an fp32 buffer: the rank's own accumulator at step 0, a fresh contribution
//     to the block's owner at the other steps.
// flash and flash3 offer the hooks (each runs its own forward and backward kernels on a pair);
// the model calls RingAttention per layer.
//
// Communication. A cp communicator per cp group (ncclCommSplit of the world by dp index; the
// trainer's) and the ring's own stream, separate from the gradient all-reduce. Per step:
//   comm stream:    wait(event "step s-1 done reading kv[(s+1)%2]");
//                   send_recv(kv[s%2] -> next, kv[(s+1)%2] <- prev) (DistComm: one NCCL
//                   group); record(event "kv s+1 arrived")
//   compute stream: wait(event "kv s arrived"); the step's problem; record(event "done s")
// (send and recv in one group: no deadlock round the ring.) Two K/V buffers of
// max_local_len() rows, step 0's packed out of qkv. The backward double-buffers K/V the same
// way, runs the other ranks' blocks first (steps 1 .. N-1) and its own chunks (step 0) last,
// and sends each step's fp32 dK/dV contribution straight to the block's owner, where it is
// added to the owner's accumulator one step later (the last one after the own step): every
// contribution's transfer overlaps a whole step, and the ranks meet only at the first K/V hop
// of each layer's backward. (An accumulator that travels with its block, each rank adding to
// it in turn, makes every backward step wait for the previous rank's: two hard meeting points
// per layer at cp 2, whose skew cost ~4% of a step at T = 1M on 2 x H100.)
// Memory: cp_ring_elems() below; the model's buffer table holds them. The hops go through a
// RingTransport: DistComm::send_recv (NCCL) between processes, or device copies between
// virtual ranks on one GPU (the GPU tests).
// Overlap condition (forward, bf16, per step after the first): compute 8 B NH c^2 HS FLOPs
// (two full c x c pairs, c = T/2N), traffic 8 B c NKV HS bytes, so compute hides the transfer
// when c >= (NKV/NH) x F / BW. H200 NVLink (~450 GB/s one way, F ~400 TFLOP/s sustained by our
// flash forward; both figures approximate, to be measured): c >= ~900 tokens for MHA, i.e. any
// T >= 2N x 1K; at T = 256K, cp 2 the margin is ~70x. The backward moves 3x the bytes against
// 2.5x the FLOPs: the same order.
//
// Launch convention. world = dp x cp, rank = dp_index * cp + cp_index (cp innermost), so a cp
// group is cp consecutive ranks: the GPUs of one node, on NVLink. The loader is built with
// (rank = dp_index, world = dp): the cp ranks of a dp group read the same window and each
// model keeps its chunks (cp_scatter). RoPE and learned positions use global positions: the
// RoPE kernel is called once per chunk with pos0 = the chunk's a_k (it needs a batch stride,
// or a loop over B, since a chunk's rows are not contiguous across the batch), the encoder
// reads wpe rows a_k .. a_{k+1}-1. The loss and dloss follow the rules above; replicated
// parameter gradients are averaged over the whole world (dp x cp) by the existing all-reduce.
// Checkpoints record cp; a --resume at another cp is refused like a changed world size.
//
// Across nodes. With cp larger than a node, a ring crosses nodes on two of its hops, and each
// step waits for its slowest hop: InfiniBand at ~50 GB/s per GPU needs c >= ~8K tokens
// (MHA; (NKV/NH) x that with GQA) to stay hidden, i.e. T >= 16K x cp. Beyond that, keep the
// ring inside a node and split heads across nodes (all-to-all, DeepSpeed-Ulysses; the hybrid
// is USP), or all-gather K/V across nodes (Llama 3), which with small NKV moves little.
//
// Test: make NO_CUDA=1 BUILD=build-cpu -j2 build-cpu/test_cpu &&
//       build-cpu/test_cpu --gtest_filter='ContextParallel*'
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/attention/mask.h"

// One zigzag chunk as a rank holds it.
struct CpChunk {
  int index;         // k in [0, 2N)
  int global_begin;  // a_k: global position of its first token
  int len;           // a_{k+1} - a_k >= 1
  int local_begin;   // its first row in the owning rank's local buffers
};

enum class CpPairKind { kSkipped, kFull, kDiagonal };
const char* cp_pair_kind_name(CpPairKind k);  // "skipped", "full", "diagonal"

// Kind of the chunk pair (Q chunk q_chunk, K/V chunk k_chunk); see the header comment.
inline CpPairKind cp_pair_kind(int q_chunk, int k_chunk) {
  return k_chunk < q_chunk ? CpPairKind::kFull
                           : k_chunk == q_chunk ? CpPairKind::kDiagonal : CpPairKind::kSkipped;
}

// One (local Q chunk, K/V chunk) pair that rank r meets at ring step s.
struct CpBlockPair {
  CpChunk q;  // of rank r (local_begin: row in r's buffers)
  CpChunk k;  // of the block's owner (local_begin: row in the travelling K/V block)
  CpPairKind kind;
};

class CpLayout {
 public:
  // Throws flashgpt::Error for cp < 1 or T < 2*cp (naming --cp and --seq-len).
  CpLayout(int cp, int T);
  int cp() const { return N_; }
  int T() const { return T_; }
  int num_chunks() const { return 2 * N_; }
  int chunk_begin(int k) const;  // a_k, k in [0, 2N] (a_0 = 0, a_{2N} = T)
  int chunk_len(int k) const { return chunk_begin(k + 1) - chunk_begin(k); }
  // which = 0: chunk r (rows first), which = 1: chunk 2N-1-r.
  CpChunk chunk(int r, int which) const;
  int local_len(int r) const;  // rows rank r holds: len_r + len_{2N-1-r}
  int max_local_len() const;   // the largest local_len: size of a K/V block buffer in flight
  int global_pos(int r, int local_row) const;
  int owner_of(int global_pos) const;  // the rank holding a global position
  // The rank whose K/V block rank r holds at ring step s: (r - s) mod N.
  int ring_source(int r, int s) const { return ((r - s) % N_ + N_) % N_; }
  int ring_next(int r) const { return (r + 1) % N_; }  // where blocks are sent
  int ring_prev(int r) const { return (r + N_ - 1) % N_; }  // where they come from
  // The 4 chunk pairs rank r meets at step s (skipped ones included, so callers can count).
  std::vector<CpBlockPair> pairs(int r, int s) const;
  // Unmasked (query, key) pairs rank r computes over the whole ring, per (batch row, head).
  int64_t causal_pairs(int r) const;

 private:
  int N_, T_;
};

// Whether the chunk pair (q, k) holds a visible (query, key) pair in any of the B sequences of
// mask m, read at global positions (m.doc_start: (B, T) on the host; {}: causal).
bool cp_pair_live(const AttnMask& m, int B, int T, const CpChunk& q, const CpChunk& k);
// The visible (query, key) pairs each rank's queries hold in one sequence under mask m (the
// sequence's SeqMask over its T global positions): rank r's share of the mask's work.
std::vector<int64_t> cp_rank_visible_pairs(const CpLayout& L, const SeqMask& m);

// The rows of rank k_rank's block (its two chunks) that rank q_rank's queries see under mask m
// (doc_start on the host) in any of the B sequences: of chunk `which` (0: chunk k_rank, 1:
// chunk 2N-1-k_rank, len[which] rows) the suffix from[which] .. len[which]-1 (from = len:
// none). A suffix because lo is monotone: the keys that a later chunk's queries see begin at lo
// of its first row. q_rank == k_rank: the whole block. Under a mask other than causal the GPU
// ring sends a rank only these rows.
struct CpReach {
  int from[2], len[2];
  int rows(int which) const { return len[which] - from[which]; }
  int rows() const { return rows(0) + rows(1); }
  bool any() const { return rows() > 0; }
};
CpReach cp_block_reach(const CpLayout& L, const AttnMask& m, int B, int q_rank, int k_rank);

// Bytes one rank sends per layer for B sequences of the batch (see the header comment).
// kv_elem: bytes per K/V element (2 for bf16); dkv_elem: of the dK/dV accumulator (4 for fp32).
// mask (host doc_start): nullptr or causal, the ring's; another, the straight sends'.
struct CpCommBytes {
  size_t forward;   // K/V: N-1 hops (causal), the rows each other rank reaches (other masks)
  size_t backward;  // the same K/V again + the dK/dV contributions to the rows reached
};
CpCommBytes cp_comm_bytes(const CpLayout& L, int r, int B, int NKV, int HS, size_t kv_elem,
                          size_t dkv_elem, const AttnMask* mask = nullptr);

// What one rank's GPU ring measured with its timing on (RingAttention::take_times; `train
// --bench --cp N` prints it per rank), in milliseconds summed over every call since the last
// read. fwd_ms[s] and bwd_ms[s]: the backend's attention at ring step s (s = 0 is the rank's own
// causal chunks, later steps a full chunk pair each); the waits: the compute stream standing
// still for a K/V hop, or for a dK/dV contribution (what the overlap did not hide, plus the
// skew between the ranks, since a hop ends when both of its ends have reached it).
struct RingStepTimes {
  std::vector<double> fwd_ms, bwd_ms;  // (N) per ring step
  double kv_wait_ms = 0, dkv_wait_ms = 0;
  double wait_ms() const { return kv_wait_ms + dkv_wait_ms; }
  void add(const RingStepTimes& o);  // sums another read into this one
};
// "attention per ring step: fwd [812.3, 801.2] ms, bwd [1904.4, 1888.0] ms | waits: K/V 3.1 ms,
// dK/dV 240.0 ms", every figure divided by `per` (how many training steps were summed).
std::string ring_times_summary(const RingStepTimes& t, double per);

// The GPU ring's buffers (ring_attention.cuh) in elements, for B sequences: each of the two
// K/V blocks in flight (bf16) and each of the dkv_count fp32 dK/dV buffers (the rank's own
// accumulator, the contribution received, and one contribution in flight, two at cp > 2 where
// the next step writes while the last is still sent) holds B x max_local_len() x 2*NKV x HS;
// the forward's running O (fp32) B x max_local_len() x NH x HS.
struct CpRingElems {
  size_t kv, dkv, o_run;
  int dkv_count;
};
inline CpRingElems cp_ring_elems(const CpLayout& L, int B, int NH, int NKV, int HS) {
  const size_t rows = (size_t)B * L.max_local_len();
  return {rows * 2 * NKV * HS, rows * 2 * NKV * HS, rows * (size_t)NH * HS, L.cp() > 2 ? 4 : 3};
}

// ---------------------------------------------------------------------------------------------
// Rank r's rows of B sequences, chunk by chunk: fn(local_row, full_row, global_pos, len) for
// each of its two chunks in each sequence b, whose len rows are rows local_row.. of its local
// (B, local_len(r)) buffers and rows full_row.. of the full (B, T) ones (full_row = b*T +
// global_pos: the chunk's positions in the sequence).
template <typename Fn>
void cp_for_each_chunk(const CpLayout& L, int r, int B, Fn fn) {
  const size_t Tl = L.local_len(r), T = L.T();
  for (int b = 0; b < B; b++)
    for (int which = 0; which < 2; which++) {
      const CpChunk c = L.chunk(r, which);
      fn(b * Tl + c.local_begin, b * T + c.global_begin, c.global_begin, c.len);
    }
}

// Moving rows between a full (B, T, row_elems) buffer and rank r's local (B, local_len(r),
// row_elems) buffer. Works for any per-token row: qkv (row = (NH + 2*NKV) * HS), out, tokens
// (row = 1); for LSE (B, NH, T) pass B*NH as B and row_elems = 1.
template <typename E>
void cp_scatter(E* local,       // (B, local_len(r), row_elems)
                const E* full,  // (B, T, row_elems)
                const CpLayout& L, int r, int B, size_t row_elems) {
  cp_for_each_chunk(L, r, B, [&](size_t local_row, size_t full_row, int, int len) {
    std::copy_n(full + full_row * row_elems, len * row_elems, local + local_row * row_elems);
  });
}
template <typename E>
void cp_gather(E* full,         // (B, T, row_elems): rank r's rows written
               const E* local,  // (B, local_len(r), row_elems)
               const CpLayout& L, int r, int B, size_t row_elems) {
  cp_for_each_chunk(L, r, B, [&](size_t local_row, size_t full_row, int, int len) {
    std::copy_n(local + local_row * row_elems, len * row_elems, full + full_row * row_elems);
  });
}

// ---------------------------------------------------------------------------------------------
// Loss side (see the header comment).
// This rank's share of the sequence-mean loss: rank_loss_sum * cp / (B * T), where
// rank_loss_sum is the sum of its token losses; the mean of the cp ranks' shares is the mean
// loss over all B*T tokens of the sequence.
double cp_loss_share(double rank_loss_sum, int cp, int B, int T);
// The per-token dloss each cp rank seeds its classifier with when replicated-parameter
// gradients are averaged over the dp x cp group: cp / (B * T * grad_accum).
float cp_token_dloss(int cp, int B, int T, int grad_accum);
