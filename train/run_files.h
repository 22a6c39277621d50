// run_files — what `flashgpt train` and `export` do to the files around a run, so that no run
// loses or mixes another's data (the rule for every output path: model/output_files.h):
//   OutDirLock      --out DIR/train.lock, held with flock() for the whole run (the kernel drops
//                   it when the process ends, kill -9 included): a second train into the same
//                   --out is refused with the first one's pid.
//   check_fresh_out a run without --resume refuses an --out that already holds checkpoints
//                   (a later --resume would continue the old run, or mix the two).
//   tokenizer copy  DIR/tokenizer.bin (train --out, export --out) is a byte copy of the model's
//                   tokenizer file (ours or llm.c's), written before the first checkpoint. One
//                   already there must hold the same bytes: another tokenizer is never
//                   replaced (it belongs to that directory's checkpoints, model or shards).
//   --log           on --resume the lines of steps after the checkpoint (written before a crash)
//                   are dropped, so no step appears twice.
#pragma once
#include <cstdint>
#include <string>

#include "model/output_files.h"

class OutDirLock {
 public:
  // Creates dir if needed; throws naming --out when it is not writable or another process
  // holds the lock.
  explicit OutDirLock(const std::string& dir);
  ~OutDirLock();
  OutDirLock(const OutDirLock&) = delete;
  OutDirLock& operator=(const OutDirLock&) = delete;

 private:
  int fd_ = -1;
};

void check_fresh_out(const std::string& dir);
// Before any work: throws naming --out when DIR/tokenizer.bin exists and is not a copy of
// tok_path (on --resume: the checkpoints were trained with it). tok_path may be empty.
void check_out_tokenizer(const std::string& dir, const std::string& tok_path, bool resume);
// Copies tok_path to DIR/tokenizer.bin unless it is there already (same bytes or same file);
// another tokenizer there is refused as check_out_tokenizer refuses it.
void copy_tokenizer_to_out(const std::string& dir, const std::string& tok_path);

// Keeps the lines of steps <= last_step (JSON objects starting {"step": N), atomically. A log
// that is not a regular file (/dev/stdout, a pipe) is left as it is.
void trim_log(const std::string& log_path, int64_t last_step);
