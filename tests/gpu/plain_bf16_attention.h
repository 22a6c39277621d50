// plain_bf16_attention — causal attention on the CPU as a plain bf16 implementation computes it:
// the baseline of the self-calibrating rule (tests/test_common.h expect_calibrated) for every
// GPU attention kernel (test_attention.cu, test_flash.cu). It rounds to bf16 where a bf16
// framework would: S = scale Q K^T, P, O, dP, dS, dQ, dK, dV (fp32/double accumulation inside
// each product; dK/dV of a GQA group summed before their rounding). Inputs already rounded.
// Layout as kernels/attention/attention_ref.h.
#pragma once
#include <vector>

#include "kernels/attention/backends.h"

void plain_bf16_attention(std::vector<float>& out,         // (B, T, NH, HS)
                          std::vector<float>& dqkv,        // (B, T, NH + 2*NKV, HS)
                          const std::vector<float>& qkv,   // (B, T, NH + 2*NKV, HS)
                          const std::vector<float>& dout,  // (B, T, NH, HS)
                          const AttnShape& s);
