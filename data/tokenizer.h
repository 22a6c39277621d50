// tokenizer — byte-level BPE, our own implementation.
//
// Token ids: 0..255 are the raw bytes, 256..V-2 are merges in the order they were learned,
// V-1 is <|endoftext|> (the document separator; encode() never emits it, prepare inserts it).
// Every byte sequence round-trips exactly: decode(encode(s)) == s, for any bytes (invalid
// UTF-8 included), because the base alphabet is all 256 bytes.
// Training: the text is pre-split into chunks GPT-2 style (a run of letters / digits / other
// symbols, each taking one leading space), chunk counts are collected, then the most frequent
// adjacent pair is merged repeatedly (ties broken by the smaller pair of ids: deterministic).
// Encoding applies the merges by rank within each chunk.
// load() also reads llm.c's GPT-2 tokenizer file (magic 20240328, decode only).
//
// Pre-split (bytes, no regex): a chunk is an optional single leading space followed by a run
// of letters (ASCII letters and every byte >= 0x80, so UTF-8 characters stay inside words),
// or of digits, or of other non-space symbols; whitespace runs are chunks of their own, except
// that a run followed by a non-space leaves its last ' ' to the next chunk (" the", as GPT-2).
// Runs longer than 256 bytes are cut into 256-byte chunks (bounds the cost on odd inputs).
// Training counts the unique chunks, keeps each as an id list with its count, and holds the
// pair counts in a table updated incrementally: a merge visits only the chunks that contain
// the pair (an index pair -> chunks) and changes only the counts of the pairs next to each
// occurrence; the best pair comes from a max-heap with lazy deletion. About 0.1 s for the
// 2.6 MB fortunes corpus and 4096 tokens.
// Training needs V-257 distinct merges: a text too small for that throws, saying the most
// vocab_size it supports.
// Encoding: inside each chunk, repeatedly merge every occurrence of the lowest-ranked pair
// (this reproduces training's merge order exactly); each distinct chunk of one encode() call is
// encoded once (cache). A chunk costs O(length * merges applied), hence the 256-byte cap.
//
// File format (tokenizer.bin, little-endian, written to path.tmp then renamed):
//   header 256 x int32: [0] magic 20250601, [1] version 1, [2] vocab_size V,
//                       [3] eot id (= V-1), [4] number of merges M (= V-257), rest 0
//   then M pairs of int32 (a, b): merge r makes token 256+r from tokens a and b (a, b < 256+r)
//   Token bytes are not stored: bytes(256+r) = bytes(a) + bytes(b).
// llm.c's file (decode only): header 256 x uint32: magic 20240328, version 1|2, V, eot (v2;
// v1: 50256), then for each token: uint8 length + that many bytes.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

class Tokenizer {
 public:
  // progress(done_merges, total_merges) is called now and then while training.
  static Tokenizer train(const std::string& text, int vocab_size,
                         const std::function<void(int, int)>& progress = nullptr);
  static Tokenizer load(const std::string& path);  // throws naming the file on any problem
  void save(const std::string& path) const;        // written to path.tmp, then renamed

  std::vector<int> encode(const std::string& text) const;
  std::string decode(const std::vector<int>& ids) const;
  std::string decode_token(int id) const;  // bytes of one token; "<|endoftext|>" for eot
  int vocab_size() const { return (int)token_bytes_.size(); }
  int eot_token() const { return eot_; }
  bool can_encode() const { return can_encode_; }  // false for llm.c files (no merges)

 private:
  std::vector<std::pair<int, int>> merges_;  // merge r creates token 256 + r
  std::vector<std::string> token_bytes_;     // (V) bytes of each token
  int eot_ = -1;
  bool can_encode_ = false;                  // set by train() and by load() of our format
  std::unordered_map<uint64_t, int> ranks_;  // (a << 32 | b) -> merge rank r, for encode
  void build_from_merges(int vocab_size);    // fills token_bytes_, eot_, ranks_ from merges_
  void encode_chunk(const char* s, size_t n, std::vector<int>& out) const;
};

constexpr int kTokenizerMagic = 20250601;
constexpr int kTokenizerVersion = 1;
constexpr int kLlmcTokenizerMagic = 20240328;
