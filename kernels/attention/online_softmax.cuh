// online_softmax.cuh — one step of the online softmax (FlashAttention's m_i, l_i recurrence) on
// the score fragments of one query row, written once for the forwards of flash1 (flash1.cu),
// flash (flash_fwd.cu, mma.sync) and flash3 (flash3.cu, wgmma): all hold S in the mma.sync C-fragment layout
// (flash_common.cuh), a row spread over the 4 lanes of a quad, two rows per thread (r = 0, 1:
// rows g and g + 8).
#pragma once
#include "kernels/attention/flash_common.cuh"

namespace flash {

// For the row r of this thread's N 8-column fragments of S, s(n, e) (element e of fragment n;
// the row's elements are e = 2r, 2r + 1), with the row's running max m_i and this thread's
// partial sum l_i:
//   m_new = max(m_i, rowmax S)           (over the quad)
//   P     = exp2(S scale_log2 - m_new scale_log2), in place of S   (one FFMA + one MUFU.EX2)
//   l_i   = alpha l_i + rowsum(P)        (this thread's part, which the epilogue sums over the
//                                         quad; FULL_ROW: the quad's sum, in every lane)
//   m_i   = m_new
// Returns alpha = exp2((m_i - m_new) scale_log2), the factor the caller rescales O_i by. A row
// with every key masked so far keeps m = -inf; it subtracts 0 then (exp2(-inf) = 0).
template <int N, bool FULL_ROW = false, class Frag>
__device__ __forceinline__ float online_softmax_row(Frag&& s, int r, float& m_i, float& l_i,
                                                    float scale_log2) {
  float mx = m_i;
#pragma unroll
  for (int n = 0; n < N; ++n) mx = fmaxf(mx, fmaxf(s(n, 2 * r), s(n, 2 * r + 1)));
  mx = quad_max(mx);
  const float m_scaled = (mx == -INFINITY) ? 0.f : mx * scale_log2;
  const float alpha = fast_exp2(m_i * scale_log2 - m_scaled);
  m_i = mx;
  float rs = 0.f;
#pragma unroll
  for (int n = 0; n < N; ++n) {
    const float p0 = fast_exp2(fmaf(s(n, 2 * r), scale_log2, -m_scaled));
    const float p1 = fast_exp2(fmaf(s(n, 2 * r + 1), scale_log2, -m_scaled));
    s(n, 2 * r) = p0;
    s(n, 2 * r + 1) = p1;
    rs += p0 + p1;
  }
  l_i = l_i * alpha + (FULL_ROW ? quad_sum(rs) : rs);
  return alpha;
}

}  // namespace flash
