// matmul.cuh — out = inp @ weight^T + bias (nn.Linear layout) on the GPU through cuBLASLt
// (CPU reference: matmul.h).
//   forward:       out = inp @ weight^T + bias                    bias epilogue
//   forward_gelu:  pre_gelu = inp @ weight^T + bias, out = gelu(pre_gelu)   GELU_AUX_BIAS epilogue
//                  (one pass: the matmul's epilogue stores both, no separate GELU kernel)
//   forward_residual: out = inp @ weight^T + bias + residual   (bias epilogue, beta = 1 with
//                  C = residual, D = out: the residual add costs no extra pass)
//   backward:      dinp = dout @ weight          (floatX, overwritten; skipped when nullptr)
//                  optionally times gelu'(pre_gelu): the DGELU epilogue fuses the GELU backward
//                  dweight += dout^T @ inp       (fp32 accumulate: cuBLASLt beta = 1, fp32 D)
//                  dbias += column sums of dout  (fp32, deterministic two-stage kernel below)
// All products: floatX operands, fp32 accumulation (CUBLAS_COMPUTE_32F; pure fp32, no TF32, in
// the FP32 build). Row-major (N, C) is column-major (C, N), so out^T = weight^T-op * inp^T
// gives cuBLASLt m = OC, n = N, k = C with A = weight (transposed), B = inp.
// cuBLASLt's heuristic is asked once per (shape, layout, epilogue, pointer alignment) and the
// chosen algorithm cached, so a training step makes no heuristic calls after the first. With
// tuning (matmul_init's `tune`, `train --tune-matmul`) the heuristic's first 8 candidates are
// timed on that first call and the fastest kept (matmul.cu fastest_candidate). d12 B 32 x T 1024,
// medians of 3 alternating rounds on each of two H100s: 571,884 -> 578,677 and 572,948 ->
// 579,761 tokens/s (+1.2% both; single runs +0.2% to +2.8%, as each process times afresh);
// lm-head forward 3975 -> 3410 us, backward 7202 -> 6790, fc forward (GELU_AUX_BIAS) 380 -> 285,
// fcproj backward 466 -> 438. Off by default: timings pick differently in another process, so a
// resumed run would not repeat its forward bit for bit. Its scratch: an accumulating product's
// candidates write a copy of D (at most the lm-head's dweight, C x Vp fp32: 154 MB at d12), which
// the model plans with its memory (matmul_init's tune_scratch); the heuristic's first choice
// stands where none fits.
// Fallbacks: when the bias or GELU epilogue has no algorithm for a shape/alignment (ragged
// test shapes), a plain matmul plus add_bias / gelu_forward kernels compute the same thing.
// dbias: blocks of 32 lanes x 8 warps; each lane owns 8 columns (one 128-bit load per row),
// warps stride over rows; the 8 warps combine in order into one partial row per block-row,
// then reduce_partials sums them in order. No float atomics.
// Measured (H200, bf16, N = 32768, C = 768; by what is now bench-kernels): fc forward with
// the GELU_AUX_BIAS epilogue 298 us vs 234 us (bias epilogue) + 123 us (gelu_forward);
// attproj / fcproj with the residual as C 82 / 217 us vs 70 / 207 us + 43 us (residual_forward);
// fcproj backward with DGELU 540 us vs 456 us + 159 us (gelu_backward). Products run at
// 470-750 TFLOP/s; the lm-head (C -> Vp) at 643 (forward) and 697 (backward).
// The workspace (matmul_workspace_bytes()) is allocated by the caller and handed over once
// with matmul_init(); the model plans it with the rest of device memory.
// Test: build/test_gpu --gtest_filter='Kernels.Matmul*'
// Bench: build/flashgpt bench-kernels --only kernels   (every product of a d12 step)
#pragma once
#include "kernels/cuda_common.cuh"
#include "kernels/matmul.h"

// matmul_workspace_bytes(): matmul.h.
// Before the first matmul, on the host thread that runs the matmuls: the cuBLASLt handle, its
// algorithm cache and the attached workspace are per thread (matmul.cu says why). Cheap to call
// again (the model does at each entry point, so that several models of one thread can share
// the thread's handle); nullptr detaches. tune: time cuBLASLt's candidates on each product's
// first call (its choice may differ between processes, so results are not bitwise
// reproducible across runs); false takes the heuristic's first, the same in every process.
// second_stream, second_workspace (bytes too): products queued on that stream use the second
// workspace, so that they may run beside those of another stream (the model's weight gradients).
// tune_scratch (matmul_tune_scratch_bytes, matmul.h): where tuning times an accumulating
// product; without one, tuning allocates it for the timing and frees it.
void matmul_init(void* workspace, size_t bytes, bool tune = false,
                 cudaStream_t second_stream = nullptr, void* second_workspace = nullptr,
                 void* tune_scratch = nullptr, size_t tune_scratch_bytes = 0);

void matmul_forward(floatX* out,           // (N, OC)
                    const floatX* inp,     // (N, C)
                    const floatX* weight,  // (OC, C)
                    const floatX* bias,    // (OC) or nullptr
                    int N, int C, int OC, cudaStream_t stream);
void matmul_forward_gelu(floatX* out,           // (N, OC) gelu(pre_gelu)
                         floatX* pre_gelu,      // (N, OC) inp @ weight^T + bias, for the backward
                         const floatX* inp,     // (N, C)
                         const floatX* weight,  // (OC, C)
                         const floatX* bias,    // (OC) or nullptr
                         int N, int C, int OC, cudaStream_t stream);

// out = inp @ weight^T + bias + residual (out may not alias residual's storage unless equal).
void matmul_forward_residual(floatX* out,             // (N, OC)
                             const floatX* inp,       // (N, C)
                             const floatX* weight,    // (OC, C)
                             const floatX* bias,      // (OC) or nullptr
                             const floatX* residual,  // (N, OC)
                             int N, int C, int OC, cudaStream_t stream);

// Scratch for the dbias reduction: matmul_backward_scratch_bytes(N, OC) (matmul.h).
// dout_scale multiplies dout in every product (the model folds the loss scale of the fused
// classifier, whose dlogits are written for scale 1, into the lm-head's backward).
// dinp_pre_gelu (N, C), when given: dinp = (dout @ weight) * gelu'(dinp_pre_gelu), i.e. the
// backward through a GELU that precedes this matmul (the model's fcproj), fused into the
// product's epilogue (falls back to gelu_backward in place).
void matmul_backward(floatX* dinp,          // (N, C)  overwritten, or nullptr
                     float* dweight,        // (OC, C) accumulates
                     float* dbias,          // (OC) accumulates, or nullptr
                     const floatX* dout,    // (N, OC)
                     const floatX* inp,     // (N, C)
                     const floatX* weight,  // (OC, C)
                     int N, int C, int OC,
                     float* scratch,        // matmul_backward_scratch_bytes(N, OC), if dbias
                     cudaStream_t stream, float dout_scale = 1.0f,
                     const floatX* dinp_pre_gelu = nullptr);
// The two halves of matmul_backward, for callers that queue them on different streams (the
// model's input gradients on the critical path, its weight gradients beside them).
void matmul_backward_dinp(floatX* dinp,          // (N, C)  overwritten
                          const floatX* dout,    // (N, OC)
                          const floatX* weight,  // (OC, C)
                          int N, int C, int OC, cudaStream_t stream, float dout_scale = 1.0f,
                          const floatX* dinp_pre_gelu = nullptr);
void matmul_backward_dweight(float* dweight,        // (OC, C) accumulates
                             float* dbias,          // (OC) accumulates, or nullptr
                             const floatX* dout,    // (N, OC)
                             const floatX* inp,     // (N, C)
                             int N, int C, int OC,
                             float* scratch,        // matmul_backward_scratch_bytes(N, OC), if dbias
                             cudaStream_t stream, float dout_scale = 1.0f);
