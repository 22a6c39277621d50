// classifier.cuh — fused softmax + cross-entropy + dlogits on the GPU (CPU reference:
// classifier.h). Per row i, over the real vocabulary v < V:
//   lse = logsumexp(logits[i, :V]);  losses[i] = lse - logits[i, target[i]]          (fp32)
//   dlogits[i, v] = dloss * (exp(logits[i, v] - lse) - [v == target[i]]),  0 for V <= v < Vp
// Algorithm: one block of 1024 threads per row, two kernels.
//   Staged (the 128-bit path when a row fits shared memory: Vp * sizeof(floatX) bytes, GPT-2's
//   Vp = 50304 in bf16 is 98 KiB, two blocks per SM): the row is copied into shared memory with
//   all of each thread's 16-byte cp.async copies in flight at once; then the max, the sum of
//   exp(x - max) and the dlogits pass read it from there. HBM sees the row read once and
//   dlogits written once; no pass waits on L2 or HBM after the copies.
//   Streaming (larger rows, ragged Vp or misaligned pointers): pass 1 walks the row in 128-bit
//   chunks (8 bf16 per thread per step) keeping a per-thread online softmax (running max m,
//   running sum s rescaled by exp(m_old - m_new)); the block combines the (m, s) pairs in a
//   fixed order; pass 2 (training) re-reads the row, mostly from L2 (1024 threads per block
//   keep ~2 rows per SM in flight, ~26 MB at Vp = 50304 on an H100, inside its 50 MB L2), and
//   writes dlogits over it in place.
// Bytes: a d12 step's 32768 x 50304 logits are 3.3 GB, read once and written once: 6.6 GB, 2.0
// ms at the H100's 3.35 TB/s. Measured with the streaming kernel: 3.46 ms per step in a d12 step
// on an H100 (ncu, 4 chunks of 8192 rows, 1.9 TB/s); on an H200 (N = 32768, bench-kernels)
// losses only 1.33 ms (2.5 TB/s), losses + dlogits in place 2.77 ms (2.4 TB/s); two chunks per
// step with exp2f was slower (1.92 ms / 3.36 ms), so one chunk and expf stayed. The staged
// kernel exists to take the step's share toward the 2.0 ms: its pass over a row waits on HBM
// once, where the streaming one waits once per chunk of 8 elements per thread and again on L2.
// No probability tensor exists in either.
// dlogits may alias logits (in place) or be nullptr (losses only).
// Limits: targets must be in [0, V) (the model checks them on the host; these kernels cannot
// throw). 128-bit paths when Vp % 8 == 0 (bf16; % 4 fp32) and pointers aligned, else scalar.
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
