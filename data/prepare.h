// prepare — text files -> byte-level BPE tokenizer + llm.c token shards.
//
// Documents: each input file is split into documents on lines that are exactly "%" (the
// fortune format); a file without such lines is split on blank lines (paragraphs). Each
// document is preceded by <|endoftext|>. A seeded RNG sends each document to val with
// probability val_fraction (at least one document goes to val when val_fraction > 0).
// Outputs: DIR/tokenizer.bin, DIR/train_000000.bin, ... and DIR/val_000000.bin, ... (a new
// shard every shard_tokens), all written under staged names and renamed together at the end:
// a failed run changes nothing in DIR. What is already in DIR may be replaced only when it is
// prepare's own: shards, and a tokenizer.bin that no checkpoint or exported model beside it
// was made with (train/run_files.h); anything else is refused before any work.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/documents.h"

struct PrepareOptions {
  std::vector<std::string> inputs;  // text files (--input)
  std::string out_dir;              // --out (created if missing)
  int vocab_size = 4096;            // --vocab-size, 257..65536
  double val_fraction = 0.05;       // --val-fraction, [0, 0.5]
  size_t shard_tokens = 100000000;  // --shard-tokens
  uint64_t seed = 1337;
  bool quiet = false;               // no progress line (tests)
};
struct PrepareResult {
  size_t train_tokens = 0, val_tokens = 0;
  int train_shards = 0, val_shards = 0;
  DocumentStats train_docs, val_docs;  // printed as "prepare: train: " + format_document_stats
};
// Validates options (bad --input / --out / --vocab-size / --val-fraction -> flashgpt::Error
// naming the flag) before writing anything.
PrepareResult prepare_corpus(const PrepareOptions& opt);
