// sm90/pipeline.cuh — the stage/phase protocol of a ring of shared-memory stages between a
// producer (TMA loads, or a loader warp) and consumers, each stage guarded by two mbarriers
// (sm90/sync.cuh): `full` (the producer's arrival and the copy engine's bytes are in) and
// `empty` (the consumers are done reading). Test: ./build/test_gpu
// --gtest_filter='Hopper.Pipeline*'  (tests/gpu/test_sm90.cu).
//
// The n-th use of a ring of S stages (n = 0, 1, ...) is stage n % S in phase (n / S) & 1: a
// barrier completes one phase per round of the ring, and a wait names the parity of the phase it
// waits for. So, for each use n (PipelineState n):
//   producer: wait(empty[s], phase ^ 1)   the consumers released the stage's previous round
//                                         (a fresh barrier passes parity 1 at once: round 0)
//             arrive_expect_tx(full[s], bytes); TMA -> stage s, completing on full[s]
//   consumer: wait(full[s], phase); read stage s; arrive(empty[s])
// Each side keeps its own PipelineState and advances it once per use, in the same order.
#pragma once
#include <stdint.h>

#include "kernels/attention/sm90/sync.cuh"

namespace sm90 {

// One use of a ring, fixed: its stage index and phase parity (what a consumer still has to
// release after its PipelineState moved on).
struct StageSlot {
  uint32_t stage, parity;
  __device__ __forceinline__ uint32_t index() const { return stage; }
  __device__ __forceinline__ uint32_t phase() const { return parity; }
};

// Where the n-th use of a ring of STAGES stages falls: the stage index and the phase parity of
// the use count (STAGES is a power of two in every kernel here, so they are a mask and a shift).
template <int STAGES>
struct PipelineState {
  static_assert(STAGES >= 1, "a ring has at least one stage");
  uint32_t count;  // uses so far
  __device__ __forceinline__ explicit PipelineState(uint32_t n = 0) : count(n) {}
  __device__ __forceinline__ uint32_t index() const { return count % STAGES; }
  __device__ __forceinline__ uint32_t phase() const { return (count / STAGES) & 1; }
  __device__ __forceinline__ StageSlot slot() const { return {index(), phase()}; }
  __device__ __forceinline__ void advance() { ++count; }
};

// The full and empty mbarriers of a ring of STAGES stages: full[s] at `full` + 8 s, empty[s] at
// `empty` + 8 s (shared-memory addresses). The protocol's steps take a PipelineState or a
// StageSlot (anything with index() and phase()).
template <int STAGES>
struct StageBarriers {
  uint32_t full, empty;
  __device__ __forceinline__ uint32_t full_bar(uint32_t stage) const { return full + 8 * stage; }
  __device__ __forceinline__ uint32_t empty_bar(uint32_t stage) const { return empty + 8 * stage; }
  // One thread, before any use: full[s] completes on full_arrivals arrivals (plus the bytes they
  // expect), empty[s] on empty_arrivals. Then mbar_init_fence() and a __syncthreads().
  __device__ __forceinline__ void init_stage(uint32_t stage, uint32_t full_arrivals,
                                             uint32_t empty_arrivals) const {
    mbar_init(full_bar(stage), full_arrivals);
    mbar_init(empty_bar(stage), empty_arrivals);
  }
  // Producer: wait until the consumers have released this stage's previous round.
  template <class Use>
  __device__ __forceinline__ void producer_acquire(const Use& s) const {
    const uint32_t parity = s.phase() ^ 1;
    mbar_wait(empty_bar(s.index()), parity);
  }
  // Producer: arrive on full[s] expecting `bytes` from the copy engine (the TMA loads that
  // complete on full_bar(s.index()) bring them).
  template <class Use>
  __device__ __forceinline__ void producer_expect(const Use& s, uint32_t bytes) const {
    mbar_arrive_expect_tx(full_bar(s.index()), bytes);
  }
  // Producer: arrive on full[s] without bytes (a stage written by threads).
  template <class Use>
  __device__ __forceinline__ void producer_commit(const Use& s) const {
    mbar_arrive(full_bar(s.index()));
  }
  // Consumer: wait until stage s is full.
  template <class Use>
  __device__ __forceinline__ void consumer_wait(const Use& s) const {
    const uint32_t parity = s.phase();
    mbar_wait(full_bar(s.index()), parity);
  }
  // Consumer: this thread's arrival on empty[s] (the stage is free once all have arrived).
  template <class Use>
  __device__ __forceinline__ void consumer_release(const Use& s) const {
    mbar_arrive(empty_bar(s.index()));
  }
};

}  // namespace sm90
