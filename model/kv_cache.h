// kv_cache — the bookkeeping of generation with a KV cache (Model::prefill / decode, model.h),
// shared by the CPU and CUDA models: which cache row a position's keys and values go to, which
// rows a decoded query reads, and whether one more position fits. The models hold the rows
// (per layer, K then V, (slots, NKV, HS)); this says where.
//
// Plain cache: position p in row p; slots >= every position the run reaches, and a full cache
// stops decode() (the sampler then restarts: train/sample.h).
// Ring: the model's mask has a sliding window W <= slots (kernels/attention/mask.h). Position p
// goes to row p % slots, and a query at p reads at most its W most recent positions, all still
// in the ring (they are at most W - 1 <= slots - 1 behind), so decoding goes on past any length
// in O(W) memory: RoPE positions keep counting; learned positions end at the model's
// max_seq_len (its position table), where decode() stops as a plain cache does.
// Document mask: the query at p reads positions lo..p, lo = max(doc_start, p - W + 1) (no
// window term without a window), where doc_start is the last end-of-text token at or before p
// (the prompt's, or a generated one: an EOT starts a new document and sees only itself). The
// rows of lo..p are consecutive in the ring: (lo % slots) and the n = p - lo + 1 rows after it,
// wrapping (attention_decode_ring, kernels/attention/decode.h).
// Test: build/test_cpu --gtest_filter='KvCache*:Model.KvCache*'
#pragma once
#include <functional>

#include "kernels/attention/mask.h"
#include "model/config.h"

class KvCache {
 public:
  KvCache() = default;
  // slots: ModelOptions.kv_cache (0: none); maxT: the longest forward (a prefill's bound).
  KvCache(const GPTConfig& c, const MaskSpec& mask, int slots, int maxT);
  int slots() const { return slots_; }
  bool ring() const { return ring_; }
  int positions() const { return len_; }  // prompt + decoded tokens so far

  // Checks a prefill of n tokens (one error line); afterwards prefilled() records it.
  void check_prefill(int n) const;
  void prefilled(const int* tokens, int n);
  // Whether decode() has room for the next position.
  bool can_decode() const;
  // Checks a decode of `token` at position positions() (one error line), then decoded() records
  // it (the position filled, an EOT's new document).
  void check_decode(int token) const;
  void decoded(int token);

  // The rows the query at the newest position (positions() - 1) reads: n keys from row first.
  struct Keys {
    int n, first;
  };
  Keys visible() const;
  // For positions [p0, p0 + n) of a forward (prefill: 0, n; decode: its position, 1), the ones
  // the cache keeps (a ring: the last `slots`) as runs of consecutive rows: fn(row, offset, len),
  // offset the first position's index in the forward.
  void for_each_store(int p0, int n, const std::function<void(int row, int offset, int len)>& fn) const;

 private:
  GPTConfig cfg_;
  MaskSpec mask_;
  int slots_ = 0, maxT_ = 0, eot_ = -1;
  bool ring_ = false;
  int len_ = 0;        // positions filled
  int doc_start_ = 0;  // the newest position's document's first position (document mask)
};
