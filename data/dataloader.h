// dataloader — reads (B, T+1) windows from token shards, as llm.c does.
//
// Each shard is cut into windows of T+1 tokens starting at multiples of T: there are
// (ntok - 1) / T of them. A step over all ranks takes world*B windows; rank r uses the r-th
// group of B (so ranks see disjoint data; world = 1 is the plain case). Windows left over at
// the end of a shard (fewer than world*B) are skipped. inputs = window[0..T), targets =
// window[1..T]. With shuffle, the shard order and the window order inside each shard are
// permuted by an RNG seeded from (seed, epoch, shard) — deterministic. When every shard is used
// up, the epoch counter increments and the loader wraps around (reshuffled).
// The whole position (epoch, shard index, window index) is in State, for checkpoint/resume.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

class DataLoader {
 public:
  struct State {
    int64_t epoch = 0;
    int64_t shard = 0;   // index into the (possibly shuffled) shard order
    int64_t window = 0;  // next window index (into the shuffled window order) in that shard
  };
  // pattern: a glob of shard files (flag names the option, for error messages).
  // vocab_size > 0: every token is checked to be < vocab_size (error names the file).
  DataLoader(const std::string& pattern, const std::string& flag, int B, int T, int vocab_size,
             bool shuffle, uint64_t seed, int rank = 0, int world = 1);
  void next_batch(int* inputs /* (B*T) */, int* targets /* (B*T) */);
  void reset();  // back to the start of epoch 0 (used by eval before each evaluation)
  State state() const { return st_; }
  void restore(const State& s);
  size_t total_tokens() const;  // over all shards
  int num_shards() const { return (int)files_.size(); }
  // next_batch() calls in one epoch: every shard's windows in groups of world*B (the leftover
  // windows of each shard are skipped). From reset(), this many batches see each used window once.
  int64_t batches_per_epoch() const;

 private:
  std::vector<std::string> files_;
  State st_;
  int B_, T_, vocab_, rank_, world_;
  bool shuffle_;
  uint64_t seed_;
  size_t total_tokens_ = 0;
  std::vector<size_t> file_tokens_;   // token count of each shard
  std::vector<uint16_t> tokens_;       // current shard
  int64_t loaded_shard_ = -1;
  std::vector<int64_t> shard_order_;   // for the current epoch
  std::vector<int64_t> window_order_;  // for the current shard
  int64_t loaded_epoch_ = -1;          // epoch that shard_order_ / window_order_ were made for
  std::string flag_;                   // for error messages
  void load_current();
  int64_t usable_windows() const;      // windows of the loaded shard, rounded down to world*B
};
