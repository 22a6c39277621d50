// documents.cpp — document lengths of a token stream (the rules: documents.h).
#include "data/documents.h"

#include <algorithm>

#include "data/shards.h"
#include "kernels/attention/mask.h"
#include "kernels/common.h"

void DocumentLengths::add(const uint16_t* tokens, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (tokens[i] == eot_ && open_ > 0) {
      ended_.push_back(open_);
      open_ = 0;
    }
    open_++;
  }
}

std::vector<uint64_t> DocumentLengths::lengths() const {
  std::vector<uint64_t> all = ended_;
  if (open_ > 0) all.push_back(open_);
  return all;
}

DocumentStats DocumentLengths::stats() const {
  std::vector<uint64_t> len = lengths();
  DocumentStats s;
  s.count = len.size();
  if (len.empty()) return s;
  for (uint64_t l : len) s.tokens += l;
  s.mean = double(s.tokens) / double(s.count);
  std::sort(len.begin(), len.end());
  // Nearest rank: the ceil(p * count)-th smallest.
  auto rank = [&](int pct) { return len[(s.count * pct + 99) / 100 - 1]; };
  s.p50 = rank(50);
  s.p90 = rank(90);
  s.max = len.back();
  return s;
}

DocumentLengths shard_document_lengths(const std::vector<std::string>& files, int eot,
                                       size_t max_tokens) {
  DocumentLengths docs(eot);
  size_t read = 0;
  for (const std::string& f : files) {
    if (max_tokens > 0 && read >= max_tokens) break;
    const std::vector<uint16_t> tokens = read_shard(f);
    const size_t n = max_tokens > 0 ? std::min(tokens.size(), max_tokens - read) : tokens.size();
    docs.add(tokens.data(), n);
    read += n;
  }
  return docs;
}

std::string format_document_stats(const DocumentStats& s) {
  if (s.count == 0) return "no documents";
  return flashgpt::strformat("%zu documents in %zu tokens; tokens per document: mean %.1f, p50 "
                             "%zu, p90 %zu, max %zu", s.count, s.tokens, s.mean, s.p50, s.p90,
                             s.max);
}

double document_mask_work_fraction(const std::vector<uint64_t>& lengths, int T, int W) {
  CHECK(T >= 1 && W >= 0, "internal: document_mask_work_fraction: T = %d, W = %d", T, W);
  uint64_t total = 0;
  for (uint64_t l : lengths) total += l;
  const uint64_t windows = total / uint64_t(T);
  if (windows == 0) return 1.0;
  // Walk the documents and the windows together: each window is cut into the pieces of the
  // documents it holds; a piece is a document of its own inside the window (mask.h).
  double visible = 0;
  size_t d = 0;
  uint64_t left = lengths.empty() ? 0 : lengths[0];  // tokens of document d not yet in a window
  for (uint64_t w = 0; w < windows; w++) {
    uint64_t room = uint64_t(T);
    while (room > 0) {
      while (left == 0) left = lengths[++d];
      const uint64_t piece = std::min(left, room);
      visible += double(window_pairs(int64_t(piece), W));
      left -= piece;
      room -= piece;
    }
  }
  return visible / (double(windows) * double(window_pairs(T, 0)));
}
