// kv_cache.cpp — see kv_cache.h.
#include "model/kv_cache.h"

#include <algorithm>

#include "kernels/common.h"

KvCache::KvCache(const GPTConfig& c, const MaskSpec& mask, int slots, int maxT)
    : cfg_(c), mask_(mask), slots_(slots), maxT_(maxT),
      eot_(mask.kind == MaskKind::kDocument ? mask.eot_token(c.vocab_size) : -1),
      ring_(mask.window > 0 && mask.window <= slots) {
  CHECK(slots >= 0, "internal: a KV cache of %d positions", slots);
}

void KvCache::check_prefill(int n) const {
  CHECK(slots_ > 0, "internal: prefill() on a model made without a KV cache");
  const int most = ring_ ? maxT_ : std::min(slots_, maxT_);
  CHECK(n >= 1 && n <= most, "the prompt is %d tokens; this model holds at most %d (KV cache %d%s, "
        "--seq-len %d)", n, most, slots_, ring_ ? " as a ring" : "", maxT_);
}

void KvCache::prefilled(const int* tokens, int n) {
  len_ = n;
  doc_start_ = 0;
  if (eot_ >= 0)
    for (int p = 0; p < n; p++)
      if (tokens[p] == eot_) doc_start_ = p;
}

bool KvCache::can_decode() const {
  const bool positions_left = cfg_.rope || len_ < cfg_.max_seq_len;
  return len_ >= 1 && positions_left && (ring_ || len_ < slots_);
}

void KvCache::check_decode(int token) const {
  CHECK(slots_ > 0 && len_ >= 1, "internal: decode() before prefill()");
  CHECK(ring_ || len_ < slots_, "the KV cache is full (%d positions); start again with a shorter "
        "context", slots_);
  CHECK(cfg_.rope || len_ < cfg_.max_seq_len, "position %d is past the model's learned positions "
        "(%d)", len_, cfg_.max_seq_len);
  CHECK(token >= 0 && token < cfg_.vocab_size, "token id %d is outside the vocabulary (%d)", token,
        cfg_.vocab_size);
}

void KvCache::decoded(int token) {
  if (token == eot_) doc_start_ = len_;
  len_++;
}

KvCache::Keys KvCache::visible() const {
  const int p = len_ - 1;
  const int lo = std::max(doc_start_, SeqMask{nullptr, mask_.window}.lo(p));
  return Keys{p - lo + 1, lo % slots_};
}

void KvCache::for_each_store(int p0, int n,
                             const std::function<void(int row, int offset, int len)>& fn) const {
  const int first = ring_ ? std::max(p0, p0 + n - slots_) : p0;  // a ring keeps the last slots
  for (int p = first; p < p0 + n;) {
    const int row = p % slots_, len = std::min(p0 + n - p, slots_ - row);
    fn(row, p - p0, len);
    p += len;
  }
}
