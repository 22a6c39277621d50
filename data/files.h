// files — the small file helpers every writer and reader here shares.
// write_file_atomically: the content goes to PATH.tmp (written, flushed, fsync'ed, closed; any
// short write is an error), which is then renamed to PATH. A crash or a full disk therefore
// never leaves a half-written file under the real name, and the old file stays until the new
// one is complete. On failure the .tmp is removed and the error names PATH and the cause.
// A symbolic link at PATH is written through: the file it names gets the new content (its
// .tmp beside it) and the link stays. Only a regular file is ever replaced: a directory, a
// device, a pipe or a socket at PATH is refused before anything is written.
// Whether a command may replace an existing file at all is decided before it writes, by
// check_output_path (train/run_files.h).
#pragma once
#include <cstdio>
#include <functional>
#include <string>

// `write` gets the open FILE* and returns false on a short write.
void write_file_atomically(const std::string& path, const std::function<bool(FILE*)>& write);
// The whole file; throws naming `what` (e.g. "--tokenizer") and the path.
std::string read_file_bytes(const std::string& path, const char* what);
bool file_exists(const std::string& path);
// "" when a file can be created in dir (proved by creating and removing a uniquely named one, so
// no file already there is touched), else the reason (strerror).
std::string dir_write_error(const std::string& dir);
// The file a write to path lands on: path itself, or for a symbolic link the file it names
// (followed to the end). Throws naming `what` and path for a link to nothing or a loop.
std::string write_target(const std::string& path, const char* what);
bool is_directory(const std::string& path);
// Both exist and are the same file (device and inode), e.g. through a link or "./".
bool same_file(const std::string& a, const std::string& b);
// Both readable with byte-identical contents.
bool same_contents(const std::string& a, const std::string& b);
