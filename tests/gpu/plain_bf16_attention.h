// plain_bf16_attention — masked attention on the CPU as a plain bf16 implementation computes it:
// the baseline of the self-calibrating rule (tests/test_common.h expect_calibrated) for every
// GPU attention kernel (test_attention.cu, test_flash.cu). It rounds to bf16 where a bf16
// framework would: S = scale Q K^T, P, O, dP, dS, dQ, dK, dV (fp32/double accumulation inside
// each product; dK/dV of a GQA group summed before their rounding). Inputs already rounded.
// Layout as kernels/attention/attention_ref.h; causal, or the mask given (mask.h: query t sees
// keys lo(t)..t; a host doc_start).
// It also returns the rule's floor for each result (RoundingFloor, tests/test_common.h): the
// largest change one bf16 rounding of one intermediate makes to it. With u = 2^-8 and, for every
// query row t, visible key u (lo(t) <= u <= t) and head h (g its kv head):
//   out row t:  rounding P_tu moves it by u P_tu V_u            (max over t, u of u P_tu |V_u|)
//   dV row u:   rounding P_tu moves it by u P_tu dO_t
//   dQ row t:   rounding P_tu, dP_tu, D_t or dS_tu moves dS_tu = P_tu (dP_tu - D_t) by at most
//               u sigma_tu, sigma_tu = P_tu (|dP_tu| + |D_t|), and dQ_t by u scale sigma_tu K_u
//   dK row u:   likewise u scale sigma_tu Q_t
// in L2 (|.| the row's L2 norm) and in max norm (|.| the row's largest element), or, where
// larger, u times the tensor's largest element (the rounding of that output itself).
#pragma once
#include <vector>

#include "kernels/attention/backends.h"
#include "kernels/attention/mask.h"
#include "tests/test_common.h"

struct AttentionFloors {
  RoundingFloor out, dq, dk, dv;
};

AttentionFloors plain_bf16_attention(std::vector<float>& out,         // (B, T, NH, HS)
                                     std::vector<float>& dqkv,        // (B, T, NH + 2*NKV, HS)
                                     const std::vector<float>& qkv,   // (B, T, NH + 2*NKV, HS)
                                     const std::vector<float>& dout,  // (B, T, NH, HS)
                                     const AttnShape& s, const AttnMask& mask = {});
