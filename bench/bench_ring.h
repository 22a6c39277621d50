// bench_ring — the context-parallel ring with N virtual ranks on one GPU, for
// `flashgpt bench-attention --cp N` (bench/bench_ring.cu says what it measures).
#pragma once
#include <string>

#include "kernels/attention/attention.cuh"

struct RingTimes {
  double fwd_ms = 0, bwd_ms = 0, fb_ms = 0;  // medians, all N ranks' work
  size_t extra_bytes = 0;                    // every rank's ring buffers, LSE and scratch
  std::string status;                        // "ok", "OOM", "error: ..."
};
// Shape s is the whole sequence (T = its length); the backend must have the ring hooks.
RingTimes time_ring_virtual(const AttentionBackend& be, const AttnShape& s, int N, int warmup,
                            int iters);
