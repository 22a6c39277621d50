// rope.cuh — rotary position embedding on the GPU (CPU reference and exact definition: rope.h).
//   forward:  for each q and k head of token (b, t), p = pos0 + t, i in [0, HS/2):
//             (x[i], x[i+HS/2]) -> (x[i] c - x[i+HS/2] s, x[i] s + x[i+HS/2] c),
//             (c, s) = cos_sin[p][i] (fp32 table, rope_table_ref, made in double on the host)
//   backward: the rotation by -angle on dq and dk (dv untouched). Both in place.
// Why a table: p * theta_i computed in fp32 at p ~ 131072 is off by ~0.01 rad; the table is exact
// to fp32 rounding of cos/sin at any position. The model uploads it once (rows >= max position).
// Algorithm: elementwise, memory-bound. Thread layout (token, head, group of W pairs), W = 8 in
// bf16 (x128::size): one 128-bit load/store of x[i..i+W) and one of x[i+HS/2..i+HS/2+W), the
// table's 2W floats as 128-bit loads; rotation in fp32, one rounding to floatX. Adjacent
// threads touch adjacent 16-byte chunks of one token's heads, and a token's table row is read
// by all of its NH+NKV heads (from L1/L2). Value heads are neither read nor written.
// Scalar path (one thread per pair) when HS/2 % W != 0 or a pointer is not 16-byte aligned.
// Limits: HS even (CHECK); cos_sin has rows >= pos0 + T (the caller's duty; not checkable here).
// Test: build/test_gpu --gtest_filter='Rope*'
// Bench: build/flashgpt bench-kernels --only rope   (131072 positions)
#pragma once
#include "kernels/cuda_common.cuh"

void rope_forward(floatX* qkv,            // (B, T, NH + 2*NKV, HS) in place (q and k heads)
                  const float* cos_sin,   // (rows, HS/2, 2) device table, rows >= pos0 + T
                  int B, int T, int NH, int NKV, int HS, int pos0, cudaStream_t stream);
void rope_backward(floatX* dqkv,          // (B, T, NH + 2*NKV, HS) in place (dq and dk heads)
                   const float* cos_sin,  // (rows, HS/2, 2) device table, rows >= pos0 + T
                   int B, int T, int NH, int NKV, int HS, int pos0, cudaStream_t stream);
