// mask.cuh — the document starts of a batch on the GPU: what the document mask
// (kernels/attention/mask.h) reads for every row, made once per batch from its input tokens.
//   doc_start[b][t] = max over u <= t of (tokens[b][u] == eot ? u : 0)
// an inclusive prefix maximum per sequence; document_starts() in mask.h is the CPU oracle.
// Algorithm: one block of 1024 threads per sequence; thread i owns the contiguous rows
// [i*T/1024, (i+1)*T/1024): (1) the maximum of its rows, (2) an exclusive max-scan of those
// maxima over the block (warp shuffles, then one warp over the warp totals), (3) its rows again,
// running max seeded with the scan. Two reads of the tokens and one write of doc_start: 12 bytes
// per row (B*T = 1M rows: 12 MB, a few microseconds; once per batch, before the first layer).
// Limits: B, T >= 1.
// Test: build/test_gpu --gtest_filter='DocumentStartsGpu*'
#pragma once
#include "kernels/attention/mask.h"
#include "kernels/cuda_common.cuh"

void document_starts_gpu(int* doc_start,     // (B, T) overwritten
                         const int* tokens,  // (B, T) input token ids
                         int B, int T, int eot, cudaStream_t stream);
