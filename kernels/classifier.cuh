// classifier.cuh — fused softmax + cross-entropy + dlogits on the GPU (CPU reference:
// classifier.h). Per row i, over the real vocabulary v < V:
//   lse = logsumexp(logits[i, :V]);  losses[i] = lse - logits[i, target[i]]          (fp32)
//   dlogits[i, v] = dloss * (exp(logits[i, v] - lse) - [v == target[i]]),  0 for V <= v < Vp
// Algorithm: one block of 1024 threads per row. Pass 1 walks the row in 128-bit chunks
// (8 bf16 per thread per step) keeping a per-thread running max m and a sum s of exp(x - m),
// rescaled only when a chunk raises m; the block combines the (m, s) pairs in a fixed order.
// Every exponential is one FFMA and one MUFU.EX2 in log2 units (exp(x - m) = 2^(x log2e -
// m log2e), ex2.approx: relative error ~2^-22). Pass 2 (training) re-reads the row, mostly
// from L2, and writes dlogits over it in place.
// No probability tensor exists; the logits are read twice (the second time from L2 for most
// rows) and written once. 1024 threads per block keeps ~2 rows per SM in flight, ~26 MB of
// rows at Vp = 50304 on an H100: their second pass still hits the 50 MB L2.
// Measured (H100, N = 32768, Vp = 50304, bf16, `bench-kernels`): losses only 1.10 ms
// (3.0 TB/s), losses + dlogits in place 2.50 ms (2.6 TB/s counting the 6.6 GB read once and
// written once); one 8192-row chunk of the d12 step under ncu 638 us, DRAM 83% busy. With expf
// (~8 instructions an exponential) and the running sum rescaled every chunk it was issue-bound
// (issue slots 83% busy, DRAM 61%): 1.37 / 3.01 ms. 512 threads a block: 1.07 / 3.30 ms.
// dlogits may alias logits (in place) or be nullptr (losses only).
// Limits: targets must be in [0, V) (the model checks them on the host; this kernel cannot
// throw). 128-bit path when Vp % 8 == 0 (bf16; % 4 fp32) and pointers aligned, else scalar.
// Test: build/test_gpu --gtest_filter='Kernels.Classifier*'
// Bench: build/flashgpt bench-kernels --only kernels   (N = 32768, Vp = 50304)
#pragma once
#include "kernels/cuda_common.cuh"

void classifier(float* losses,          // (N) fp32
                floatX* dlogits,        // (N, Vp) or nullptr; may equal logits
                const floatX* logits,   // (N, Vp)
                const int* targets,     // (N) device, each < V
                float dloss, int N, int V, int Vp, cudaStream_t stream);

// out[0] = mean of losses[0..N) (fp32, one block, fixed order: deterministic).
void mean_loss(float* out, const float* losses, int N, cudaStream_t stream);
