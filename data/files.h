// files — the small file helpers every writer and reader here shares.
// write_file_atomically: the content goes to PATH.tmp (written, flushed, fsync'ed, closed; any
// short write is an error), which is then renamed to PATH. A crash or a full disk therefore
// never leaves a half-written file under the real name, and the old file stays until the new
// one is complete. On failure the .tmp is removed and the error names PATH and the cause.
#pragma once
#include <cstdio>
#include <functional>
#include <string>

// `write` gets the open FILE* and returns false on a short write.
void write_file_atomically(const std::string& path, const std::function<bool(FILE*)>& write);
// The whole file; throws naming `what` (e.g. "--tokenizer") and the path.
std::string read_file_bytes(const std::string& path, const char* what);
bool file_exists(const std::string& path);
bool is_directory(const std::string& path);
// Both exist and are the same file (device and inode), e.g. through a link or "./".
bool same_file(const std::string& a, const std::string& b);
// Both readable with byte-identical contents.
bool same_contents(const std::string& a, const std::string& b);
