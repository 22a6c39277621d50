// cuda_unavailable.cpp — linked instead of bench/'s CUDA code (ceilings.cu, bench_attention.cu,
// bench_kernels.cu) into the CPU-only builds: the CPU test binary, and flashgpt when nvcc is
// not installed. `flashgpt profile --plan-only` needs none of it.
#include "bench/bench_attention.h"
#include "bench/bench_kernels.h"
#include "bench/ceilings.h"
#include "kernels/common.h"

// `flashgpt profile` measures nothing without a GPU.
bool measure_device_ceilings(DeviceCeilings&) { return false; }
std::string cuda_clear_error() { return ""; }

void run_bench_attention(const BenchAttentionOptions&) {
  THROW_ERROR("bench-attention needs the CUDA build; install the CUDA toolkit and rebuild with `make`");
}
void run_bench_kernels(const BenchKernelsOptions&) {
  THROW_ERROR("bench-kernels needs the CUDA build; install the CUDA toolkit and rebuild with `make`");
}
