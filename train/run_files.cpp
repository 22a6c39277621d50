// run_files.cpp — see run_files.h.
#include "train/run_files.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "data/files.h"
#include "data/tokenizer.h"
#include "kernels/common.h"
#include "model/checkpoint.h"

OutDirLock::OutDirLock(const std::string& dir) {
  mkdir(dir.c_str(), 0755);
  CHECK(is_directory(dir), "--out '%s' is not a directory and cannot be made one (%s); pick "
        "another --out", dir.c_str(), strerror(errno));
  const std::string path = dir + "/train.lock";
  check_output_path(path, "--out", OutputKind::TrainLock);
  fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  CHECK(fd_ >= 0, "--out '%s' is not a writable directory (%s); pick another --out", dir.c_str(),
        strerror(errno));
  if (flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char who[128] = {0};
    ssize_t n = pread(fd_, who, sizeof who - 1, 0);
    who[n > 0 ? n : 0] = 0;
    if (char* nl = strchr(who, '\n')) *nl = 0;
    close(fd_);
    fd_ = -1;
    CHECK(err != EWOULDBLOCK, "--out '%s' is in use by another flashgpt train (%s); wait for it to "
          "finish or pick another --out", dir.c_str(), who[0] ? who : "pid unknown");
    THROW_ERROR("--out '%s': cannot lock %s: %s", dir.c_str(), path.c_str(), strerror(err));
  }
  char who[128];
  char host[64] = "?";
  gethostname(host, sizeof host - 1);
  const int n = snprintf(who, sizeof who, "pid %d on %s\n", (int)getpid(), host);
  bool ok = ftruncate(fd_, 0) == 0 && pwrite(fd_, who, n, 0) == n;
  if (!ok) {
    const int err = errno;
    close(fd_);
    fd_ = -1;
    THROW_ERROR("--out '%s' is not writable (%s); pick another --out", dir.c_str(), strerror(err));
  }
}

OutDirLock::~OutDirLock() {
  if (fd_ >= 0) close(fd_);  // releases the flock; the file stays (it is empty of meaning)
}

void check_fresh_out(const std::string& dir) {
  const std::vector<std::string> old = checkpoint_files(dir);
  CHECK(old.empty(), "--out '%s' already holds checkpoints (%s%s) of another run; continue that "
        "run with --resume, or pick an empty --out, or delete %s/model_*.bin and state_*.bin",
        dir.c_str(), old.back().c_str(), old.size() > 1 ? ", ..." : "", dir.c_str());
}

void check_out_tokenizer(const std::string& dir, const std::string& tok_path, bool resume) {
  const std::string dst = dir + "/tokenizer.bin";
  if (tok_path.empty() || !file_exists(dst) || same_contents(tok_path, dst)) return;
  CHECK(!resume, "--resume: the checkpoints in --out '%s' were trained with %s, which differs "
        "from the tokenizer '%s' of this run; resume with --tokenizer %s (or the data it was "
        "prepared with)", dir.c_str(), dst.c_str(), tok_path.c_str(), dst.c_str());
  check_output_path(dst, "--out", OutputKind::TokenizerCopy);
}

void copy_tokenizer_to_out(const std::string& dir, const std::string& tok_path) {
  const std::string dst = dir + "/tokenizer.bin";
  if (tok_path.empty() || same_contents(tok_path, dst)) return;
  check_output_path(dst, "--out", OutputKind::TokenizerCopy);
  const std::string bytes = read_file_bytes(tok_path, "--tokenizer");
  Tokenizer::load(tok_path);  // still a valid tokenizer file (it was loaded before the run)
  write_file_atomically(dst, [&](FILE* f) {
    return fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  });
}

void trim_log(const std::string& log_path, int64_t last_step) {
  struct stat st;
  if (stat(log_path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return;
  const std::string text = read_file_bytes(log_path, "--log");
  std::string kept;
  size_t dropped = 0;
  for (size_t i = 0; i < text.size();) {
    size_t j = text.find('\n', i);
    j = j == std::string::npos ? text.size() : j + 1;
    long long step = 0;
    // A line cut short by a crash (no '\n') is dropped as well.
    const bool complete = text[j - 1] == '\n';
    if (complete && (sscanf(text.c_str() + i, "{\"step\": %lld", &step) != 1 || step <= last_step))
      kept.append(text, i, j - i);
    else
      dropped++;
    i = j;
  }
  if (dropped == 0) return;
  write_file_atomically(log_path, [&](FILE* f) {
    return fwrite(kept.data(), 1, kept.size(), f) == kept.size();
  });
}
