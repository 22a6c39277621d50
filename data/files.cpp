// files.cpp — see files.h.
#include "data/files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "kernels/common.h"

std::string dir_write_error(const std::string& dir) {
  std::string probe = dir + "/.flashgpt_write_test_XXXXXX";
  const int fd = mkstemp(&probe[0]);
  if (fd < 0) return strerror(errno);
  close(fd);
  unlink(probe.c_str());
  return "";
}

std::string write_target(const std::string& path, const char* what) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return path;
  CHECK(stat(path.c_str(), &st) == 0, "%s '%s' is a symbolic link to a missing file (%s); give "
        "the path of a file to write", what, path.c_str(), strerror(errno));
  char real[PATH_MAX];
  // A target without a name (/dev/stdout -> a pipe) is reached through the link itself.
  return realpath(path.c_str(), real) ? std::string(real) : path;
}

void write_file_atomically(const std::string& link_or_path,
                           const std::function<bool(FILE*)>& write) {
  const std::string path = write_target(link_or_path, "output");
  struct stat st;
  CHECK(stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode), "cannot write '%s': it exists and "
        "is not a regular file (a directory, device, pipe or socket); give a file name",
        path.c_str());
  const std::string tmp = path + ".tmp";
  FILE* f = fopen(tmp.c_str(), "wb");
  CHECK(f, "cannot write '%s': %s; check that the directory exists and is writable", tmp.c_str(),
        strerror(errno));
  errno = 0;
  bool ok = write(f);
  ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
  int err = errno;
  if (fclose(f) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (!ok) {
    remove(tmp.c_str());
    THROW_ERROR("writing '%s' failed: %s%s; the file under that name (if any) is untouched", path.c_str(),
                err ? strerror(err) : "short write", err == ENOSPC || err == 0 ? " (disk full?)" : "");
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    err = errno;
    remove(tmp.c_str());
    THROW_ERROR("cannot rename '%s' to '%s': %s", tmp.c_str(), path.c_str(), strerror(err));
  }
}

std::string read_file_bytes(const std::string& path, const char* what) {
  FILE* f = fopen(path.c_str(), "rb");
  CHECK(f, "%s '%s' cannot be read: %s", what, path.c_str(), strerror(errno));
  std::string data;
  char buf[1 << 16];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) data.append(buf, n);
  const bool bad = ferror(f);
  fclose(f);
  CHECK(!bad, "%s '%s': read error", what, path.c_str());
  return data;
}

bool file_exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

bool is_directory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa, sb;
  return stat(a.c_str(), &sa) == 0 && stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

bool same_contents(const std::string& a, const std::string& b) {
  if (same_file(a, b)) return true;
  struct stat sa, sb;
  if (stat(a.c_str(), &sa) != 0 || stat(b.c_str(), &sb) != 0 || sa.st_size != sb.st_size)
    return false;
  return read_file_bytes(a, "file") == read_file_bytes(b, "file");
}
