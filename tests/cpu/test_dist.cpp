// Multi-GPU plumbing that runs without a GPU: rank/world from flags and the environment
// (torchrun, mpirun, srun), --dist-init parsing, the NCCL-id exchange through a file and over
// TCP (threads on 127.0.0.1), the ZeRO-1 shard arithmetic, world-size checks on resume, and
// --total-batch divisibility at world > 1. (Per-rank data slicing: test_data.cpp.) Context
// parallelism's trainer side: the rank grid, the loader split over cp ranks, the --cp check on
// resume and the GPU-only refusal (the ring itself: test_context_parallel.cpp). The scripts,
// with a stand-in for flashgpt: launch.sh, and bench_cp.sh + plot_cp.py (the cp benchmark's table).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <thread>

#include "data/dataloader.h"
#include "model/context_parallel.h"
#include "model/checkpoint.h"
#include "model/layout.h"
#include "model/zero_shard.h"
#include "tests/cpu/test_helpers.h"
#include "train/dist.h"
#include "train/options.h"
#include "train/train.h"

namespace {

struct FakeEnv {
  std::map<std::string, std::string> vars;
  EnvFn fn() const {
    return [this](const char* k) -> const char* {
      auto it = vars.find(k);
      return it == vars.end() ? nullptr : it->second.c_str();
    };
  }
};

DistConfig resolve(const FakeEnv& e, int r = -1, int w = -1, int l = -1, std::string init = "") {
  return resolve_dist_config(r, w, l, init, e.fn());
}

// A TCP port that was free a moment ago (the OS picks it).
int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  EXPECT_EQ(bind(fd, (sockaddr*)&a, sizeof(a)), 0);
  socklen_t len = sizeof(a);
  getsockname(fd, (sockaddr*)&a, &len);
  close(fd);
  return ntohs(a.sin_port);
}

// Runs the exchange on `world` threads; returns each rank's id (rank 0's is the original).
std::vector<std::vector<unsigned char>> exchange_on_threads(const std::string& url, int world,
                                                            std::vector<std::string>& errors) {
  DistInit init = parse_dist_init(url);
  std::vector<std::vector<unsigned char>> ids(world, std::vector<unsigned char>(kDistIdBytes, 0));
  for (size_t i = 0; i < kDistIdBytes; i++) ids[0][i] = (unsigned char)(i * 7 + 3);
  errors.assign(world, "");
  std::vector<std::thread> th;
  // Ranks > 0 start first: they must wait (poll / retry) for rank 0.
  for (int r = world - 1; r >= 0; r--) {
    th.emplace_back([&, r] {
      try {
        if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
        exchange_dist_id(init, r, world, ids[r].data(), 10.0);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : th) t.join();
  return ids;
}

}  // namespace

TEST(Dist, NoEnvironmentIsOneProcess) {
  FakeEnv e;
  DistConfig d = resolve(e);
  EXPECT_EQ(d.rank, 0);
  EXPECT_EQ(d.world_size, 1);
  EXPECT_EQ(d.local_rank, 0);
  EXPECT_EQ(d.init, "");
}

TEST(Dist, EnvironmentOfTorchrunMpirunSlurm) {
  FakeEnv t;
  t.vars = {{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"FLASHGPT_DIST_INIT", "tcp://n0:29500"}};
  DistConfig d = resolve(t);
  EXPECT_EQ(d.rank, 3);
  EXPECT_EQ(d.world_size, 8);
  EXPECT_EQ(d.local_rank, 1);
  EXPECT_EQ(d.init, "tcp://n0:29500");
  FakeEnv m;
  m.vars = {{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "4"},
            {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}};
  d = resolve(m, -1, -1, -1, "file:///tmp/x");
  EXPECT_EQ(d.rank, 2);
  EXPECT_EQ(d.world_size, 4);
  EXPECT_EQ(d.local_rank, 0);
  FakeEnv s;
  s.vars = {{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "6"}, {"SLURM_LOCALID", "1"}};
  d = resolve(s, -1, -1, -1, "file:///tmp/x");
  EXPECT_EQ(d.rank, 5);
  EXPECT_EQ(d.world_size, 6);
  EXPECT_EQ(d.local_rank, 1);
  // no local rank given: the rank
  FakeEnv n;
  n.vars = {{"RANK", "1"}, {"WORLD_SIZE", "2"}};
  EXPECT_EQ(resolve(n, -1, -1, -1, "file:///tmp/x").local_rank, 1);
  // torchrun's variables win over srun's when both are set (torchrun under srun)
  FakeEnv both;
  both.vars = {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}};
  EXPECT_EQ(resolve(both, -1, -1, -1, "file:///tmp/x").world_size, 2);
}

TEST(Dist, FlagsWinOverTheEnvironment) {
  FakeEnv t;
  t.vars = {{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "3"}, {"FLASHGPT_DIST_INIT", "tcp://a:1"}};
  DistConfig d = resolve(t, 1, 2, 0, "file:///tmp/flag");
  EXPECT_EQ(d.rank, 1);
  EXPECT_EQ(d.world_size, 2);
  EXPECT_EQ(d.local_rank, 0);
  EXPECT_EQ(d.init, "file:///tmp/flag");
  d = resolve(t, 0, -1, -1, "");  // field by field
  EXPECT_EQ(d.rank, 0);
  EXPECT_EQ(d.world_size, 8);
  EXPECT_EQ(d.init, "tcp://a:1");
}

TEST(Dist, BadValuesAreClearErrors) {
  FakeEnv e;
  e.vars = {{"RANK", "abc"}, {"WORLD_SIZE", "2"}};
  expect_error([&] { resolve(e, -1, -1, -1, "file:///tmp/x"); }, "RANK='abc'");
  e.vars = {{"RANK", "0"}, {"WORLD_SIZE", "-2"}};
  expect_error([&] { resolve(e, -1, -1, -1, "file:///tmp/x"); }, "WORLD_SIZE='-2'");
  e.vars = {{"RANK", "2"}, {"WORLD_SIZE", "2"}};
  expect_error([&] { resolve(e, -1, -1, -1, "file:///tmp/x"); }, "rank 2 is outside the world of 2");
  e.vars = {{"WORLD_SIZE", "2"}};
  expect_error([&] { resolve(e, -1, -1, -1, "file:///tmp/x"); }, "sets WORLD_SIZE but not RANK");
  e.vars = {{"RANK", "0"}, {"WORLD_SIZE", "2"}};
  expect_error([&] { resolve(e); }, "a world of 2 processes (from WORLD_SIZE) needs --dist-init");
  EXPECT_EQ(resolve(e, -1, 1).world_size, 1);  // --world-size 1 overrides
  expect_error([&] { resolve(e, -1, -1, -1, "nfs:/x"); }, "--dist-init 'nfs:/x' is not understood");
  e.vars = {{"RANK", "3"}};  // a rank alone (set for something else) is ignored
  EXPECT_EQ(resolve(e).world_size, 1);
  EXPECT_EQ(resolve(e).rank, 0);
  expect_error([&] { resolve(FakeEnv(), 0, 0, -1, ""); }, "--world-size must be at least 1");
  // through the flags of `flashgpt train`
  TempDir d;
  TrainOptions o;
  Argv a({"train", "--bench", "--world-size", "2", "--rank", "-1"});
  expect_error([&] { parse_train_options(a.argc(), a.argv(), o); }, "--rank must be >= 0");
  Argv c({"train", "--bench", "--world-size", "2", "--rank", "1", "--dist-init",
          "file://" + d.path + "/id", "--device", "cpu"});
  expect_error([&] { parse_train_options(c.argc(), c.argv(), o); }, "--device cpu trains in one process");
  Argv ov({"train", "--bench", "--no-overlap", "--zero", "1"});
  ASSERT_TRUE(parse_train_options(ov.argc(), ov.argv(), o));
  EXPECT_FALSE(o.overlap_comm);
  EXPECT_EQ(o.zero, 1);
  Argv t({"train", "--bench", "--dist-timeout", "0"});
  expect_error([&] { parse_train_options(t.argc(), t.argv(), o); }, "--dist-timeout must be > 0");
  Argv z({"train", "--bench", "--zero", "2"});
  expect_error([&] { parse_train_options(z.argc(), z.argv(), o); }, "--zero 2 is not supported");
}

TEST(Dist, ParseDistInit) {
  DistInit f = parse_dist_init("file:///shared/job/id");
  EXPECT_EQ(f.kind, DistInit::kFile);
  EXPECT_EQ(f.path, "/shared/job/id");
  DistInit t = parse_dist_init("tcp://node-0.cluster:29500");
  EXPECT_EQ(t.kind, DistInit::kTcp);
  EXPECT_EQ(t.host, "node-0.cluster");
  EXPECT_EQ(t.port, 29500);
  expect_error([] { parse_dist_init("file://relative/path"); }, "absolute path");
  expect_error([] { parse_dist_init("file:///shared/dir/"); }, "names a directory");
  expect_error([] { parse_dist_init("tcp://host"); }, "expected tcp://host:port");
  expect_error([] { parse_dist_init("tcp://:80"); }, "expected tcp://host:port");
  expect_error([] { parse_dist_init("tcp://h:99999"); }, "port '99999' is not a number in 1..65535");
  expect_error([] { parse_dist_init("tcp://h:12ab"); }, "port '12ab'");
  expect_error([] { parse_dist_init("http://h:1"); }, "not understood");
  expect_error([] { parse_dist_init(""); }, "not understood");
}

TEST(Dist, FileExchangeBetweenThreads) {
  TempDir d;
  std::vector<std::string> errors;
  auto ids = exchange_on_threads("file://" + d.path + "/nccl_id", 4, errors);
  for (int r = 0; r < 4; r++) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    EXPECT_EQ(ids[r], ids[0]) << "rank " << r;
  }
  FILE* tmp = fopen((d.path + "/nccl_id.tmp").c_str(), "rb");
  EXPECT_EQ(tmp, nullptr) << "the .tmp file is renamed away";
  if (tmp) fclose(tmp);
  // A rank that waits for a file nobody writes gives up naming the path.
  unsigned char id[kDistIdBytes];
  DistInit never = parse_dist_init("file://" + d.path + "/never");
  std::string msg = expect_error([&] { exchange_dist_id(never, 1, 2, id, 0.2); }, d.path + "/never");
  EXPECT_NE(msg.find("rank 1 waited"), std::string::npos) << msg;
  // A short (corrupt or leftover) file is an error, not garbage.
  FILE* f = fopen((d.path + "/short").c_str(), "wb");
  fputs("xyz", f);
  fclose(f);
  expect_error([&] { exchange_dist_id(parse_dist_init("file://" + d.path + "/short"), 1, 2, id, 1); },
               "holds 3 bytes");
  // Rank 0 with an unwritable directory.
  expect_error([&] { exchange_dist_id(parse_dist_init("file:///nonexistent_dir_xyz/id"), 0, 2, id, 1); },
               "rank 0 cannot write");
}

TEST(Dist, TcpExchangeBetweenThreadsOnLoopback) {
  int port = free_port();
  std::vector<std::string> errors;
  auto ids = exchange_on_threads("tcp://127.0.0.1:" + std::to_string(port), 3, errors);
  for (int r = 0; r < 3; r++) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    EXPECT_EQ(ids[r], ids[0]) << "rank " << r;
  }
  // Nobody listening: a clear error after the timeout.
  unsigned char id[kDistIdBytes];
  DistInit nobody = parse_dist_init("tcp://127.0.0.1:" + std::to_string(free_port()));
  expect_error([&] { exchange_dist_id(nobody, 1, 2, id, 0.3); }, "could not connect to rank 0");
  // Rank 0 whose peers never come.
  DistInit lonely = parse_dist_init("tcp://127.0.0.1:" + std::to_string(free_port()));
  expect_error([&] { exchange_dist_id(lonely, 0, 3, id, 0.3); }, "only 1 of 3 ranks connected");
}

// scripts/launch.sh with a stand-in for flashgpt: the environment each rank gets, and a failed
// rank stopping the others with a non-zero exit that names it.
TEST(Dist, LaunchScript) {
  if (access("scripts/launch.sh", X_OK) != 0) GTEST_SKIP() << "run from the repository root";
  TempDir d;
  std::string fake = d / "fake.sh";
  {
    std::ofstream f(fake);
    f << "#!/bin/bash\n"
         "echo \"$RANK $WORLD_SIZE $LOCAL_RANK $NCCL_NVLS_ENABLE $FLASHGPT_DIST_INIT $*\" > " << d.path << "/out.$RANK\n"
         "if [ \"$RANK\" = \"$FAIL_RANK\" ]; then echo \"flashgpt: error: rank $RANK: boom\" >&2; exit 3; fi\n"
         "[ -n \"$FAIL_RANK\" ] && exec sleep 30\n"
         "exit 0\n";
  }
  chmod(fake.c_str(), 0755);
  std::string env = "FLASHGPT=" + fake + " ";
  int rc = std::system((env + "scripts/launch.sh --gpus 3 -- --data x --batch 2 > " + d.path + "/log 2>&1").c_str());
  EXPECT_EQ(WEXITSTATUS(rc), 0);
  for (int r = 0; r < 3; r++) {
    std::ifstream in(d / ("out." + std::to_string(r)));
    std::string rank, world, local, nvls, init, rest;
    in >> rank >> world >> local >> nvls >> init;
    std::getline(in, rest);
    EXPECT_EQ(rank, std::to_string(r));
    EXPECT_EQ(world, "3");
    EXPECT_EQ(local, std::to_string(r));
    EXPECT_EQ(nvls, "0");
    EXPECT_EQ(init.rfind("file:///", 0), 0u) << init;
    EXPECT_EQ(rest, " train --data x --batch 2");
  }
  auto t0 = std::chrono::steady_clock::now();
  rc = std::system(("FAIL_RANK=1 " + env + "scripts/launch.sh --gpus 3 -- --data x > " + d.path + "/log2 2>&1").c_str());
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(WEXITSTATUS(rc), 3);
  EXPECT_LT(s, 15.0) << "the other ranks (sleeping 30 s) were stopped";
  std::ifstream log(d / "log2");
  std::string all((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(all.find("launch.sh: rank 1 exited with code 3"), std::string::npos) << all;
  rc = std::system(("scripts/launch.sh --gpus 0 -- x > " + d.path + "/log3 2>&1").c_str());
  EXPECT_NE(WEXITSTATUS(rc), 0);
}

// scripts/bench_cp.sh + scripts/plot_cp.py with a stand-in for flashgpt that prints `train
// --bench`'s line (rank 0 only, as the trainer): the numbers parsed into runs.csv (MiB peaks
// converted), the recompute fallback and "does not fit" (a smaller T not fitting skips the
// larger ones on one GPU), T > CP1_MAX_T skipped, and the table's efficiency
// tok/s(cp 2) / (2 tok/s(1 GPU)); then --real-run points from train --log jsonl files.
TEST(Dist, BenchCpScriptTableAndEfficiency) {
  if (access("scripts/bench_cp.sh", X_OK) != 0) GTEST_SKIP() << "run from the repository root";
  TempDir d;
  const std::string fake = d / "fake.sh";
  {
    std::ofstream f(fake);
    f << "#!/bin/bash\n"
         "a=\"$*\"\n"
         "T=$(sed -nE 's/.*--seq-len ([0-9]+).*/\\1/p' <<<\"$a\")\n"
         "rec=$(sed -nE 's/.*--recompute ([a-z-]+).*/\\1/p' <<<\"$a\")\n"
         "cp=1; [[ \"$a\" == *'--cp 2'* ]] && cp=2\n"
         "echo \"$cp $T $rec\" >> " << d.path << "/calls\n"
         "oom() { echo 'flashgpt: error: the model needs 90.00 GiB of GPU memory; lower --seq-len' >&2; exit 1; }\n"
         "if [ $cp = 1 ]; then\n"
         "  [ $T = 262144 ] && [ $rec = layer-but-attn ] && oom\n"
         "  [ $T -ge 524288 ] && oom\n"
         "fi\n"
         "[ \"${RANK:-0}\" = 0 ] || exit 0\n"
         "case $cp.$T in\n"
         "  1.131072) ms=3276.8; tok=40000; peak='12.14 GiB'; comm='' ;;\n"
         "  2.131072) ms=1820.4; tok=72000; peak='6460.00 MiB'; comm=' | comm_wait_ms=64.8 per step (rank 0)' ;;\n"
         "  1.262144) ms=13107.2; tok=20000; peak='16.99 GiB'; comm='' ;;\n"
         "  2.262144) ms=7084.9; tok=37000; peak='15.69 GiB'; comm=' | comm_wait_ms=275.0 per step (rank 0)' ;;\n"
         "  *) ms=30000.0; tok=17476; peak='26.56 GiB'; comm=' | comm_wait_ms=500.0 per step (rank 0)' ;;\n"
         "esac\n"
         "echo \"bench: Fake GPU d12 attn=flash B=1 T=$T world=$cp cp=$cp dp=1 | median $ms ms/step | "
         "$tok tokens/s ($tok per GPU) | MFU 30.0% | peak memory $peak$comm\"\n";
  }
  chmod(fake.c_str(), 0755);
  auto read = [](const std::string& path) {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  const std::string out = d / "bench";
  // A generic OUT in the environment (another tool's folder) is not bench_cp.sh's.
  const std::string foreign = d / "foreign";
  int rc = std::system(("FLASHGPT=" + fake + " TS='131072 262144 524288 1048576' BENCH_CP_OUT=" +
                        out + " OUT=" + foreign + " scripts/bench_cp.sh > " + d.path +
                        "/log 2>&1").c_str());
  ASSERT_EQ(WEXITSTATUS(rc), 0) << read(d / "log");
  struct stat st;
  EXPECT_NE(stat(foreign.c_str(), &st), 0) << "bench_cp.sh wrote into the caller's OUT";
  // A BENCH_CP_OUT that holds someone else's files: refused before any run, nothing written.
  const std::string theirs = d / "theirs";
  mkdir(theirs.c_str(), 0755);
  { std::ofstream(theirs + "/runs.csv") << "their own table\n"; }
  rc = std::system(("FLASHGPT=" + fake + " TS=131072 BENCH_CP_OUT=" + theirs +
                    " scripts/bench_cp.sh > " + d.path + "/log_theirs 2>&1").c_str());
  EXPECT_NE(WEXITSTATUS(rc), 0);
  EXPECT_NE(read(d / "log_theirs").find("bench_cp.sh: BENCH_CP_OUT=" + theirs), std::string::npos)
      << read(d / "log_theirs");
  EXPECT_EQ(read(theirs + "/runs.csv"), "their own table\n");
  // Calls: cp 2 at every T; one GPU at 128K, 256K (layer-but-attn, then the fallback), 512K
  // (both modes fail), none at 1M (above CP1_MAX_T).
  EXPECT_EQ(read(d / "calls"),
            "2 131072 layer-but-attn\n2 131072 layer-but-attn\n1 131072 layer-but-attn\n"
            "2 262144 layer-but-attn\n2 262144 layer-but-attn\n1 262144 layer-but-attn\n1 262144 layer\n"
            "2 524288 layer-but-attn\n2 524288 layer-but-attn\n1 524288 layer-but-attn\n1 524288 layer\n"
            "2 1048576 layer-but-attn\n2 1048576 layer-but-attn\n");
  const std::string runs = read(out + "/runs.csv");
  EXPECT_NE(runs.find("131072,2,layer-but-attn,ok,1820.4,72000,6.309,64.8,Fake GPU,"), std::string::npos) << runs;
  EXPECT_NE(runs.find("131072,1,layer-but-attn,ok,3276.8,40000,12.140,,Fake GPU,"), std::string::npos) << runs;
  EXPECT_NE(runs.find("262144,1,layer-but-attn,does not fit,"), std::string::npos) << runs;
  EXPECT_NE(runs.find("262144,1,layer,ok,13107.2,20000,16.990,,Fake GPU,"), std::string::npos) << runs;
  EXPECT_NE(runs.find("524288,1,layer,does not fit,"), std::string::npos) << runs;
  EXPECT_NE(runs.find("1048576,1,,skipped (CP1_MAX_T)"), std::string::npos) << runs;
  const std::string table = read(out + "/table.md");
  EXPECT_NE(table.find("| 128K | 40000 | 72000 | 90.0% | 12.14 | 6.31 | 64.8 | layer-but-attn / layer-but-attn |"),
            std::string::npos) << table;
  EXPECT_NE(table.find("| 256K | 20000 | 37000 | 92.5% | 16.99 | 15.69 | 275.0 | layer / layer-but-attn |"),
            std::string::npos) << table;
  EXPECT_NE(table.find("| 512K | does not fit | 17476 | - |"), std::string::npos) << table;

  // Real runs at 1M: the median step of each log (3 steps for cp 2, 1 for one GPU).
  {
    std::ofstream f(d / "cp2.jsonl");
    for (double ms : {121506.1, 119123.2, 119972.7})
      f << "{\"step\": 1, \"loss\": 8.4, \"ms\": " << ms << ", \"peak_mem_bytes\": 53223620608}\n";
    std::ofstream g(d / "cp1.jsonl");
    g << "{\"step\": 1, \"loss\": 8.4, \"ms\": 223390.121, \"peak_mem_bytes\": 79997960192}\n";
  }
  rc = std::system(("python3 scripts/plot_cp.py " + out + "/runs.csv --real-run 1048576:2:" +
                    d.path + "/cp2.jsonl --real-run 1048576:1:" + d.path + "/cp1.jsonl --out " +
                    d.path + "/merged > " + d.path + "/log2 2>&1").c_str());
  ASSERT_EQ(WEXITSTATUS(rc), 0) << read(d / "log2");
  const std::string merged = read(d / "merged/table.md");
  // 1048576 / 119.9727 s = 8740 tok/s; / 223.390 s = 4694; 8740 / (2 x 4694) = 93.1%.
  EXPECT_NE(merged.find("| 1M | 4694 | 8740 | 93.1% | 74.50 | 49.57 | - | real run (1 steps) / real run (3 steps) |"),
            std::string::npos) << merged;
}

// scripts/log_folder.sh, which the scripts that keep their logs in a folder of their own call
// (bench_cp.sh, gpu_stress.sh, ...): it makes a new folder or takes an empty one, or one it made
// before (its marker), and refuses a folder someone else filled or a file, with one line that
// names the variable, writing nothing there.
TEST(Dist, LogFolderTakesOnlyAFolderOfItsOwn) {
  if (access("scripts/log_folder.sh", R_OK) != 0) GTEST_SKIP() << "run from the repository root";
  TempDir d;
  auto take = [&](const std::string& dir) {
    const int rc = std::system(("bash -c 'source scripts/log_folder.sh && log_folder demo.sh \"" +
                                dir + "\" DEMO_OUT' 2> " + d.path + "/err").c_str());
    return WEXITSTATUS(rc);
  };
  struct stat st;
  const std::string fresh = d / "a/b";
  EXPECT_EQ(take(fresh), 0);
  EXPECT_EQ(stat((fresh + "/.flashgpt-demo").c_str(), &st), 0) << "no marker in the folder it made";
  { std::ofstream(fresh + "/summary.txt") << "an earlier run's\n"; }
  EXPECT_EQ(take(fresh), 0) << "its own folder, from an earlier run: " << read_text(d / "err");
  mkdir((d / "empty").c_str(), 0755);
  EXPECT_EQ(take(d / "empty"), 0) << read_text(d / "err");

  const std::string foreign = d / "mine";
  mkdir(foreign.c_str(), 0755);
  { std::ofstream(foreign + "/summary.txt") << "the user's own notes\n"; }
  EXPECT_EQ(take(foreign), 1);
  const std::string err = read_text(d / "err");
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_NE(err.find("demo.sh: DEMO_OUT=" + foreign + " holds files that demo.sh did not make"),
            std::string::npos) << err;
  EXPECT_EQ(read_text(foreign + "/summary.txt"), "the user's own notes\n");
  EXPECT_NE(stat((foreign + "/.flashgpt-demo").c_str(), &st), 0) << "it marked a folder it refused";
  // Another script's folder is not this one's either.
  EXPECT_EQ(take(fresh), 0);
  const int rc = std::system(("bash -c 'source scripts/log_folder.sh && log_folder other.sh \"" +
                              fresh + "\" OTHER_OUT' 2> /dev/null").c_str());
  EXPECT_EQ(WEXITSTATUS(rc), 1);

  { std::ofstream(d / "afile") << "x\n"; }
  EXPECT_EQ(take(d / "afile"), 1);
  EXPECT_NE(read_text(d / "err").find("DEMO_OUT=" + d / "afile" + " is a file"), std::string::npos);
}

TEST(Dist, FailureMarkerNamesTheRank) {
  TempDir d;
  DistConfig r0{0, 2, 0, "file://" + d.path + "/id"}, r1{1, 2, 1, "file://" + d.path + "/id"};
  EXPECT_EQ(read_failure_marker(r0), "");
  write_failure_marker(r1, "token id 999 is outside the vocabulary");
  EXPECT_EQ(read_failure_marker(r0), "rank 1 failed: token id 999 is outside the vocabulary");
  EXPECT_EQ(read_failure_marker(r1), "");  // its own marker does not count
  // a leftover of an earlier job (an hour old) does not count either
  struct timeval old[2] = {{time(nullptr) - 3600, 0}, {time(nullptr) - 3600, 0}};
  utimes((d.path + "/id.failed.rank1").c_str(), old);
  EXPECT_EQ(read_failure_marker(r0), "");
}

TEST(Dist, ZeroShardArithmetic) {
  for (size_t total : {1ul, 63ul, 64ul, 1000ul, 124475904ul, 7777777ul}) {
    for (int world : {1, 2, 3, 4, 8}) {
      size_t covered = 0, prev_end = 0;
      for (int r = 0; r < world; r++) {
        ZeroShard s = zero_shard(total, world, r);
        ASSERT_EQ(s.padded_total % (world * kZeroAlign), 0u);
        ASSERT_GE(s.padded_total, total);
        ASSERT_LT(s.padded_total - total, world * kZeroAlign);
        ASSERT_EQ(s.shard_size * world, s.padded_total);
        ASSERT_EQ(s.begin, r * s.shard_size);
        ASSERT_EQ(s.begin % kZeroAlign, 0u);
        if (s.owned() > 0) {
          ASSERT_LE(s.end, total);
        }
        if (s.owned() > 0) {
          ASSERT_EQ(s.begin, prev_end) << "contiguous, no gaps";
          prev_end = s.end;
        }
        covered += s.owned();
      }
      ASSERT_EQ(covered, total) << "total " << total << " world " << world;
      ASSERT_EQ(prev_end, total);
    }
  }
  // Segments: cut at tensor boundaries; the per-element weight-decay flag of the segments
  // matches the flag of each element's tensor.
  GPTConfig c = gpt_preset("tiny", 300, 32);
  c.num_layers = 3;
  ParamLayout L(c);
  std::vector<char> decay(L.total);
  for (int i = 0; i < kNumParamTensors; i++)
    for (size_t k = 0; k < L.sizes[i]; k++) decay[L.offsets[i] + k] = ParamLayout::decayed(i);
  for (int world : {1, 2, 3, 4, 7}) {
    std::vector<int> seen(L.total, 0);
    for (int r = 0; r < world; r++) {
      ZeroShard s = zero_shard(L.total, world, r);
      auto segs = shard_segments(L.offsets.data(), L.sizes.data(), kNumParamTensors, s.begin, s.end);
      size_t sum = 0;
      for (const ShardSegment& g : segs) {
        ASSERT_GE(g.begin, L.offsets[g.tensor]);
        ASSERT_LE(g.begin + g.count, L.offsets[g.tensor] + L.sizes[g.tensor]);
        ASSERT_GE(g.begin, s.begin);
        ASSERT_LE(g.begin + g.count, s.end);
        for (size_t k = 0; k < g.count; k++) {
          seen[g.begin + k]++;
          ASSERT_EQ(decay[g.begin + k], ParamLayout::decayed(g.tensor));
        }
        sum += g.count;
      }
      ASSERT_EQ(sum, s.owned());
    }
    for (size_t i = 0; i < L.total; i++) ASSERT_EQ(seen[i], 1) << "element " << i << " world " << world;
  }
}

TEST(Dist, TotalBatchMustDivideAcrossRanks) {
  TempDir d;
  TrainOptions o;
  std::string init = "file://" + d.path + "/id";
  Argv ok({"train", "--bench", "--world-size", "2", "--rank", "1", "--dist-init", init,
           "--batch", "4", "--seq-len", "16", "--total-batch", "256"});
  ASSERT_TRUE(parse_train_options(ok.argc(), ok.argv(), o));
  EXPECT_EQ(o.dist.world_size, 2);
  EXPECT_EQ(o.dist.rank, 1);
  EXPECT_EQ(o.total_batch, 256);  // 2 micro-steps of 4 x 16 on each of 2 ranks
  Argv dflt({"train", "--bench", "--world-size", "2", "--rank", "0", "--dist-init", init,
             "--batch", "4", "--seq-len", "16"});
  ASSERT_TRUE(parse_train_options(dflt.argc(), dflt.argv(), o));
  EXPECT_EQ(o.total_batch, 128);  // default: one micro-step per rank
  Argv bad({"train", "--bench", "--world-size", "2", "--rank", "0", "--dist-init", init,
            "--batch", "4", "--seq-len", "16", "--total-batch", "192"});
  expect_error([&] { parse_train_options(bad.argc(), bad.argv(), o); },
               "--total-batch 192 is not a multiple of --batch x --seq-len x world size = 4 x 16 x 2 = 128");
}

TEST(Dist, ResumeAtAnotherWorldSizeIsAClearError) {
  check_resume_world(2, 1, 1, 2, 1, 1, "s.bin");  // same: fine
  expect_error([] { check_resume_world(2, 0, 1, 1, 0, 1, "/o/state_00000005.bin"); },
               "'/o/state_00000005.bin' was written by a run of world size 2 but this run has world size 1");
  expect_error([] { check_resume_world(4, 0, 1, 2, 0, 1, "s.bin"); }, "resume with 4 processes");
  expect_error([] { check_resume_world(2, 1, 1, 2, 0, 1, "s.bin"); }, "written with --zero 1");
  expect_error([] { check_resume_world(2, 0, 2, 2, 0, 1, "/o/state_00000005.bin"); },
               "--resume: '/o/state_00000005.bin' was written with --cp 2 but this run has --cp 1; "
               "resume with --cp 2");
  expect_error([] { check_resume_world(4, 0, 2, 4, 0, 4, "s.bin"); }, "resume with --cp 2");
  // a changed world size is named first, even when cp changed too
  expect_error([] { check_resume_world(2, 0, 2, 1, 0, 1, "s.bin"); }, "world size 2");
  EXPECT_EQ(state_checkpoint_path("/o", 100, 0), "/o/state_00000100.bin");
  EXPECT_EQ(state_checkpoint_path("/o", 100, 3), "/o/state_00000100_rank3.bin");

  // End to end on the CPU: a checkpoint from a (pretend) world-2 run refuses to resume here.
  TempDir out;
  TrainOptions o;
  Argv a({"train", "--data", test_corpus_dir(), "--model", "tiny", "--layers", "1", "--channels", "32",
          "--heads", "2", "--seq-len", "16", "--batch", "2", "--steps", "2", "--eval-every", "0",
          "--sample-every", "0", "--device", "cpu", "--quiet", "--out", out.path});
  ASSERT_TRUE(parse_train_options(a.argc(), a.argv(), o));
  run_train(o);
  std::string st = state_checkpoint_path(out.path, 2);
  TrainState h = load_state_header(st);
  EXPECT_EQ(h.world_size, 1);
  EXPECT_EQ(h.zero, 0);
  FILE* f = fopen(st.c_str(), "r+b");
  ASSERT_TRUE(f);
  int64_t two = 2;
  fseek(f, 11 * sizeof(int64_t), SEEK_SET);
  fwrite(&two, sizeof(two), 1, f);
  fclose(f);
  o.resume = true;
  o.steps = 4;
  expect_error([&] { run_train(o); }, "was written by a run of world size 2 but this run has world size 1");
}

// The launch convention: rank = dp_index * cp + cp_index (cp innermost), world = dp x cp.
TEST(Dist, CpRankGrid) {
  const CpGrid g = cp_grid(5, 8, 2);
  EXPECT_EQ(g.cp, 2);
  EXPECT_EQ(g.dp, 4);
  EXPECT_EQ(g.dp_index, 2);
  EXPECT_EQ(g.cp_index, 1);
  for (int world : {1, 2, 4, 6, 8, 12})
    for (int cp = 1; cp <= world; cp++) {
      if (world % cp) continue;
      std::map<std::pair<int, int>, int> seen;
      for (int rank = 0; rank < world; rank++) {
        const CpGrid r = cp_grid(rank, world, cp);
        ASSERT_EQ(r.dp * r.cp, world);
        ASSERT_EQ(r.dp_index * cp + r.cp_index, rank);
        ASSERT_LT(r.cp_index, cp);
        ASSERT_LT(r.dp_index, r.dp);
        // a cp group is cp consecutive ranks: rank's group starts at rank - cp_index
        ASSERT_EQ(cp_grid(rank - r.cp_index, world, cp).dp_index, r.dp_index);
        seen[{r.dp_index, r.cp_index}]++;
      }
      ASSERT_EQ((int)seen.size(), world) << "world " << world << " cp " << cp;
    }
  // cp 1 is plain data parallelism: dp index = rank
  EXPECT_EQ(cp_grid(3, 4, 1).dp_index, 3);
  EXPECT_EQ(cp_grid(3, 4, 1).cp_index, 0);
  expect_error([] { cp_grid(0, 2, 3); }, "--cp 3 does not divide the world size 2");
  expect_error([] { cp_grid(0, 6, 4); }, "--cp 4 does not divide the world size 6");
  expect_error([] { cp_grid(0, 2, 0); }, "--cp must be at least 1");
}

// The loader split of --cp: loaders built as the trainer builds them (rank = dp_index,
// world = dp) give the cp ranks of a dp group the same windows and different dp groups
// different ones; each cp rank's rows (cp_scatter, as the model keeps them) gathered back are
// the batch, and each row's input and target are its global position's in the window.
TEST(Dist, CpLoaderSplitGathersBackToTheBatch) {
  const std::string pattern = test_corpus_dir() + "/train_*.bin";
  for (int T : {16, 17, 30}) {
    const int world = 4, cp = 2, B = 3;
    const CpLayout L(cp, T);
    std::vector<std::vector<int>> in(world, std::vector<int>((size_t)B * T)), tg = in;
    for (int rank = 0; rank < world; rank++) {
      const CpGrid g = cp_grid(rank, world, cp);
      DataLoader loader(pattern, "--train-pattern", B, T, 0, true, 7, g.dp_index, g.dp);
      loader.next_batch(in[rank].data(), tg[rank].data());
      loader.next_batch(in[rank].data(), tg[rank].data());  // the second batch, too
    }
    EXPECT_EQ(in[0], in[1]) << "cp ranks of dp group 0 read the same windows";
    EXPECT_EQ(tg[2], tg[3]) << "cp ranks of dp group 1 read the same windows";
    EXPECT_NE(in[0], in[2]) << "the dp groups read different windows";
    for (int dp_index = 0; dp_index < 2; dp_index++) {
      std::vector<int> gin((size_t)B * T, -1), gtg((size_t)B * T, -1);
      for (int c = 0; c < cp; c++) {
        const int rank = dp_index * cp + c;
        const size_t Tl = L.local_len(c);
        std::vector<int> lin(B * Tl), ltg(B * Tl);
        cp_scatter<int>(lin.data(), in[rank].data(), L, c, B, 1);
        cp_scatter<int>(ltg.data(), tg[rank].data(), L, c, B, 1);
        cp_gather<int>(gin.data(), lin.data(), L, c, B, 1);
        cp_gather<int>(gtg.data(), ltg.data(), L, c, B, 1);
        for (int b = 0; b < B; b++) {  // the window of row b: inputs then the last target
          std::vector<int> window(in[rank].begin() + b * T, in[rank].begin() + (b + 1) * T);
          window.push_back(tg[rank][(size_t)b * T + T - 1]);
          for (size_t i = 0; i < Tl; i++) {
            const int p = L.global_pos(c, (int)i);
            ASSERT_EQ(lin[b * Tl + i], window[p]) << "T " << T << " row " << i;
            ASSERT_EQ(ltg[b * Tl + i], window[p + 1]) << "T " << T << " row " << i;
          }
        }
      }
      EXPECT_EQ(gin, in[dp_index * cp]) << "T " << T;
      EXPECT_EQ(gtg, tg[dp_index * cp]) << "T " << T;
    }
  }
}

// run_train refuses --cp > 1 without a GPU at once (the CPU test binary has none), naming the
// rank; and a checkpoint written at another --cp is refused on resume (the state header's cp).
TEST(Dist, CpNeedsAGpuAndResumeKeepsCp) {
  TempDir d;
  TrainOptions o;
  Argv a({"train", "--bench", "--world-size", "2", "--rank", "0", "--dist-init",
          "file://" + d.path + "/id", "--cp", "2", "--seq-len", "16", "--batch", "1"});
  ASSERT_TRUE(parse_train_options(a.argc(), a.argv(), o));
  const std::string msg = expect_error(
      [&] { run_train(o); },
      "rank 0: --cp 2 splits each sequence over 2 GPUs (CUDA only), but --device auto found no "
      "CUDA GPU");
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;

  TempDir out;
  Argv b({"train", "--data", test_corpus_dir(), "--model", "tiny", "--layers", "1", "--channels",
          "32", "--heads", "2", "--seq-len", "16", "--batch", "2", "--steps", "2", "--eval-every",
          "0", "--sample-every", "0", "--device", "cpu", "--quiet", "--out", out.path});
  TrainOptions c;
  ASSERT_TRUE(parse_train_options(b.argc(), b.argv(), c));
  run_train(c);
  const std::string st = state_checkpoint_path(out.path, 2);
  EXPECT_EQ(load_state_header(st).cp, 1);
  FILE* f = fopen(st.c_str(), "r+b");
  ASSERT_TRUE(f);
  const int64_t two = 2;  // as a --cp 2 run writes it (header slot 14)
  fseek(f, 14 * sizeof(int64_t), SEEK_SET);
  fwrite(&two, sizeof(two), 1, f);
  fclose(f);
  c.resume = true;
  c.steps = 4;
  expect_error([&] { run_train(c); }, "was written with --cp 2 but this run has --cp 1; resume "
               "with --cp 2");
}
