// documents — the documents of a token stream and their lengths: what --mask document sees
// (kernels/attention/mask.h), reported by prepare for the shards it writes and by the trainer's
// start line, so a user can see what the document mask will save.
//
// A document starts at each end-of-text token (EOT) and runs to the token before the next EOT:
// the EOT belongs to the document it starts (mask.h's rule), and a length counts the EOT. The
// tokens before the stream's first EOT (a stream that starts mid-document) are a document too.
// Shards are one stream, read in order: a document that straddles two shards (prepare and llm.c
// cut shards at a token count) is one document.
// Percentiles are nearest-rank: pXX is the smallest length with at least XX% of the documents
// at or below it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

struct DocumentStats {
  size_t tokens = 0;  // tokens read
  size_t count = 0;   // documents
  double mean = 0;    // tokens per document
  size_t p50 = 0, p90 = 0, max = 0;
};

// Documents of a stream fed in pieces (shard by shard, or buffer by buffer as prepare writes).
class DocumentLengths {
 public:
  explicit DocumentLengths(int eot) : eot_(eot) {}
  void add(const uint16_t* tokens, size_t n);  // the next n tokens of the stream
  // The stream's lengths so far, in stream order; the document in progress counts as ended.
  std::vector<uint64_t> lengths() const;
  DocumentStats stats() const;

 private:
  int eot_;
  std::vector<uint64_t> ended_;  // lengths of the documents followed by an EOT
  uint64_t open_ = 0;            // tokens of the document in progress
};

// Reads the shards in order (files as glob_files returns them), at most max_tokens tokens in
// all (0: every token; a cap keeps a start line fast on a large corpus: the last document read
// is then cut short). Throws like read_shard, naming the file.
DocumentLengths shard_document_lengths(const std::vector<std::string>& files, int eot,
                                       size_t max_tokens = 0);

// "1234 documents in 56789 tokens; tokens per document: mean 46.0, p50 40, p90 90, max 300"
// ("no documents" for an empty stream).
std::string format_document_stats(const DocumentStats& s);

// The attention work the document mask leaves, as a fraction of causal attention's: the stream
// cut into windows of T tokens at multiples of T (the dataloader's windows, unshuffled), each
// window's visible (query, key) pairs under the document mask and window W (0: none) against
// T(T+1)/2. 1 when the stream holds no whole window.
double document_mask_work_fraction(const std::vector<uint64_t>& lengths, int T, int W);
