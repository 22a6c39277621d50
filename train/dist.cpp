// dist.cpp — see dist.h.
#include "train/dist.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "kernels/common.h"

namespace {

using Clock = std::chrono::steady_clock;

const time_t kProcessStart = time(nullptr);
constexpr time_t kStaleMarkerS = 60;

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// A non-negative integer, or throws naming `what`.
int parse_int(const char* s, const std::string& what) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(s, &end, 10);
  CHECK(*s != '\0' && end && *end == '\0' && errno == 0 && v >= 0 && v <= 1000000,
        "%s='%s' is not a non-negative integer", what.c_str(), s);
  return (int)v;
}

struct EnvSet {
  const char *rank, *world, *local;
};
constexpr EnvSet kEnvSets[] = {
    {"RANK", "WORLD_SIZE", "LOCAL_RANK"},
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
    {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
};

struct Fd {
  int fd = -1;
  ~Fd() { if (fd >= 0) close(fd); }
};

// Waits until fd is ready for `events` or the deadline passes; false on timeout.
bool wait_fd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    double left = std::chrono::duration<double>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    int rc = poll(&p, 1, (int)std::min(left * 1000 + 1, 1000.0));
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) return false;
  }
}

void send_all(int fd, const unsigned char* p, size_t n, const std::string& peer) {
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    CHECK(w > 0 || errno == EINTR, "--dist-init tcp: sending the NCCL id to %s failed: %s",
          peer.c_str(), strerror(errno));
    if (w > 0) { p += w; n -= (size_t)w; }
  }
}

void exchange_tcp(const DistInit& in, int rank, int world, unsigned char* id, double timeout_s) {
  const std::string where = flashgpt::strformat("tcp://%s:%d", in.host.c_str(), in.port);
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(timeout_s));
  if (rank == 0) {
    Fd srv;
    srv.fd = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(srv.fd >= 0, "--dist-init %s: socket() failed: %s", where.c_str(), strerror(errno));
    int one = 1;
    setsockopt(srv.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);  // rank 0 is `host`: accept on every interface
    a.sin_port = htons((uint16_t)in.port);
    CHECK(bind(srv.fd, (sockaddr*)&a, sizeof(a)) == 0,
          "--dist-init %s: rank 0 cannot listen on port %d (%s); pick a free port", where.c_str(),
          in.port, strerror(errno));
    CHECK(listen(srv.fd, world) == 0, "--dist-init %s: listen() failed: %s", where.c_str(),
          strerror(errno));
    for (int served = 1; served < world; served++) {
      CHECK(wait_fd(srv.fd, POLLIN, deadline),
            "--dist-init %s: rank 0 waited %.0f s but only %d of %d ranks connected; start every "
            "rank with the same --dist-init and check that the port is reachable", where.c_str(),
            timeout_s, served, world);
      Fd c;
      c.fd = accept(srv.fd, nullptr, nullptr);
      if (c.fd < 0) { served--; continue; }
      send_all(c.fd, id, kDistIdBytes, "a rank");
    }
    return;
  }
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  std::string port = std::to_string(in.port);
  int gai = getaddrinfo(in.host.c_str(), port.c_str(), &hints, &res);
  CHECK(gai == 0 && res, "--dist-init %s: cannot resolve host '%s': %s", where.c_str(),
        in.host.c_str(), gai_strerror(gai));
  sockaddr_in addr;
  std::memcpy(&addr, res->ai_addr, sizeof(addr));
  freeaddrinfo(res);
  std::string last_err = "no attempt";
  for (;;) {
    Fd c;
    c.fd = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(c.fd >= 0, "--dist-init %s: socket() failed: %s", where.c_str(), strerror(errno));
    if (connect(c.fd, (sockaddr*)&addr, sizeof(addr)) == 0) {
      size_t got = 0;
      while (got < kDistIdBytes) {
        CHECK(wait_fd(c.fd, POLLIN, deadline), "--dist-init %s: rank %d connected but received "
              "no NCCL id within %.0f s", where.c_str(), rank, timeout_s);
        ssize_t r = recv(c.fd, id + got, kDistIdBytes - got, 0);
        if (r < 0 && errno == EINTR) continue;
        CHECK(r > 0, "--dist-init %s: rank 0 closed the connection after %zu of %zu bytes",
              where.c_str(), got, kDistIdBytes);
        got += (size_t)r;
      }
      return;
    }
    last_err = strerror(errno);
    CHECK(Clock::now() < deadline, "--dist-init %s: rank %d could not connect to rank 0 within "
          "%.0f s (%s); is rank 0 running and the port reachable?", where.c_str(), rank, timeout_s,
          last_err.c_str());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

void exchange_file(const DistInit& in, int rank, unsigned char* id, double timeout_s) {
  if (rank == 0) {
    std::string tmp = in.path + ".tmp";
    FILE* f = fopen(tmp.c_str(), "wb");
    CHECK(f, "--dist-init file://%s: rank 0 cannot write '%s': %s; the directory must exist and "
          "be writable", in.path.c_str(), tmp.c_str(), strerror(errno));
    bool ok = fwrite(id, 1, kDistIdBytes, f) == kDistIdBytes;
    ok = (fclose(f) == 0) && ok;
    CHECK(ok, "--dist-init file://%s: writing '%s' failed", in.path.c_str(), tmp.c_str());
    CHECK(rename(tmp.c_str(), in.path.c_str()) == 0, "--dist-init file://%s: cannot rename '%s': %s",
          in.path.c_str(), tmp.c_str(), strerror(errno));
    return;
  }
  auto t0 = Clock::now();
  for (;;) {
    FILE* f = fopen(in.path.c_str(), "rb");
    if (f) {
      size_t n = fread(id, 1, kDistIdBytes, f);
      fclose(f);
      CHECK(n == kDistIdBytes, "--dist-init file://%s holds %zu bytes, not the %zu of an NCCL id; "
            "delete it (a leftover of an earlier job?) and start again", in.path.c_str(), n,
            kDistIdBytes);
      return;
    }
    CHECK(since(t0) < timeout_s, "--dist-init file://%s: rank %d waited %.0f s for rank 0 to "
          "write this file; is rank 0 running, and is the path on a file system every rank sees?",
          in.path.c_str(), rank, timeout_s);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

DistConfig resolve_dist_config(int flag_rank, int flag_world, int flag_local_rank,
                               const std::string& flag_init, const EnvFn& getenv_fn) {
  EnvFn env = getenv_fn ? getenv_fn : EnvFn([](const char* k) { return std::getenv(k); });
  DistConfig d;
  int rank = -1, world = -1, local = -1;
  std::string source = "--world-size";
  for (const EnvSet& s : kEnvSets) {
    const char* w = env(s.world);
    const char* r = env(s.rank);
    // A rank without a world size means nothing here (e.g. RANK set for something else);
    // a world size without a rank is a half-configured launcher.
    if (!w) continue;
    CHECK(r, "the environment sets %s but not %s; set both (or use --rank and --world-size)",
          s.world, s.rank);
    source = s.world;
    world = parse_int(w, s.world);
    rank = parse_int(r, s.rank);
    const char* l = env(s.local);
    local = l ? parse_int(l, s.local) : -1;
    break;
  }
  if (flag_rank >= 0) rank = flag_rank;
  if (flag_world >= 0) {
    world = flag_world;
    source = "--world-size";
  }
  if (flag_local_rank >= 0) local = flag_local_rank;
  const char* init_env = env("FLASHGPT_DIST_INIT");
  d.init = !flag_init.empty() ? flag_init : (init_env ? init_env : "");
  d.world_size = world < 0 ? 1 : world;
  d.rank = rank < 0 ? 0 : rank;
  CHECK(d.world_size >= 1, "--world-size must be at least 1 (got %d)", d.world_size);
  CHECK(d.rank < d.world_size, "rank %d is outside the world of %d processes; ranks run 0..%d "
        "(--rank / RANK)", d.rank, d.world_size, d.world_size - 1);
  d.local_rank = local < 0 ? d.rank : local;
  if (d.world_size > 1) {
    CHECK(!d.init.empty(), "a world of %d processes (from %s) needs --dist-init "
          "file:///shared/path or tcp://host:port (scripts/launch.sh sets it); for one process "
          "pass --world-size 1", d.world_size, source.c_str());
    parse_dist_init(d.init);  // validates
  }
  return d;
}

DistInit parse_dist_init(const std::string& url) {
  DistInit in;
  if (url.rfind("file://", 0) == 0) {
    in.kind = DistInit::kFile;
    in.path = url.substr(7);
    CHECK(!in.path.empty() && in.path[0] == '/', "--dist-init '%s': a file URL needs an absolute "
          "path, as file:///shared/dir/flashgpt_id", url.c_str());
    CHECK(in.path.back() != '/', "--dist-init '%s' names a directory; name a file in it",
          url.c_str());
    return in;
  }
  if (url.rfind("tcp://", 0) == 0) {
    in.kind = DistInit::kTcp;
    std::string hp = url.substr(6);
    size_t colon = hp.rfind(':');
    CHECK(colon != std::string::npos && colon > 0, "--dist-init '%s': expected tcp://host:port",
          url.c_str());
    in.host = hp.substr(0, colon);
    std::string port = hp.substr(colon + 1);
    char* end = nullptr;
    long p = std::strtol(port.c_str(), &end, 10);
    CHECK(!port.empty() && *end == '\0' && p >= 1 && p <= 65535,
          "--dist-init '%s': port '%s' is not a number in 1..65535", url.c_str(), port.c_str());
    in.port = (int)p;
    return in;
  }
  THROW_ERROR("--dist-init '%s' is not understood; use file:///shared/path or tcp://host:port",
              url.c_str());
}

void exchange_dist_id(const DistInit& init, int rank, int world_size, unsigned char* id,
                      double timeout_s) {
  if (world_size <= 1) return;
  if (init.kind == DistInit::kFile) exchange_file(init, rank, id, timeout_s);
  else exchange_tcp(init, rank, world_size, id, timeout_s);
}

void write_failure_marker(const DistConfig& d, const std::string& message) {
  if (d.world_size <= 1 || d.init.rfind("file://", 0) != 0) return;
  std::string path = flashgpt::strformat("%s.failed.rank%d", d.init.substr(7).c_str(), d.rank);
  if (FILE* f = fopen(path.c_str(), "w")) {
    fputs(message.c_str(), f);
    fclose(f);
  }
}

std::string read_failure_marker(const DistConfig& d) {
  if (d.world_size <= 1 || d.init.rfind("file://", 0) != 0) return "";
  std::string base = d.init.substr(7);
  for (int r = 0; r < d.world_size; r++) {
    if (r == d.rank) continue;
    std::string path = flashgpt::strformat("%s.failed.rank%d", base.c_str(), r);
    struct stat st;
    if (stat(path.c_str(), &st) != 0) continue;
    // A marker from well before this process started is a leftover of an earlier job.
    if (st.st_mtime < kProcessStart - kStaleMarkerS) continue;
    FILE* f = fopen(path.c_str(), "r");
    if (!f) continue;
    char buf[1024] = {0};
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    return flashgpt::strformat("rank %d failed: %s", r, buf);
  }
  return "";
}

void check_resume_world(int64_t saved_world, int64_t saved_zero, int64_t saved_cp, int world,
                        int zero, int cp, const std::string& state_path) {
  CHECK(saved_world == world, "--resume: '%s' was written by a run of world size %lld but this run "
        "has world size %d; resume with %lld processes (scripts/launch.sh --gpus %lld)",
        state_path.c_str(), (long long)saved_world, world, (long long)saved_world,
        (long long)saved_world);
  CHECK(saved_zero == zero, "--resume: '%s' was written with --zero %lld but this run has --zero "
        "%d; resume with --zero %lld", state_path.c_str(), (long long)saved_zero, zero,
        (long long)saved_zero);
  // A changed cp would regroup the ranks (dp = world / cp) and so the data each one reads.
  CHECK(saved_cp == cp, "--resume: '%s' was written with --cp %lld but this run has --cp %d; "
        "resume with --cp %lld", state_path.c_str(), (long long)saved_cp, cp, (long long)saved_cp);
}

CpGrid cp_grid(int rank, int world, int cp) {
  CHECK(cp >= 1, "--cp must be at least 1 (got %d); 1 = no context parallelism", cp);
  CHECK(world % cp == 0, "--cp %d does not divide the world size %d (world = dp x cp); start a "
        "multiple of %d processes (scripts/launch.sh --gpus N) or lower --cp", cp, world, cp);
  CHECK(rank >= 0 && rank < world, "internal: rank %d outside a world of %d", rank, world);
  CpGrid g;
  g.cp = cp;
  g.dp = world / cp;
  g.cp_index = rank % cp;
  g.dp_index = rank / cp;
  return g;
}
