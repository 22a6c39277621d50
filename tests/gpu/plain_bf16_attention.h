// plain_bf16_attention — masked attention on the CPU as a plain bf16 implementation computes it:
// the baseline of the self-calibrating rule (tests/test_common.h expect_calibrated) for every
// GPU attention kernel (test_attention.cu, test_flash.cu). It rounds to bf16 where a bf16
// framework would: S = scale Q K^T, P, O, dP, dS, dQ, dK, dV (fp32/double accumulation inside
// each product; dK/dV of a GQA group summed before their rounding). Inputs already rounded.
// Layout as kernels/attention/attention_ref.h; causal, or the mask given (mask.h: query t sees
// keys lo(t)..t; a host doc_start).
// It also returns the rule's floor for each result (RoundingFloor, tests/test_common.h): the
// first-order bound on the error of one output row when each value that feeds it is rounded to
// bf16 once, the row's largest over the result, in L2 and in max norm. With u = 2^-8 and, for
// every query row t, visible key u (lo(t) <= u <= t) and head h (g its kv head), element d of
//   out row t:  u |O_t[d]| (its own rounding) + sum over u of u P_tu |V_u[d]| (rounding P_tu)
//   dV row u:   u |dV_u[d]| + sum over t, h of u P_tu |dO_t[d]|
//   dQ row t:   u |dQ_t[d]| + sum over u of u scale sigma_tu |K_u[d]|: rounding P_tu, dP_tu,
//               D_t or dS_tu moves dS_tu = P_tu (dP_tu - D_t) by at most u sigma_tu,
//               sigma_tu = P_tu (|dP_tu| + |D_t|)
//   dK row u:   u |dK_u[d]| + sum over t, h of u scale sigma_tu |Q_t[d]|
// The bound of the row is that vector's L2 norm and its largest element. A row that sees few
// keys is bounded by a few terms; one that sees many keys has most of its terms small (P_tu
// sums to 1 over u), so the floor stays small beside the rule's 2x term there.
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
