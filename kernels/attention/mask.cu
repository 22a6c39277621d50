// mask.cu — document_starts_gpu: the per-sequence prefix maximum of mask.cuh.
#include "kernels/attention/mask.cuh"

namespace {

constexpr int kScanThreads = 1024;
constexpr int kWarps = kScanThreads / 32;

// Exclusive max-scan of one value per thread over the block (values >= 0; the first thread's
// prefix is 0: a sequence's first document starts at row 0).
__device__ int block_exclusive_max_scan(int v) {
  __shared__ int warp_total[kWarps];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  int incl = v;  // inclusive scan inside the warp
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int up = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl = max(incl, up);
  }
  if (lane == 31) warp_total[warp] = incl;
  __syncthreads();
  if (warp == 0) {  // inclusive scan of the warp totals, kWarps == 32 of them
    int t = warp_total[lane];
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int up = __shfl_up_sync(0xffffffffu, t, o);
      if (lane >= o) t = max(t, up);
    }
    warp_total[lane] = t;
  }
  __syncthreads();
  const int before_warp = warp > 0 ? warp_total[warp - 1] : 0;
  const int before_lane = __shfl_up_sync(0xffffffffu, incl, 1);
  return max(before_warp, lane > 0 ? before_lane : 0);
}

__global__ void __launch_bounds__(kScanThreads)
    document_starts_kernel(int* doc_start, const int* tokens, int T, int eot) {
  static_assert(kWarps == 32, "the warp totals are scanned by one warp");
  const size_t base = (size_t)blockIdx.x * T;
  const int t0 = (int)((int64_t)threadIdx.x * T / kScanThreads);
  const int t1 = (int)((int64_t)(threadIdx.x + 1) * T / kScanThreads);
  int own = 0;  // the last EOT among this thread's rows
  for (int t = t0; t < t1; t++)
    if (tokens[base + t] == eot) own = t;
  int start = block_exclusive_max_scan(own);  // (its __syncthreads: every row read first)
  for (int t = t0; t < t1; t++) {
    if (tokens[base + t] == eot) start = t;
    doc_start[base + t] = start;
  }
}

}  // namespace

void document_starts_gpu(int* doc_start, const int* tokens, int B, int T, int eot,
                         cudaStream_t stream) {
  CHECK(B >= 1 && T >= 1, "document_starts_gpu: bad shape B=%d T=%d", B, T);
  document_starts_kernel<<<B, kScanThreads, 0, stream>>>(doc_start, tokens, T, eot);
  CUDA_CHECK_LAUNCH();
}
