// Diagnostic driver: times flash3's backward at one shape and (in the traced build) dumps the
// blocks' timeline. trace_bwd B T NH HS iters [trace_path]
#include <cstdio>
#include <cstdlib>
#include <vector>
#include "kernels/attention/attention.cuh"
#include "kernels/attention/flash3.cuh"
#ifdef FLASHGPT_BWD_TRACE
namespace flash3 { void bwd_trace_dump(const char* path); }
#endif
static void fill(floatX* d, size_t n, unsigned seed) {
  std::vector<floatX> h(n);
  unsigned x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) { x = x * 1664525u + 1013904223u; h[i] = (floatX)(((x >> 8) & 0xffff) / 65536.f - 0.5f); }
  cudaMemcpy(d, h.data(), n * sizeof(floatX), cudaMemcpyHostToDevice);
}
int main(int argc, char** argv) {
  const int B = atoi(argv[1]), T = atoi(argv[2]), NH = atoi(argv[3]), HS = atoi(argv[4]), iters = atoi(argv[5]);
  auto be = make_flash3_attention();
  AttnShape s{B, T, NH, NH, HS};
  const size_t nqkv = (size_t)B * T * 3 * NH * HS, nout = (size_t)B * T * NH * HS;
  floatX *qkv, *out, *dout, *dqkv; void *saved, *scratch;
  cudaMalloc(&qkv, nqkv * 2); cudaMalloc(&dqkv, nqkv * 2); cudaMalloc(&out, nout * 2); cudaMalloc(&dout, nout * 2);
  cudaMalloc(&saved, be->saved_bytes(s)); cudaMalloc(&scratch, be->scratch_bytes(s));
  fill(qkv, nqkv, 1); fill(dout, nout, 2);
  AttnForwardArgs fa{out, saved, scratch, qkv, s, {}};
  be->forward(fa, 0);
  AttnBackwardArgs ba{dqkv, scratch, dout, qkv, out, saved, s};
  for (int i = 0; i < 3; ++i) be->backward(ba, 0);
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  cudaEventRecord(e0);
  for (int i = 0; i < iters; ++i) be->backward(ba, 0);
  cudaEventRecord(e1); cudaEventSynchronize(e1);
  float ms; cudaEventElapsedTime(&ms, e0, e1);
  const double flops = 2.5 * 2.0 * B * NH * (double)T * T * HS;  // causal convention
  printf("B %d T %d NH %d HS %d: backward %.1f us, %.1f TFLOP/s (%s)\n", B, T, NH, HS, 1e3 * ms / iters,
         flops / (1e-3 * ms / iters) / 1e12, cudaGetErrorString(cudaGetLastError()));
#ifdef FLASHGPT_BWD_TRACE
  if (argc > 6) { be->backward(ba, 0); cudaDeviceSynchronize(); flash3::bwd_trace_dump(argv[6]); }
#endif
  return 0;
}
