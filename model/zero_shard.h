// zero_shard — the ZeRO-1 partition of the flat parameter vector (pure arithmetic, tested on
// the CPU in tests/cpu/test_dist.cpp; used by model/gpt_cuda.cu with --zero 1).
//
// The flat vector of `total` parameters (llm.c order) is padded to a multiple of
// world * kZeroAlign elements; rank r owns the contiguous slice [r*shard, (r+1)*shard) of the
// padded vector, shard = padded_total / world (a multiple of kZeroAlign = 64 elements, so every
// slice starts 256-byte aligned for the vectorised kernels). `end` is clipped to `total`: the
// padding past the last real parameter belongs to the last rank(s) but holds no parameter.
// The AdamW weight-decay flag is per tensor, so the update runs per segment: the pieces of the
// owned slice cut at tensor boundaries (shard_segments).
#pragma once
#include <algorithm>
#include <cstddef>
#include <vector>

constexpr size_t kZeroAlign = 64;

struct ZeroShard {
  size_t padded_total = 0;  // multiple of world * kZeroAlign, >= total
  size_t shard_size = 0;    // padded_total / world
  size_t begin = 0;         // rank * shard_size
  size_t end = 0;           // min(begin + shard_size, total); <= begin when the slice is all padding
  size_t owned() const { return end > begin ? end - begin : 0; }  // real parameters owned
};

inline ZeroShard zero_shard(size_t total, int world, int rank) {
  ZeroShard s;
  const size_t unit = (size_t)world * kZeroAlign;
  s.padded_total = (total + unit - 1) / unit * unit;
  if (s.padded_total == 0) s.padded_total = unit;
  s.shard_size = s.padded_total / world;
  s.begin = (size_t)rank * s.shard_size;
  s.end = std::min(s.begin + s.shard_size, total);
  if (s.end < s.begin) s.end = s.begin;
  return s;
}

struct ShardSegment {
  int tensor;    // index into the layout (ParamLayout order)
  size_t begin;  // global offset into the flat vector
  size_t count;
};

// The owned range [begin, end) cut at the tensor boundaries offsets[i] .. offsets[i]+sizes[i].
inline std::vector<ShardSegment> shard_segments(const size_t* offsets, const size_t* sizes, int n,
                                                size_t begin, size_t end) {
  std::vector<ShardSegment> out;
  for (int i = 0; i < n; i++) {
    size_t lo = std::max(begin, offsets[i]), hi = std::min(end, offsets[i] + sizes[i]);
    if (lo < hi) out.push_back({i, lo, hi - lo});
  }
  return out;
}
