// run_files — what `flashgpt train` does to the files around a run, so that no run loses or
// mixes another's data:
//   OutDirLock      --out DIR/train.lock, held with flock() for the whole run (the kernel drops
//                   it when the process ends, kill -9 included): a second train into the same
//                   --out is refused with the first one's pid.
//   check_fresh_out a run without --resume refuses an --out that already holds checkpoints
//                   (a later --resume would continue the old run, or mix the two).
//   tokenizer beside the checkpoints: --out/tokenizer.bin is a byte copy of the run's
//                   tokenizer file (ours or llm.c's), written before the first checkpoint; an
//                   existing different one is an error on --resume (the checkpoints were
//                   trained with it) and is replaced only when no checkpoint is there.
//   --log           refused when it names an existing binary file of ours (a shard, a model,
//                   an optimizer state, a tokenizer); on --resume the lines of steps after the
//                   checkpoint (written before a crash) are dropped, so no step appears twice.
#pragma once
#include <cstdint>
#include <string>

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
// Before the run starts: throws when a --resume would pair the checkpoints with another
// tokenizer. tok_path may be empty (no tokenizer).
void check_out_tokenizer(const std::string& dir, const std::string& tok_path, bool resume);
// Copies tok_path to DIR/tokenizer.bin unless it is there already (same bytes or same file).
void copy_tokenizer_to_out(const std::string& dir, const std::string& tok_path);

void check_log_path(const std::string& log_path);
// Keeps the lines of steps <= last_step (JSON objects starting {"step": N), atomically.
void trim_log(const std::string& log_path, int64_t last_step);
