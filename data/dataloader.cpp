// dataloader — (B, T+1) windows from token shards; the semantics are in dataloader.h.
//
// Order of one epoch: shard_order_ (a permutation of the files, from (seed, epoch)), and inside
// each shard window_order_ (a permutation of its windows, from (seed, epoch, file index)).
// Both come from our own splitmix64 and a Fisher-Yates shuffle with unbiased bounded draws, so
// the order is the same on every platform and compiler (std::uniform_int_distribution is not).
// The position is (epoch, shard, window) and nothing else: restore() recomputes the orders
// from it, which is why resume is exact. Only the current shard's tokens are in memory.
#include "data/dataloader.h"

#include <algorithm>
#include <numeric>

#include "data/shards.h"
#include "kernels/common.h"
#include "kernels/rng.h"

namespace {

// An independent stream per (seed, epoch, tag): each value is folded in through the mixer.
Rng make_rng(uint64_t seed, int64_t epoch, uint64_t tag) {
  Rng r(seed);
  Rng r2(r.next_u64() ^ (uint64_t)epoch);
  Rng r3(r2.next_u64() ^ tag);
  return Rng(r3.next_u64());
}

void shuffle(std::vector<int64_t>& v, Rng rng) {
  for (size_t i = v.size(); i > 1; i--) std::swap(v[i - 1], v[rng.below(i)]);
}

constexpr uint64_t kShardOrderTag = ~0ull;  // window orders use the file index as the tag

}  // namespace

DataLoader::DataLoader(const std::string& pattern, const std::string& flag, int B, int T,
                       int vocab_size, bool shuffle, uint64_t seed, int rank, int world)
    : B_(B), T_(T), vocab_(vocab_size), rank_(rank), world_(world), shuffle_(shuffle),
      seed_(seed), flag_(flag) {
  CHECK(B > 0 && T > 0, "batch size %d and sequence length %d must be positive (--batch, --seq-len)",
        B, T);
  CHECK(world >= 1 && rank >= 0 && rank < world, "rank %d is not in [0, world size %d)", rank, world);
  files_ = glob_files(pattern, flag);
  const size_t need = (size_t)world * B;
  for (const std::string& f : files_) {
    size_t n = shard_num_tokens(f);
    size_t windows = n > 0 ? (n - 1) / T : 0;
    CHECK(windows >= need,
          "%s: shard %s has %zu tokens, %zu windows of %d+1 tokens, fewer than the %zu (world %d x "
          "--batch %d) one step needs; lower --batch or --seq-len, or prepare bigger shards",
          flag.c_str(), f.c_str(), n, windows, T, need, world, B);
    total_tokens_ += n;
    file_tokens_.push_back(n);
  }
  load_current();  // validates the first shard's tokens now, not at the first step
}

int64_t DataLoader::usable_windows() const {
  const int64_t step = (int64_t)world_ * B_;
  const int64_t windows = tokens_.empty() ? 0 : (int64_t)(tokens_.size() - 1) / T_;
  return windows / step * step;
}

size_t DataLoader::total_tokens() const { return total_tokens_; }

int64_t DataLoader::batches_per_epoch() const {
  int64_t n = 0;
  for (size_t t : file_tokens_) n += (int64_t)((t - 1) / T_) / ((int64_t)world_ * B_);
  return n;
}

void DataLoader::load_current() {
  const int64_t nfiles = (int64_t)files_.size();
  const bool new_epoch = loaded_epoch_ != st_.epoch;
  if (new_epoch) {
    shard_order_.resize(nfiles);
    std::iota(shard_order_.begin(), shard_order_.end(), 0);
    if (shuffle_) shuffle(shard_order_, make_rng(seed_, st_.epoch, kShardOrderTag));
  }
  const int64_t file = shard_order_[st_.shard];
  if (file != loaded_shard_) {
    tokens_ = std::vector<uint16_t>();  // free the old shard before reading the next one
    tokens_ = read_shard(files_[file], vocab_);
    const int64_t step = (int64_t)world_ * B_;
    CHECK(usable_windows() >= step,
          "%s: shard %s now has %zu tokens, too few for one step of %lld windows of %d+1 tokens "
          "(did it change while training?); lower --batch or --seq-len",
          flag_.c_str(), files_[file].c_str(), tokens_.size(), (long long)step, T_);
  }
  if (file != loaded_shard_ || new_epoch) {
    window_order_.resize((tokens_.size() - 1) / T_);
    std::iota(window_order_.begin(), window_order_.end(), 0);
    if (shuffle_) shuffle(window_order_, make_rng(seed_, st_.epoch, (uint64_t)file));
  }
  loaded_shard_ = file;
  loaded_epoch_ = st_.epoch;
}

void DataLoader::next_batch(int* inputs, int* targets) {
  const int64_t step = (int64_t)world_ * B_;
  load_current();
  if (st_.window + step > usable_windows()) {  // shard used up (leftover windows skipped)
    st_.window = 0;
    if (++st_.shard == (int64_t)files_.size()) {
      st_.shard = 0;
      st_.epoch++;
    }
    load_current();
  }
  for (int b = 0; b < B_; b++) {
    const int64_t w = window_order_[st_.window + (int64_t)rank_ * B_ + b];
    const uint16_t* src = tokens_.data() + (size_t)w * T_;
    for (int t = 0; t < T_; t++) {
      inputs[(size_t)b * T_ + t] = src[t];
      targets[(size_t)b * T_ + t] = src[t + 1];
    }
  }
  st_.window += step;
}

void DataLoader::reset() { restore(State{}); }

void DataLoader::restore(const State& s) {
  CHECK(s.epoch >= 0 && s.shard >= 0 && s.shard < (int64_t)files_.size() && s.window >= 0,
        "%s: cannot resume at data position (epoch %lld, shard %lld, window %lld): there are %d "
        "shards; the data changed since the checkpoint",
        flag_.c_str(), (long long)s.epoch, (long long)s.shard, (long long)s.window, num_shards());
  st_ = s;
  load_current();
  CHECK(s.window <= usable_windows(),
        "%s: cannot resume at window %lld of shard %s, which has %lld usable windows; the data, "
        "--batch or --seq-len changed since the checkpoint",
        flag_.c_str(), (long long)s.window, files_[loaded_shard_].c_str(),
        (long long)usable_windows());
}
