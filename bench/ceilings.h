// ceilings — the GPU's measured ceilings for the roofline of `flashgpt profile`
// (DESIGN.md: "measure the ceilings once on the machine you use"). Host-visible declarations
// only (no CUDA headers): bench/ceilings.cu measures; CPU-only builds link the stub in
// bench/cuda_unavailable.cpp, which returns false.
//
//   copy bandwidth   one large device-to-device cudaMemcpyAsync (min(1 GiB, free/8) bytes),
//                    timed with CUDA events after a warm-up, median of 9; bytes counted read +
//                    write (2 x size / time), i.e. what a streaming kernel can move
//   bf16 matmul rate cublasGemmEx, bf16 A, B, C, fp32 compute (CUBLAS_COMPUTE_32F), 8192^3
//                    (4096^3 when memory is short), 2 warm-ups, median of 7; FLOPs = 2*M*N*K
#pragma once
#include <cstddef>
#include <string>

struct DeviceCeilings {
  std::string name;             // the GPU's name
  size_t total_bytes = 0;       // device memory (cudaMemGetInfo)
  size_t free_bytes = 0;        // free when measured (after the CUDA context was made)
  int sms = 0;                  // streaming multiprocessors
  double copy_bytes_per_s = 0;  // device-to-device copy, read + write
  double bf16_flops = 0;        // dense bf16 GEMM FLOP/s
  int gemm_n = 0;               // the GEMM's M = N = K
  size_t copy_bytes = 0;        // bytes of one copy
};

// Measures the current GPU's ceilings; false when there is no GPU (and in CPU-only builds).
// CUDA or cuBLAS errors throw flashgpt::Error.
bool measure_device_ceilings(DeviceCeilings& out);

// After an error in a CUDA call: clears the (non-sticky) last error and checks that the device
// still works (a synchronize). "" when it does, else the error; CPU-only builds return "".
std::string cuda_clear_error();
