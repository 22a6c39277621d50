// run_files — the files every subcommand writes, and what it may write over.
//
// The rule: no command writes over a file that it did not create. check_output_path is the one
// gate every output path of every subcommand passes before the command writes anything. For
// an output path it allows
//   - a path where nothing exists (a new file), or an empty regular file (nothing to lose);
//   - a symbolic link: written through (the file it names is checked and written, the link
//     stays); a link to nothing is refused;
//   - a non-empty regular file only when it is recognisably this output's own earlier version
//     (OutputKind says how each one is recognised), e.g. an eval JSON that says it was written
//     by `flashgpt eval`; a checkpoint, a shard, a model or any other file is refused;
//   - a character device or a pipe (/dev/stdout, /dev/null, a FIFO) only for a stream output
//     (train --log, bench-attention --csv), which is written in place and never renamed over;
//     a directory, a block device or a socket never.
// A refusal is one line naming the flag, the file, what the file is when we can tell (a token
// shard, a model checkpoint, ...) and what to do; nothing has been written then.
//
// What `flashgpt train` does to the files around a run, so that no run loses or mixes
// another's data:
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

// Each output, and how its own earlier version is recognised.
enum class OutputKind {
  TrainLog,           // train --log: every line one of train's step records {"step": N, ...}
  TrainLock,          // train --out DIR/train.lock: empty, or "pid N on HOST"
  EvalJson,           // eval --json: a JSON object whose "producer" is "flashgpt eval"
  TokenizerCopy,      // train/export --out DIR/tokenizer.bin: only ever the same bytes (never
                      // replaced: copy_tokenizer_to_out returns before writing those)
  PreparedTokenizer,  // prepare --out DIR/tokenizer.bin: a flashgpt tokenizer file, in a
                      // directory with no checkpoint or exported model (made with it)
  TokenShard,         // prepare --out DIR/{train,val}_NNNNNN.bin: a token shard
  HfModel,            // export --out DIR/model.safetensors: written by flashgpt export (its
                      // metadata's "producer" says so)
  HfConfig,           // export --out DIR/config.json: beside such a model.safetensors
  ProfileTable,       // profile --out DIR/{profile,plan}.csv: first line "# command: flashgpt profile"
  ProfileJson,        // profile --out DIR/{profile,plan}.json: "command": "flashgpt profile ..."
  BenchAttentionCsv,  // bench-attention --csv: first line "# gpu: ", then its column header
};

// Throws (one line naming flag and path) unless a command that writes `kind` to path may do so.
void check_output_path(const std::string& path, const char* flag, OutputKind kind);

// The "producer" field of an eval JSON: how eval recognises its own earlier output.
constexpr const char* kEvalJsonProducer = "flashgpt eval";
// bench-attention --csv's column header (its second line).
constexpr const char* kBenchAttentionCsvHeader =
    "backend,hs,heads,kv_heads,batch,seq_len,causal,fwd_ms,bwd_ms,fwdbwd_ms,fwd_tflops,"
    "bwd_tflops,fwdbwd_tflops,extra_bytes,status";

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
