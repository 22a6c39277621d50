// eval — the loss of a model on token shards, and the `flashgpt eval` command.
//
//   flashgpt eval --checkpoint M (--data DIR | --val-pattern GLOB) [--batch B] [--seq-len T]
//                 [--steps N] [--device auto|cpu|cuda] [--attn ...] [--tokenizer F] [--json F]
// Reads (B, T+1) windows in order (no shuffle; data/dataloader.h) from the split's first
// window: N batches, or with no --steps the whole split (every full batch of B windows of every
// shard; the leftover windows of a shard, fewer than B, are skipped: --batch 1 scores all).
// loss = mean cross-entropy (nats) over the B*T*N predicted tokens, the same number as
// `train`'s val loss; perplexity = exp(loss). With a tokenizer (--tokenizer, else
// tokenizer.bin beside the checkpoint, else --data's): bits per byte = the summed loss in bits
// over the UTF-8 bytes of the predicted tokens (<|endoftext|> counts 0 bytes: it is not text),
// comparable across vocabularies. Prints one line; --json FILE also writes the numbers as JSON
// (its "producer" field, "flashgpt eval", lets a later eval replace it; any other file at
// --json is refused before the evaluation starts: model/output_files.h).
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "data/dataloader.h"
#include "model/model.h"
#include "train/options.h"

struct EvalSums {
  double loss_sum = 0;    // nats, summed over predicted tokens
  int64_t tokens = 0;     // predicted tokens
  int64_t bytes = 0;      // their bytes (with token_bytes)
  int64_t batches = 0;
  double mean_loss() const { return tokens ? loss_sum / tokens : 0; }
};
// The next n batches of the loader through the model (forward only, B x T as the loader's),
// added to sums. token_bytes: bytes of each token id, or nullptr.
void eval_batches(Model& model, DataLoader& loader, int64_t n, int B, int T,
                  const std::vector<int>* token_bytes, EvalSums& sums);

struct EvalResult {
  EvalSums sums;
  double loss = 0, perplexity = 0;
  double bits_per_byte = -1;  // < 0: no tokenizer
};
EvalResult run_eval(const EvalOptions& opt, FILE* out = stdout);
