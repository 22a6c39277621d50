// backends — what each GPU attention backend is, said once, in host code (g++, no CUDA): its
// name, the shapes it runs, the device memory it needs (saved for the backward, scratch), its
// cost (FLOPs and minimum HBM bytes, forward and backward) and whether its dQ is bitwise
// reproducible. The memory plan, the options, `flashgpt profile` and --plan-only ask the spec
// (on machines without a GPU too); the GPU registry (attention.cu) wraps the same spec around
// each backend's kernels, so the GPU side repeats none of it.
//
// Adding a backend `foo` (the coming FA3 schedule, a context-parallel ring):
//   1. a line X(foo) in FLASHGPT_ATTENTION_BACKENDS below;
//   2. its spec `kSpec_foo` in backends.cpp: limits, saved/scratch bytes and cost, from the tile
//      sizes in a small CUDA-free header (foo_tiles.h) that foo.cu includes too;
//   3. kernels/attention/foo.cu defining `std::unique_ptr<AttentionBackend>
//      make_foo_attention()` (a subclass of AttentionBackend built on the spec: forward and
//      backward only).
// The GPU tests and benchmarks loop over the registry, so it is tested and timed the day it is
// added.
//
// Shape and layout (every backend): qkv (B, T, NH + 2*NKV, HS) read in place, out (B, T, NH, HS),
// causal or a mask (mask.h; spec.no_masks says which backends refuse masks), scale 1/sqrt(HS),
// query head h on kv head h / (NH/NKV). The maths: attention_ref.h.
//
// Cost model (attention_cost; the inputs of the roofline that `flashgpt profile` predicts
// attention time from, DESIGN.md's performance protocol). Notation: R = B*NH*T query rows,
// Rk = B*NKV*T key/value rows, es = sizeof(floatX) (2 for bf16), G = NH/NKV.
// FLOPs, two numbers per pass:
//   flops      the convention (DESIGN.md), the same for every backend:
//                forward = 4*B*NH*T^2*HS, halved when causal (attention_forward_flops);
//                backward = 2.5 x forward.
//   mma_flops  the matrix FLOPs the kernels actually execute, used by the roofline:
//                tile(T, Br, Bc) = Br*Bc * #{(i, j) : j*Bc <= min((i+1)*Br, T) - 1}, the area
//                of the Br x Bc tiles touching the causal triangle (causal_tile_area; diagonal
//                tiles computed whole, masked entries and padded rows of a ragged tile too).
// Minimum HBM bytes: what the schedule must move through device memory, each input read and
// each output written once, plus every intermediate the schedule keeps in device memory between
// passes (written and read each time). Re-reads of input tiles that the kernels leave to L2
// and flash's dQ reduce-adds (done in L2 by the copy engine) are not counted. Each spec's
// formulas are stated beside it in backends.cpp.
// Roofline (roofline_seconds): a pass takes at least max(mma_flops / peak FLOP/s, bytes /
// bandwidth), with the ceilings measured on the GPU (bench/ceilings.h: cuBLAS bf16 GEMM rate,
// device copy bandwidth).
//
// Test: build/test_cpu --gtest_filter='AttentionSpec*:Profile*'  (tests/cpu/test_backends.cpp)
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "kernels/attention/mask.h"  // MaskSpec

struct AttnShape {
  int B, T, NH, NKV, HS;  // NKV < NH: grouped-query attention; NH % NKV == 0
};

struct AttnPassCost {
  double flops = 0;      // the FLOPs convention (useful work)
  double mma_flops = 0;  // matrix FLOPs the kernels execute
  double bytes = 0;      // minimum HBM bytes
};
struct AttnCost {
  AttnPassCost fwd, bwd;
};

// Every backend, in registry order: --attn auto (the default) takes the first that supports the
// model (attention_auto). flash3 leads: on an H100 its forward is 1.3-2.0x flash's and its
// backward 1.0-1.2x from T = 4K to 1M, and a whole d12 step at T = 1M takes 164 s with it against
// 197 s with flash (the long-context results in bench/results/); naive is the
// fallback for head sizes the tensor-core kernels do not take.
#define FLASHGPT_ATTENTION_BACKENDS(X) X(flash3) X(flash) X(naive) X(flash1) X(scalar)

struct AttnBackendSpec {
  const char* name;
  const char* summary;  // one line: the algorithm and what it keeps for the backward
  // Tensor-core kernels: bf16 only, so absent from the FP32 build (PRECISION=FP32).
  bool bf16_only;
  // dQ bit-identical on every run (the forward, dK and dV always are). flash sums dQ with fp32
  // reduce-adds in L2 in the order blocks arrive: its last bits can vary between runs, and a
  // --resume then equals an uninterrupted run only to rounding.
  bool dq_bitwise;
  // A switch exists (--deterministic, AttnBackwardArgs::deterministic) that makes a non-bitwise
  // dQ bitwise, at some speed (flash 11-15%, flash3 6-22%: bench/results/determinism/).
  bool deterministic_mode;
  // The forward grid is one thread block per (b, h) (FA1's order): fewer sequences mean fewer
  // busy SMs, which no roofline sees (profile's step-time guess scales by it).
  bool grid_per_head;
  // Masks other than the causal one (mask.h: --mask document, --window): nullptr when the
  // backend runs them all, else one line saying why not and which backend does.
  const char* no_masks;
  // Limits beyond the shape checks every backend shares (attention_unsupported_reason).
  std::string (*limits)(const AttnShape& s, size_t es);
  size_t (*saved_bytes)(const AttnShape& s, size_t es);    // per layer, kept for the backward
  size_t (*scratch_bytes)(const AttnShape& s, size_t es);  // shared by forward and backward
  AttnCost (*cost)(const AttnShape& s, size_t es);         // one layer's call
};

// All specs, registry order. attention_spec(): unknown name throws flashgpt::Error naming
// --attn and listing the names.
const std::vector<AttnBackendSpec>& attention_specs();
const AttnBackendSpec& attention_spec(const std::string& name);
std::vector<std::string> attention_names();
std::string attention_names_list();  // "flash3, flash, naive, flash1, scalar"

// "" when backend `spec` runs shape s with floatX of es bytes (2: the bf16 build, 4: FP32)
// under `mask`; else one line saying why and what to do. Checks the dims (>= 1, NH % NKV == 0),
// the build (bf16_only), spec.limits and, for a mask that is not causal, spec.no_masks.
std::string attention_unsupported_reason(const AttnBackendSpec& spec, const AttnShape& s,
                                         size_t es, const MaskSpec& mask = {});

// --attn auto on the GPU: the name of the first backend in registry order that runs shape s
// with floatX of es bytes under `mask`. None: throws with each backend's reason.
std::string attention_auto(const AttnShape& s, size_t es, const MaskSpec& mask = {});

// Costs of one attention call (one layer) of backend `name` on shape s with floatX of es
// bytes. Unknown name: throws naming --attn.
AttnCost attention_cost(const std::string& name, const AttnShape& s, size_t es);
// Forward FLOPs by the convention: 4*B*NH*T^2*HS, halved when causal.
double attention_forward_flops(const AttnShape& s, bool causal);
// max(mma_flops / peak_flops, bytes / bytes_per_s) in seconds; 0 when a ceiling is unknown (<= 0).
double roofline_seconds(const AttnPassCost& c, double peak_flops, double bytes_per_s);
// Area (elements) of the Br x Bc tiles that touch the causal triangle of a T x T matrix. Row
// tiles start at 0 (a ragged last tile), or with end_aligned end at T (a ragged first tile:
// flash3's forward).
double causal_tile_area(int T, int Br, int Bc, bool end_aligned = false);
