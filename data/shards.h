// shards — llm.c-compatible token shards.
// File: 256 x int32 header (magic 20240520, version 1, token count, rest 0), then uint16 tokens.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

constexpr int kShardMagic = 20240520;
constexpr int kShardVersion = 1;

// Written to path.tmp, then renamed. Throws naming the file if it cannot be written.
void write_shard(const std::string& path, const std::vector<uint16_t>& tokens);
// Reads and validates: magic, version, size matches the header's token count (truncation),
// every token < vocab_size when vocab_size > 0. Throws one clear line naming the file.
std::vector<uint16_t> read_shard(const std::string& path, int vocab_size = 0);
// Only the header: returns the token count (validates magic/version/size).
size_t shard_num_tokens(const std::string& path);
// Files matching a glob pattern, sorted; throws naming the pattern and flag if none match.
std::vector<std::string> glob_files(const std::string& pattern, const std::string& flag);
