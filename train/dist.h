// dist — the process group of multi-GPU training, in plain C++ (no CUDA or NCCL headers: the
// NCCL side is model/nccl_comm.cu behind the DistComm interface of model/dist_comm.h).
//
// One process per GPU. Rank, world size and local rank come from flags (--rank --world-size
// --local-rank), else from the environment in this order: torchrun (RANK, WORLD_SIZE,
// LOCAL_RANK), mpirun (OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK), srun (SLURM_PROCID,
// SLURM_NTASKS, SLURM_LOCALID) — the first set whose world-size variable is present; else a
// single process (world 1, no NCCL at all). Flags win over the environment, field by field
// (--world-size 1 runs one process inside an sbatch script that sets SLURM_NTASKS).
//
// The NCCL unique id (an opaque 128-byte blob made by rank 0) reaches the other ranks through
//   --dist-init file:///shared/path  rank 0 writes path.tmp and renames it to path; the others
//                                    poll for path until a timeout (the path must be on a file
//                                    system every node sees; delete it before the next job)
//   --dist-init tcp://host:port      rank 0 listens on port; the others connect to host:port
//                                    with retries until a timeout and read the 128 bytes
// A rank that fails writes path.failed.rank<R> (file:// only) with its message, so the others
// can name it when they give up waiting (markers older than a minute before this process
// started are ignored as leftovers).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

struct DistConfig {
  int rank = 0, world_size = 1, local_rank = 0;
  std::string init;  // --dist-init URL ("" for world 1)
};

// Flag values: -1 = not given. getenv_fn lets tests supply an environment (default: getenv).
// Throws flashgpt::Error naming the flag or variable for a bad value (non-integer, rank out
// of range, world size > 1 without an init URL).
using EnvFn = std::function<const char*(const char*)>;
DistConfig resolve_dist_config(int flag_rank, int flag_world, int flag_local_rank,
                               const std::string& flag_init, const EnvFn& getenv_fn = nullptr);

struct DistInit {
  enum Kind { kFile, kTcp } kind = kFile;
  std::string path;  // kFile
  std::string host;  // kTcp
  int port = 0;      // kTcp
};
DistInit parse_dist_init(const std::string& url);  // throws naming --dist-init

constexpr size_t kDistIdBytes = 128;
// Rank 0: sends id (kDistIdBytes) to the world_size - 1 others; other ranks: receive into id.
// timeout_s bounds the wait (file: the poll; tcp: connecting, accepting and reading).
void exchange_dist_id(const DistInit& init, int rank, int world_size, unsigned char* id,
                      double timeout_s);

// Failure markers next to a file:// init path (no-ops for tcp).
void write_failure_marker(const DistConfig& d, const std::string& message);
// "" when no rank has failed, else "rank R failed: message" of the first marker found.
std::string read_failure_marker(const DistConfig& d);

// --resume at a different world size, ZeRO stage or --cp than the checkpoint's: one clear
// error. Checked in that order (a world-size change says so first).
void check_resume_world(int64_t saved_world, int64_t saved_zero, int64_t saved_cp, int world,
                        int zero, int cp, const std::string& state_path);

// The rank grid of context parallelism (--cp; model/context_parallel.h). Launch
// convention: world = dp x cp and rank = dp_index * cp + cp_index, cp innermost, so a cp group
// is cp consecutive ranks (the GPUs of one node, on NVLink; launchers number a node's
// processes consecutively). The cp ranks of one dp group read the same windows: the data
// loader is built with (rank = dp_index, world = dp), and each cp rank keeps its zigzag chunks.
struct CpGrid {
  int cp = 1, dp = 1;              // world = dp * cp
  int cp_index = 0, dp_index = 0;  // rank = dp_index * cp + cp_index
};
// Throws naming --cp when cp < 1 or cp does not divide world.
CpGrid cp_grid(int rank, int world, int cp);
