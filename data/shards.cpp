// shards — llm.c-compatible token shards: 256 x int32 header, then uint16 tokens.
// Every reader validates what it can before trusting the file: magic, version, that the size
// matches the header's token count (truncated downloads and half-written files), and token ids
// against the vocabulary (shards made with another tokenizer).
#include "data/shards.h"

#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>

#include "data/files.h"
#include "kernels/common.h"

namespace {

constexpr size_t kHeaderBytes = 256 * sizeof(int32_t);

// Opens path, reads and checks the header and the file size; returns the token count.
// On success *f is open and positioned at the first token.
size_t open_shard(const std::string& path, FILE** f) {
  const char* p = path.c_str();
  *f = fopen(p, "rb");
  CHECK(*f, "cannot open shard %s: %s", p, strerror(errno));
  auto fail = [&](const std::string& msg) {
    fclose(*f);
    *f = nullptr;
    throw flashgpt::Error(msg);
  };
  struct stat sb;
  if (fstat(fileno(*f), &sb) != 0)
    fail(flashgpt::strformat("cannot stat shard %s: %s", p, strerror(errno)));
  if (!S_ISREG(sb.st_mode)) fail(flashgpt::strformat("shard %s is not a regular file", p));
  int32_t h[256];
  if (fread(h, 1, kHeaderBytes, *f) != kHeaderBytes)
    fail(flashgpt::strformat("shard %s is truncated: %lld bytes, less than its 1024-byte header", p,
                             (long long)sb.st_size));
  if (h[0] != kShardMagic)
    fail(flashgpt::strformat("%s is not a token shard: magic %d, expected %d (llm.c format); "
                             "make shards with prepare", p, h[0], kShardMagic));
  if (h[1] != kShardVersion)
    fail(flashgpt::strformat("shard %s has version %d; this build reads version %d", p, h[1],
                             kShardVersion));
  if (h[2] < 0) fail(flashgpt::strformat("shard %s is corrupt: token count %d", p, h[2]));
  const size_t ntok = (size_t)h[2];
  const size_t want = kHeaderBytes + ntok * sizeof(uint16_t);
  if ((size_t)sb.st_size != want)
    fail(flashgpt::strformat("shard %s is %s: %lld bytes, but its header says %zu tokens (%zu "
                             "bytes); re-run prepare", p,
                             (size_t)sb.st_size < want ? "truncated" : "corrupt",
                             (long long)sb.st_size, ntok, want));
  return ntok;
}

}  // namespace

void write_shard(const std::string& path, const std::vector<uint16_t>& tokens) {
  CHECK(tokens.size() <= (size_t)INT_MAX,
        "shard %s: %zu tokens do not fit the int32 header; lower --shard-tokens", path.c_str(),
        tokens.size());
  int32_t h[256] = {0};
  h[0] = kShardMagic;
  h[1] = kShardVersion;
  h[2] = (int32_t)tokens.size();
  write_file_atomically(path, [&](FILE* f) {
    return fwrite(h, sizeof(h), 1, f) == 1 &&
           (tokens.empty() || fwrite(tokens.data(), sizeof(uint16_t), tokens.size(), f) == tokens.size());
  });
}

size_t shard_num_tokens(const std::string& path) {
  FILE* f = nullptr;
  size_t n = open_shard(path, &f);
  fclose(f);
  return n;
}

std::vector<uint16_t> read_shard(const std::string& path, int vocab_size) {
  FILE* f = nullptr;
  size_t n = open_shard(path, &f);
  std::vector<uint16_t> tokens(n);
  size_t got = n ? fread(tokens.data(), sizeof(uint16_t), n, f) : 0;
  fclose(f);
  CHECK(got == n, "error reading shard %s: got %zu of %zu tokens (file changed while reading?)",
        path.c_str(), got, n);
  if (vocab_size > 0) {
    for (size_t i = 0; i < n; i++) {
      if (tokens[i] >= vocab_size)
        THROW_ERROR("shard %s: token id %d at position %zu is >= the vocab size %d; the shard was made "
                    "with a larger vocabulary: use the tokenizer.bin it was prepared with (--vocab-size "
                    "of at least %d)",
                    path.c_str(), (int)tokens[i], i, vocab_size, (int)tokens[i] + 1);
    }
  }
  return tokens;
}

std::vector<std::string> glob_files(const std::string& pattern, const std::string& flag) {
  CHECK(!pattern.empty(), "%s is empty; give a shard file or a glob such as data/train_*.bin",
        flag.c_str());
  glob_t g;
  int rc = glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> files;
  if (rc == 0)
    for (size_t i = 0; i < g.gl_pathc; i++) files.push_back(g.gl_pathv[i]);
  globfree(&g);
  CHECK(rc != GLOB_NOSPACE && rc != GLOB_ABORTED, "%s '%s': cannot read the directory (%s)",
        flag.c_str(), pattern.c_str(), rc == GLOB_NOSPACE ? "out of memory" : "read error");
  CHECK(!files.empty(), "%s '%s' matches no files; check the path (prepare writes DIR/train_*.bin "
        "and DIR/val_*.bin)", flag.c_str(), pattern.c_str());
  std::sort(files.begin(), files.end());
  return files;
}
