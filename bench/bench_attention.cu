// bench_attention.cu — `flashgpt bench-attention`: times the GPU attention backends (every name
// in the registry, kernels/attention/backends.h; default naive and flash).
//
// For each backend x head size x sequence length x causal: B = max(1, tokens / T) sequences of
// T tokens, NH heads (default 12 for HS 64, 16 for HS 128), NKV kv heads (default NH), random
// bf16 inputs in the packed qkv layout. Times forward, backward (on the saved state of one
// forward) and forward+backward with CUDA events: `warmup` runs, then the median of `iters`
// runs (fewer when one run is long: at most --budget-ms per measurement, at least 3 runs).
// Before each measurement the runs go on untimed until --warmup-ms (500) of GPU time has passed:
// under this load an H100 falls from its 1980 MHz boost to about 1600 MHz at its 700 W cap
// within ~100 ms (nvidia-smi sampled every 50 ms), so a median of 10 runs of a 5-50 ms kernel
// measured whatever ran before it
// (an idle gap or another sweep). The warm-up times every backend at the clocks of sustained
// load, which a training run sees; scripts/bench_attention.py warms PyTorch the same way.
// --idle-ms N --warmup-ms 0 times the other way, as published attention benchmarks do (a fresh
// process, a few calls, the median of 10): N ms of idle GPU before each measurement, so that
// every backend is timed in a burst at the clocks of a cool GPU.
// FLOPs (DESIGN.md): forward = 4 B NH T^2 HS, halved when causal; backward = 2.5 x forward.
// Extra memory = the backend's saved_bytes + scratch_bytes. A point that does not fit in free
// device memory is skipped with "OOM: needs X GiB" and the sweep goes on.
//
// Masks (--mask document --doc-len N, --window W; mask.h): synthetic documents, token t of
// sequence b an end-of-text (a document start) iff splitmix64(2^32 kDocSeed + b T + t) % N == 0:
// geometric lengths of mean N, the same on every run and in scripts/bench_attention.py, which
// builds FlexAttention's block mask from the same rule. FLOPs are counted over the visible
// (query, key) pairs: forward = 4 HS NH pairs (mask.h visible_pairs, summed over the batch),
// backward = 2.5 x; the start line gives the mean document length drawn and the share of the
// causal triangle that the mask leaves.
//
// The AttentionBackend interface is causal (attention.cuh has no non-causal mode), so
// --causal 0 rows are reported as skipped; scripts/bench_attention.py still times PyTorch there.
// --cp N: after each backend with ring hooks, a row "<name>/cpN" times the context-parallel ring
// with N virtual ranks on this GPU (bench/bench_ring.cu); its TFLOP/s count the whole
// sequence's FLOPs, so its ratio to the plain row is the ring's compute efficiency.
//
//   flashgpt bench-attention --backends naive,flash --hs 64,128 --seq-lens 512,1024,4096 \
//       --tokens 16384 --csv bench.csv
// Options: BenchAttentionOptions, parsed by bench/options.cpp.
#include "bench/bench_attention.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_ring.h"
#include "bench/bench_util.cuh"
#include "kernels/attention/attention.cuh"
#include "kernels/cuda_timer.cuh"
#include "model/output_files.h"

namespace {

double gib(size_t bytes) { return double(bytes) / double(1ull << 30); }

// --idle-ms: the GPU's work done, then nothing for ms, so that the next measurement starts at the
// clocks of an idle GPU (a burst) instead of those the one before left.
void idle(double ms) {
  if (ms <= 0) return;
  CUDA_CHECK(cudaDeviceSynchronize());
  std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
}

// The synthetic documents (the header's rule; scripts/bench_attention.py repeats it).
constexpr uint64_t kDocSeed = 1234;
uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
// doc_start (B, T) of the synthetic documents of mean length doc_len (mask.h document_starts).
std::vector<int> synthetic_document_starts(int B, int T, int doc_len) {
  constexpr int kEot = 1;  // any id: only the document starts matter
  std::vector<int> tokens((size_t)B * T);
  for (size_t i = 0; i < tokens.size(); i++)
    tokens[i] = splitmix64((kDocSeed << 32) + i) % (uint64_t)doc_len == 0 ? kEot : 0;
  return document_starts(tokens.data(), B, T, kEot);
}

}  // namespace

void run_bench_attention(const BenchAttentionOptions& opt) {
  std::vector<std::unique_ptr<AttentionBackend>> bes;
  for (const std::string& n : opt.backends) bes.push_back(make_attention(n));

  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  std::printf("bench-attention on %s (%d SMs), %s, tokens %d, warmup %d, iters %d (median)%s\n",
              prop.name, prop.multiProcessorCount, PRECISION_NAME, opt.tokens, opt.warmup, opt.iters,
              opt.deterministic ? ", --deterministic backward" : "");
  if (opt.mask.is_causal())
    std::printf("TFLOP/s: forward 4*B*NH*T^2*HS (/2 causal), backward 2.5x forward\n\n");
  else
    std::printf("mask: %s%s; TFLOP/s: forward 4*HS*NH*(visible pairs), backward 2.5x forward\n\n",
                describe_mask(opt.mask).c_str(),
                opt.doc_len ? flashgpt::strformat(", documents of mean %d tokens", opt.doc_len).c_str()
                            : "");
  std::printf("%-8s %4s %4s %4s %4s %7s %3s | %9s %7s | %9s %7s | %9s %7s | %9s  %s\n",
              "backend", "HS", "NH", "NKV", "B", "T", "cau", "fwd ms", "TF/s", "bwd ms", "TF/s",
              "f+b ms", "TF/s", "extra MiB", "status");
  FILE* csv = nullptr;
  if (!opt.csv_path.empty()) {
    check_output_path(opt.csv_path, "--csv", OutputKind::BenchAttentionCsv);
    csv = std::fopen(opt.csv_path.c_str(), "w");
    CHECK(csv, "--csv %s: cannot open for writing", opt.csv_path.c_str());
    std::fprintf(csv, "# gpu: %s\n%s\n", prop.name, kBenchAttentionCsvHeader);
  }
  cudaStream_t st = 0;  // the legacy default stream, as the events are recorded on it

  for (size_t bi = 0; bi < bes.size(); bi++) {
    const AttentionBackend& be = *bes[bi];
    for (int HS : opt.head_sizes)
      for (int T : opt.seq_lens)
        for (int causal : opt.causal) {
          const int NH = opt.heads > 0 ? opt.heads : HS == 64 ? 12 : HS == 128 ? 16 : std::max(1, 768 / HS);
          const int NKV = opt.kv_heads > 0 ? opt.kv_heads : NH;
          const int B = std::max(1, opt.tokens / T);
          const AttnShape s{B, T, NH, NKV, HS};
          std::string status = "ok";
          size_t extra = 0;
          float f_ms = 0, b_ms = 0, fb_ms = 0;
          // The mask's doc_start on the host (its visible pairs) and on the device.
          const std::vector<int> doc_start =
              opt.doc_len ? synthetic_document_starts(B, T, opt.doc_len) : std::vector<int>();
          const AttnMask host_mask{doc_start.empty() ? nullptr : doc_start.data(), opt.mask.window};
          const double pairs = double(visible_pairs(host_mask, B, T)) / B;  // per sequence and head
          const std::string why = causal ? be.unsupported_reason(s, opt.mask) : "";
          if (!causal) {
            status = "skipped: the attention interface is causal only";
          } else if (!why.empty()) {
            status = "unsupported: " + why;
          } else {
            extra = be.saved_bytes(s) + be.scratch_bytes(s);
            const size_t n_qkv = size_t(B) * T * (NH + 2 * NKV) * HS, n_out = size_t(B) * T * NH * HS;
            const size_t need = extra + (2 * n_qkv + 2 * n_out) * sizeof(floatX);
            size_t free_b = 0, total_b = 0;
            CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
            const size_t margin = size_t(256) << 20;  // cuBLAS workspace, fragmentation
            DeviceAllocs buf;
            floatX *qkv = nullptr, *dqkv = nullptr, *out = nullptr, *dout = nullptr;
            char *saved = nullptr, *scratch = nullptr;
            int* d_doc_start = nullptr;
            if (need + margin > free_b || !(qkv = buf.try_alloc<floatX>(n_qkv)) ||
                !(dqkv = buf.try_alloc<floatX>(n_qkv)) || !(out = buf.try_alloc<floatX>(n_out)) ||
                !(dout = buf.try_alloc<floatX>(n_out)) ||
                !(saved = buf.try_alloc(be.saved_bytes(s))) ||
                !(scratch = buf.try_alloc(be.scratch_bytes(s))) ||
                (!doc_start.empty() && !(d_doc_start = buf.try_alloc<int>(doc_start.size())))) {
              status = flashgpt::strformat("OOM: needs %.2f GiB (%.2f GiB free)", gib(need),
                                           gib(free_b));
            } else {
              fill_uniform(qkv, n_qkv, 1234u + T, -1.5f, 1.5f);
              fill_uniform(dout, n_out, 5678u + T, -1.5f, 1.5f);
              if (d_doc_start)
                CUDA_CHECK(cudaMemcpy(d_doc_start, doc_start.data(), doc_start.size() * sizeof(int),
                                      cudaMemcpyHostToDevice));
              const AttnMask mask{d_doc_start, opt.mask.window};
              const AttnForwardArgs fa{out, saved, scratch, qkv, s, mask};
              const AttnBackwardArgs ba{dqkv, scratch, dout, qkv, out, saved, s, opt.deterministic,
                                        mask};
              try {
                idle(opt.idle_ms);
                f_ms = median_ms([&] { be.forward(fa, st); }, opt.warmup, opt.iters,
                                 opt.budget_ms, st, opt.warmup_ms);
                be.forward(fa, st);
                idle(opt.idle_ms);
                b_ms = median_ms([&] { be.backward(ba, st); }, opt.warmup, opt.iters,
                                 opt.budget_ms, st, opt.warmup_ms);
                idle(opt.idle_ms);
                fb_ms = median_ms([&] { be.forward(fa, st); be.backward(ba, st); }, opt.warmup,
                                  opt.iters, opt.budget_ms, st, opt.warmup_ms);
                CUDA_CHECK(cudaDeviceSynchronize());
              } catch (const flashgpt::Error& e) {
                status = std::string("error: ") + e.what();
                f_ms = b_ms = fb_ms = 0;
                cudaGetLastError();
              }
            }
          }
          const double fwd_flops = opt.mask.is_causal()
                                       ? attention_forward_flops(s, causal)
                                       : 4.0 * B * NH * HS * pairs;
          if (!opt.mask.is_causal() && status == "ok")
            status = flashgpt::strformat("ok: the mask leaves %.1f%% of the causal triangle",
                                         100.0 * pairs / (0.5 * double(T) * (T + 1)));
          auto tf = [](double flops, float ms) { return ms > 0 ? flops / (ms * 1e-3) / 1e12 : 0.0; };
          const double tf_f = tf(fwd_flops, f_ms), tf_b = tf(2.5 * fwd_flops, b_ms),
                       tf_fb = tf(3.5 * fwd_flops, fb_ms);
          std::printf("%-8s %4d %4d %4d %4d %7d %3d | %9.3f %7.1f | %9.3f %7.1f | %9.3f %7.1f | %9.1f  %s\n",
                      be.name(), HS, NH, NKV, B, T, causal, f_ms, tf_f, b_ms, tf_b, fb_ms, tf_fb,
                      double(extra) / (1 << 20), status.c_str());
          std::fflush(stdout);
          if (csv) {
            std::string st_csv = status;
            std::replace(st_csv.begin(), st_csv.end(), ',', ';');
            std::fprintf(csv, "%s,%d,%d,%d,%d,%d,%d,%.4f,%.4f,%.4f,%.2f,%.2f,%.2f,%zu,%s\n",
                         be.name(), HS, NH, NKV, B, T, causal, f_ms, b_ms, fb_ms, tf_f, tf_b,
                         tf_fb, extra, st_csv.c_str());
            std::fflush(csv);
          }
          if (opt.cp > 1 && causal && why.empty() && be.supports_ring()) {
            const RingTimes rt = T >= 2 * opt.cp
                                     ? time_ring_virtual(be, s, opt.cp, opt.warmup,
                                                         std::min(opt.iters, 10))
                                     : RingTimes{0, 0, 0, 0, "skipped: T < 2 cp"};
            const std::string name = std::string(be.name()) + "/cp" + std::to_string(opt.cp);
            const double rf = tf(fwd_flops, rt.fwd_ms), rb = tf(2.5 * fwd_flops, rt.bwd_ms),
                         rfb = tf(3.5 * fwd_flops, rt.fb_ms);
            const std::string rstatus =
                rt.status == "ok" && fb_ms > 0
                    ? flashgpt::strformat("ok: %d virtual ranks on one GPU, plain/ring f+b %.3f",
                                          opt.cp, fb_ms / rt.fb_ms)
                    : rt.status;
            std::printf("%-8s %4d %4d %4d %4d %7d %3d | %9.3f %7.1f | %9.3f %7.1f | %9.3f %7.1f | %9.1f  %s\n",
                        name.c_str(), HS, NH, NKV, B, T, causal, rt.fwd_ms, rf, rt.bwd_ms, rb,
                        rt.fb_ms, rfb, double(rt.extra_bytes) / (1 << 20), rstatus.c_str());
            std::fflush(stdout);
            if (csv) {
              std::string st_csv = rstatus;
              std::replace(st_csv.begin(), st_csv.end(), ',', ';');
              std::fprintf(csv, "%s,%d,%d,%d,%d,%d,%d,%.4f,%.4f,%.4f,%.2f,%.2f,%.2f,%zu,%s\n",
                           name.c_str(), HS, NH, NKV, B, T, causal, rt.fwd_ms, rt.bwd_ms,
                           rt.fb_ms, rf, rb, rfb, rt.extra_bytes, st_csv.c_str());
              std::fflush(csv);
            }
          }
        }
  }
  if (csv) std::fclose(csv);
}
