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
#pragma once
#include <cstdint>
#include <functional>
#include <string>
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
  bool can_encode() const { return !merges_.empty() || vocab_size() <= 257; }  // false for llm.c files

 private:
  std::vector<std::pair<int, int>> merges_;  // merge r creates token 256 + r
  std::vector<std::string> token_bytes_;     // (V) bytes of each token
  int eot_ = -1;
};
