// cuda_timer — GPU time measured with CUDA events, one implementation for the model's attention
// timing (ModelOptions.time_attention), the benchmarks (bench/) and the GPU tests.
//   CudaEventTimer  sums the device time of start()/stop() intervals recorded on a stream
//                   without waiting for them; take_ms() waits and returns the sum since the last
//                   take_ms().
//   median_ms       the median time of fn() over runs, after warm-up runs, each run between two
//                   events on `stream`; a budget shortens a long measurement (at least 3 runs);
//                   warmup_ms runs fn() untimed until that much GPU time has passed, so that the
//                   timed runs see the clocks of sustained load (bench-attention's --warmup-ms
//                   says why).
#pragma once
#include <algorithm>
#include <vector>

#include "kernels/cuda_common.cuh"

class CudaEventTimer {
 public:
  // pairs: intervals held before they are folded into the sum (which waits for them).
  explicit CudaEventTimer(int pairs = 64) : events_(2 * pairs) {
    for (cudaEvent_t& e : events_) CUDA_CHECK(cudaEventCreate(&e));
  }
  ~CudaEventTimer() {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }
  CudaEventTimer(const CudaEventTimer&) = delete;
  CudaEventTimer& operator=(const CudaEventTimer&) = delete;

  void start(cudaStream_t stream) {
    if (used_ + 2 > (int)events_.size()) fold();
    CUDA_CHECK(cudaEventRecord(events_[used_++], stream));
  }
  void stop(cudaStream_t stream) { CUDA_CHECK(cudaEventRecord(events_[used_++], stream)); }
  double take_ms() {
    fold();
    const double ms = ms_;
    ms_ = 0;
    return ms;
  }

 private:
  std::vector<cudaEvent_t> events_;
  int used_ = 0;
  double ms_ = 0;
  void fold() {  // adds the finished pairs' times (waits for them)
    for (int i = 0; i + 1 < used_; i += 2) {
      CUDA_CHECK(cudaEventSynchronize(events_[i + 1]));
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, events_[i], events_[i + 1]));
      ms_ += ms;
    }
    used_ = 0;
  }
};

// Median milliseconds of fn() on `stream` over `iters` runs after `warmup` runs. budget_ms > 0:
// when the first run shows that the runs would take longer, fewer of them (at least 3), and one
// warm-up only. warmup_ms > 0: then more untimed runs until the warm-ups add up to warmup_ms.
template <typename Fn>
double median_ms(Fn fn, int warmup, int iters, double budget_ms = 0, cudaStream_t stream = 0,
                 double warmup_ms = 0) {
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  auto once = [&]() {
    CUDA_CHECK(cudaEventRecord(a, stream));
    fn();
    CUDA_CHECK(cudaEventRecord(b, stream));
    CUDA_CHECK(cudaEventSynchronize(b));
    float t = 0;
    CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    return (double)t;
  };
  double warmed = 0;
  for (int i = 0; i < warmup; i++) {
    const double t = once();
    warmed += t;
    if (i == 0 && budget_ms > 0 && t * warmup > budget_ms) warmup = 1;  // one is enough
  }
  while (warmed < warmup_ms) {
    const double t = once();
    if (t <= 0) break;  // nothing measurable to warm up with
    warmed += t;
  }
  std::vector<double> ms;
  ms.push_back(once());
  int n = iters;
  if (budget_ms > 0 && ms[0] > 0 && ms[0] * iters > budget_ms)
    n = std::max(3, (int)(budget_ms / ms[0]));
  for (int i = 1; i < n; i++) ms.push_back(once());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}
