// tokenizer — byte-level BPE: pre-split, training, encoding, the two file formats.
// The algorithm and the file format are described in tokenizer.h.
#include "data/tokenizer.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <queue>
#include <string_view>

#include "data/files.h"
#include "kernels/common.h"

namespace {

const char* kEotText = "<|endoftext|>";

inline uint64_t pair_key(int a, int b) { return (uint64_t)(uint32_t)a << 32 | (uint32_t)b; }
inline int key_first(uint64_t k) { return (int)(k >> 32); }
inline int key_second(uint64_t k) { return (int)(k & 0xffffffffu); }

// Byte classes of the pre-split. Bytes >= 0x80 count as letters so that multi-byte UTF-8
// characters (é, ü, —) stay inside their word instead of splitting it.
enum ByteClass { kSpace, kLetter, kDigit, kOther };
inline ByteClass byte_class(unsigned char c) {
  if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f') return kSpace;
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80) return kLetter;
  if (c >= '0' && c <= '9') return kDigit;
  return kOther;
}

// A run longer than this is cut into pieces of this many bytes. Real words are far shorter; the
// cap bounds the per-chunk cost of training and encoding (both O(chunk length) per merge) on
// inputs such as megabytes of one symbol or of base64 without spaces.
constexpr size_t kMaxChunk = 256;

// Calls f(start, length) for every chunk of s, in order; the chunks tile s exactly.
template <typename F>
void split_chunks(const char* s, size_t n, F&& f) {
  const unsigned char* u = (const unsigned char*)s;
  size_t i = 0;
  while (i < n) {
    size_t start = i;
    // One leading ' ' joins the run that follows it (" the"), as in GPT-2.
    if (u[i] == ' ' && i + 1 < n && byte_class(u[i + 1]) != kSpace) i++;
    ByteClass c = byte_class(u[i]);
    if (c == kSpace) {  // only reached when start == i
      size_t j = i;
      while (j < n && byte_class(u[j]) == kSpace) j++;
      // A whitespace run before a word leaves its last ' ' to the word ("\n  x" -> "\n ", " x").
      if (j < n && j - 1 > i && u[j - 1] == ' ') j--;
      i = j;
    } else {
      while (i < n && byte_class(u[i]) == c) i++;
    }
    for (size_t p = start; p < i; p += kMaxChunk) f(p, std::min(kMaxChunk, i - p));
  }
}

// Merges every occurrence of (a, b) in ids into t, left to right, in place.
inline void merge_pair(std::vector<int>& ids, int a, int b, int t) {
  size_t w = 0;
  for (size_t i = 0; i < ids.size(); i++) {
    if (i + 1 < ids.size() && ids[i] == a && ids[i + 1] == b) {
      ids[w++] = t;
      i++;
    } else {
      ids[w++] = ids[i];
    }
  }
  ids.resize(w);
}

// The first `max_bytes` bytes of a file (all of it if shorter). Throws naming the file.
std::string read_file_prefix(const std::string& path, size_t max_bytes) {
  const char* p = path.c_str();
  struct stat sb;
  CHECK(stat(p, &sb) == 0, "cannot open tokenizer file %s: %s; run prepare to make one", p,
        strerror(errno));
  CHECK(S_ISREG(sb.st_mode), "tokenizer file %s is not a regular file", p);
  FILE* f = fopen(p, "rb");
  CHECK(f, "cannot open tokenizer file %s: %s", p, strerror(errno));
  std::string data(std::min((size_t)sb.st_size, max_bytes), '\0');
  size_t got = data.empty() ? 0 : fread(&data[0], 1, data.size(), f);
  fclose(f);
  CHECK(got == data.size(), "error reading tokenizer file %s (%zu of %zu bytes)", p, got, data.size());
  return data;
}

}  // namespace

// ----------------------------------------------------------------------------------------------
// training

Tokenizer Tokenizer::train(const std::string& text, int vocab_size,
                           const std::function<void(int, int)>& progress) {
  CHECK(vocab_size >= 257 && vocab_size <= 65536,
        "--vocab-size %d is out of range: it must be in [257, 65536] (256 bytes + <|endoftext|>, "
        "uint16 shards)", vocab_size);
  const int num_merges = vocab_size - 257;

  // 1. Unique chunks and their counts, sorted for a reproducible chunk numbering (the merges do
  // not depend on it: counts are sums and ties are broken by pair ids).
  std::unordered_map<std::string_view, int64_t> chunk_counts;
  split_chunks(text.data(), text.size(),
               [&](size_t st, size_t len) { chunk_counts[std::string_view(text.data() + st, len)]++; });
  std::vector<std::pair<std::string_view, int64_t>> uniq(chunk_counts.begin(), chunk_counts.end());
  chunk_counts = {};
  std::sort(uniq.begin(), uniq.end());

  struct Chunk {
    std::vector<int> ids;
    int64_t count;
  };
  std::vector<Chunk> chunks(uniq.size());
  for (size_t c = 0; c < uniq.size(); c++) {
    chunks[c].ids.assign((const unsigned char*)uniq[c].first.data(),
                         (const unsigned char*)uniq[c].first.data() + uniq[c].first.size());
    chunks[c].count = uniq[c].second;
  }
  uniq = {};

  // 2. Pair counts (weighted by chunk count) and where each pair occurs. A `where` list may hold
  // stale entries (chunks that no longer contain the pair): the merge step skips those.
  std::unordered_map<uint64_t, int64_t> pair_count;
  std::unordered_map<uint64_t, std::vector<int>> where;
  for (size_t c = 0; c < chunks.size(); c++) {
    const std::vector<int>& ids = chunks[c].ids;
    for (size_t i = 0; i + 1 < ids.size(); i++) {
      uint64_t k = pair_key(ids[i], ids[i + 1]);
      pair_count[k] += chunks[c].count;
      std::vector<int>& w = where[k];
      if (w.empty() || w.back() != (int)c) w.push_back((int)c);
    }
  }

  // Max-heap of (count, pair); the top is the most frequent pair, the smallest (a, b) on ties.
  // Entries go stale when a count changes (a fresh entry is pushed then): an entry is only
  // trusted if its count equals the current one.
  struct Entry {
    int64_t count;
    uint64_t key;
    bool operator<(const Entry& o) const {
      return count != o.count ? count < o.count : key > o.key;
    }
  };
  std::priority_queue<Entry> heap;
  for (const auto& kv : pair_count) heap.push({kv.second, kv.first});

  Tokenizer tok;
  tok.merges_.reserve(num_merges);
  std::vector<int> stamp(chunks.size(), -1);  // last merge that visited the chunk
  std::unordered_map<uint64_t, int64_t> delta;
  for (int r = 0; r < num_merges; r++) {
    uint64_t best = 0;
    bool found = false;
    while (!heap.empty()) {
      Entry e = heap.top();
      heap.pop();
      auto it = pair_count.find(e.key);
      if (it != pair_count.end() && it->second == e.count && e.count > 0) {
        best = e.key;
        found = true;
        break;
      }
    }
    CHECK(found,
          "the training text is too small for --vocab-size %d: it has no adjacent pairs left "
          "after %d merges; lower --vocab-size to at most %d or give more text",
          vocab_size, r, 257 + r);
    const int a = key_first(best), b = key_second(best), t = 256 + r;
    tok.merges_.push_back({a, b});

    // Visit only the chunks that contain (a, b).
    std::vector<int> list = std::move(where[best]);
    where.erase(best);
    delta.clear();
    for (int c : list) {
      if (stamp[c] == r) continue;
      stamp[c] = r;
      std::vector<int>& ids = chunks[c].ids;
      const int64_t n = chunks[c].count;
      // (a stale entry, a chunk that no longer holds (a, b), simply finds no occurrence)
      // Merge left to right, adjusting only the pairs beside each occurrence: x a b y becomes
      // x t y, so (x,a) and (b,y) lose n and (x,t) and (t,y) gain n. x is read from the output
      // (it may be a t just made: "abab" -> "tt" turns (t,a) into (t,t)) and y from the input
      // (with a == b, "aaa": (b,y) is the overlapping (a,a), counted once per position as
      // in the initial count). (a,b) itself is erased below.
      auto add = [&](int x, int y, int64_t d) {
        uint64_t k = pair_key(x, y);
        delta[k] += d;
        if (d > 0) {  // only pairs with t are new to the chunk; the others are listed already
          std::vector<int>& w = where[k];
          if (w.empty() || w.back() != c) w.push_back(c);
        }
      };
      size_t o = 0;
      for (size_t i = 0; i < ids.size(); i++) {
        if (i + 1 < ids.size() && ids[i] == a && ids[i + 1] == b) {
          if (o > 0) add(ids[o - 1], a, -n), add(ids[o - 1], t, n);
          if (i + 2 < ids.size()) add(b, ids[i + 2], -n), add(t, ids[i + 2], n);
          ids[o++] = t;
          i++;
        } else {
          ids[o++] = ids[i];
        }
      }
      ids.resize(o);
    }
    // The order of pushes does not matter: what pops is fully determined by (count, key).
    for (const auto& kv : delta) {
      if (kv.second == 0) continue;
      int64_t& cnt = pair_count[kv.first];
      cnt += kv.second;
      if (cnt > 0) heap.push({cnt, kv.first});
      else pair_count.erase(kv.first);
    }
    pair_count.erase(best);
    if (progress && ((r + 1) % 64 == 0 || r + 1 == num_merges)) progress(r + 1, num_merges);
  }
  if (progress && num_merges == 0) progress(0, 0);
  tok.build_from_merges(vocab_size);
  return tok;
}

void Tokenizer::build_from_merges(int vocab_size) {
  token_bytes_.assign(vocab_size, std::string());
  for (int i = 0; i < 256; i++) token_bytes_[i] = std::string(1, (char)i);
  ranks_.clear();
  ranks_.reserve(merges_.size() * 2);
  for (size_t r = 0; r < merges_.size(); r++) {
    token_bytes_[256 + r] = token_bytes_[merges_[r].first] + token_bytes_[merges_[r].second];
    ranks_[pair_key(merges_[r].first, merges_[r].second)] = (int)r;
  }
  eot_ = vocab_size - 1;
  token_bytes_[eot_] = kEotText;
  can_encode_ = true;
}

// ----------------------------------------------------------------------------------------------
// encoding / decoding

void Tokenizer::encode_chunk(const char* s, size_t n, std::vector<int>& out) const {
  std::vector<int> ids((const unsigned char*)s, (const unsigned char*)s + n);
  while (ids.size() >= 2) {
    int best_rank = -1;
    for (size_t i = 0; i + 1 < ids.size(); i++) {
      auto it = ranks_.find(pair_key(ids[i], ids[i + 1]));
      if (it != ranks_.end() && (best_rank < 0 || it->second < best_rank)) best_rank = it->second;
    }
    if (best_rank < 0) break;
    merge_pair(ids, merges_[best_rank].first, merges_[best_rank].second, 256 + best_rank);
  }
  out.insert(out.end(), ids.begin(), ids.end());
}

std::vector<int> Tokenizer::encode(const std::string& text) const {
  CHECK(can_encode(),
        "this tokenizer cannot encode: it was loaded from an llm.c GPT-2 file, which has no "
        "merges (decode only); use the tokenizer.bin written by prepare");
  std::vector<int> out;
  out.reserve(text.size() / 3 + 16);
  // Cache: chunk text -> (offset, length) of its ids in `cached`. The keys view into `text`,
  // which outlives the map.
  std::unordered_map<std::string_view, std::pair<uint32_t, uint32_t>> cache;
  std::vector<int> cached;
  split_chunks(text.data(), text.size(), [&](size_t st, size_t len) {
    std::string_view key(text.data() + st, len);
    auto it = cache.find(key);
    if (it == cache.end()) {
      uint32_t off = (uint32_t)cached.size();
      encode_chunk(key.data(), len, cached);
      it = cache.emplace(key, std::make_pair(off, (uint32_t)(cached.size() - off))).first;
    }
    out.insert(out.end(), cached.begin() + it->second.first,
               cached.begin() + it->second.first + it->second.second);
  });
  return out;
}

std::string Tokenizer::decode_token(int id) const {
  CHECK(id >= 0 && id < vocab_size(), "token id %d is out of range for a vocabulary of %d tokens",
        id, vocab_size());
  return token_bytes_[id];
}

std::string Tokenizer::decode(const std::vector<int>& ids) const {
  std::string s;
  for (int id : ids) {
    CHECK(id >= 0 && id < vocab_size(),
          "token id %d is out of range for a vocabulary of %d tokens", id, vocab_size());
    s += token_bytes_[id];
  }
  return s;
}

// ----------------------------------------------------------------------------------------------
// files

void Tokenizer::save(const std::string& path) const {
  CHECK(can_encode(),
        "cannot save %s: only a trained byte-level BPE tokenizer can be saved", path.c_str());
  std::vector<int32_t> buf(256 + 2 * merges_.size(), 0);
  buf[0] = kTokenizerMagic;
  buf[1] = kTokenizerVersion;
  buf[2] = vocab_size();
  buf[3] = eot_;
  buf[4] = (int32_t)merges_.size();
  for (size_t r = 0; r < merges_.size(); r++) {
    buf[256 + 2 * r] = merges_[r].first;
    buf[256 + 2 * r + 1] = merges_[r].second;
  }
  write_file_atomically(path, [&](FILE* f) {
    return fwrite(buf.data(), sizeof(int32_t), buf.size(), f) == buf.size();
  });
}

Tokenizer Tokenizer::load(const std::string& path) {
  const char* p = path.c_str();
  // Header first: a wrong file (a multi-GB shard passed as --tokenizer) is rejected before
  // anything else is read.
  std::string data = read_file_prefix(path, 1024);
  CHECK(data.size() >= 1024,
        "tokenizer file %s is truncated: %zu bytes, less than its 1024-byte header", p, data.size());
  int32_t h[256];
  memcpy(h, data.data(), sizeof(h));
  CHECK(h[0] == kTokenizerMagic || h[0] == kLlmcTokenizerMagic,
        "%s is not a tokenizer file: magic %d, expected %d (flashgpt) or %d (llm.c GPT-2)", p, h[0],
        kTokenizerMagic, kLlmcTokenizerMagic);

  Tokenizer tok;
  if (h[0] == kTokenizerMagic) {
    CHECK(h[1] == kTokenizerVersion, "tokenizer file %s has version %d; this build reads version %d",
          p, h[1], kTokenizerVersion);
    const int V = h[2];
    CHECK(V >= 257 && V <= 65536, "tokenizer file %s is corrupt: vocab_size %d is not in [257, 65536]",
          p, V);
    CHECK(h[3] == V - 1 && h[4] == V - 257,
          "tokenizer file %s is corrupt: eot %d / merges %d do not match vocab_size %d", p, h[3],
          h[4], V);
    const size_t want = 1024 + (size_t)h[4] * 8;
    data = read_file_prefix(path, want + 1);  // one byte more shows a too-long file
    CHECK(data.size() == want,
          "tokenizer file %s is truncated or corrupt: %zu bytes, expected %zu for %d merges", p,
          data.size(), want, h[4]);
    const int32_t* m = (const int32_t*)(data.data() + 1024);
    tok.merges_.resize(h[4]);
    for (int r = 0; r < h[4]; r++) {
      int a = m[2 * r], b = m[2 * r + 1];
      // A merge may only combine tokens that exist before it.
      CHECK(a >= 0 && a < 256 + r && b >= 0 && b < 256 + r,
            "tokenizer file %s is corrupt: merge %d = (%d, %d) refers to a later token", p, r, a, b);
      tok.merges_[r] = {a, b};
    }
    tok.build_from_merges(V);
    return tok;
  }
  if (h[0] == kLlmcTokenizerMagic) {
    CHECK(h[1] == 1 || h[1] == 2, "llm.c tokenizer file %s has version %d; expected 1 or 2", p, h[1]);
    const int V = h[2];
    CHECK(V > 0 && V <= 1 << 20, "llm.c tokenizer file %s is corrupt: vocab_size %d", p, V);
    data = read_file_prefix(path, 1024 + (size_t)V * 256 + 1);  // tokens are <= 255 bytes
    tok.eot_ = h[1] == 2 ? h[3] : 50256;  // version 1 had GPT-2's eot hard-wired
    CHECK(tok.eot_ >= 0 && tok.eot_ < V, "llm.c tokenizer file %s: eot token %d is not below vocab_size %d",
          p, tok.eot_, V);
    tok.token_bytes_.resize(V);
    size_t pos = 1024;
    for (int i = 0; i < V; i++) {
      CHECK(pos < data.size(), "llm.c tokenizer file %s is truncated at token %d of %d", p, i, V);
      size_t len = (unsigned char)data[pos++];
      CHECK(pos + len <= data.size(), "llm.c tokenizer file %s is truncated at token %d of %d", p, i, V);
      tok.token_bytes_[i] = data.substr(pos, len);
      pos += len;
    }
    CHECK(pos == data.size(), "llm.c tokenizer file %s is corrupt: %zu extra bytes after %d tokens",
          p, data.size() - pos, V);
    return tok;  // no merges: decode only
  }
  THROW_ERROR("%s is not a tokenizer file (magic %d)", p, h[0]);  // unreachable: checked above
}
