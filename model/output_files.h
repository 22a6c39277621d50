// output_files — the files every subcommand writes, and what it may write over. In model/, beside
// the formats it recognises (checkpoints, safetensors, shards, tokenizers), so that train/,
// bench/ and prepare all reach it.
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
#pragma once
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
