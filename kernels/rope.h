// rope — rotary position embedding (RoPE), GPT-NeoX / Hugging Face "rotate_half" form.
//   For a head vector x of size HS at position p and i in [0, HS/2):
//     theta_i = theta^(-2i/HS),  a = p * theta_i
//     (x[i], x[i+HS/2]) -> (x[i] cos a - x[i+HS/2] sin a,  x[i] sin a + x[i+HS/2] cos a)
//   Applied in place to the NH query heads and the NKV key heads of the packed qkv buffer
//   (B, T, NH + 2*NKV, HS) (per token: NH query heads, NKV key heads, NKV value heads; the value
//   heads are never touched). Token t of every batch row has position pos0 + t.
//   Backward: the transpose, i.e. the rotation by -a, in place on dq and dk inside dqkv (same
//   layout; dv untouched). A rotation is orthogonal, so backward(forward(x)) == x.
// CPU reference (the oracle): angles and rotation in double, rounded once to `real`;
// instantiated for float and double in rope.cpp. CUDA version: rope.cuh (reads the fp32 table
// made by rope_table_ref). Requires HS even (throws flashgpt::Error otherwise).
// Test: build/test_cpu --gtest_filter='RopeRef*'
#pragma once

// cos_sin (rows, HS/2, 2): cos and sin of p*theta_i for p = pos0..pos0+rows-1, computed in
// double, stored fp32. Row r, pair i: cos_sin[(r*HS/2 + i)*2 + 0] = cos, [... + 1] = sin.
void rope_table_ref(float* cos_sin,  // (rows, HS/2, 2) overwritten
                    int rows, int HS, float theta, int pos0 = 0);

template <typename real>
void rope_forward_ref(real* qkv,  // (B, T, NH + 2*NKV, HS) in place (q and k heads)
                      int B, int T, int NH, int NKV, int HS, int pos0, float theta);
template <typename real>
void rope_backward_ref(real* dqkv,  // (B, T, NH + 2*NKV, HS) in place (dq and dk heads)
                       int B, int T, int NH, int NKV, int HS, int pos0, float theta);
