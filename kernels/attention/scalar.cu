// scalar.cu — the "scalar" attention backend: exact attention on CUDA cores, one warp per
// query row, fp32 arithmetic, no tiles and no tensor cores. It is the FP32 build's LSE backend
// (flash and flash1 are bf16 tensor-core kernels) and, in both builds, a simple deterministic GPU
// oracle. Slow: O(T^2 HS) per head in warp-reduced dot products. Spec (limits, sizes, cost):
// kSpec_scalar in backends.cpp.
//
// Forward, one warp per (b, h, query t); lane l holds head dims l, l+32, ...:
//   m = -inf, l = 0, o = 0
//   for s = 0..t:  x = scale q_t . k_s (warp sum);  m_new = max(m, x)
//                  l = l e^(m - m_new) + e^(x - m_new);  o = o e^(m - m_new) + e^(x - m_new) v_s
//   out_t = o / l;  LSE_t = m + log l                        (saved: LSE (B, NH, T) fp32)
// Backward, three kernels, each summing in a fixed order (no atomics: bitwise reproducible):
//   D_t = dO_t . o_t                                         (one warp per query row)
//   p_ts = exp(scale q_t . k_s - LSE_t), dp_ts = dO_t . v_s, ds_ts = p_ts (dp_ts - D_t)
//   dq_t = scale sum_{s<=t} ds_ts k_s                        (one warp per query row)
//   dk_s = scale sum_{h in group, t>=s} ds_ts q_t,  dv_s = sum p_ts dO_t   (one warp per key row)
// Masks (mask.h; MASKED kernels, the causal ones unchanged): query t's loops run over keys
// lo(t)..t, key s's over queries s..(the last t with lo(t) <= s): the work the mask leaves.
// Scratch: D (B, NH, T) fp32. Limits: HS 32, 64 or 128 (HS/32 elements per lane); any T >= 1.
//
// Test:  ./build/test_gpu --gtest_filter='AttentionGpu*scalar*'   (and FlashGpu* in the FP32 build)
// Bench: ./build/flashgpt bench-attention --backends scalar --seq-lens 1024
#include <cmath>
#include <type_traits>

#include "kernels/attention/attention.cuh"

namespace {

// One warp per row of a (B, heads, T) index space, rows innermost: this warp's (b, head, t), or
// false past the end.
__device__ __forceinline__ bool warp_row(int B, int heads, int T, int& b, int& head, int& t) {
  const size_t wid = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  if (wid >= (size_t)B * heads * T) return false;
  t = wid % T;
  head = (wid / T) % heads;
  b = wid / ((size_t)T * heads);
  return true;
}

template <typename T_, int NPL, bool MASKED>  // NPL = HS / 32 elements per lane
__global__ void scalar_fwd_kernel(T_* out, float* lse, const T_* qkv, int B, int T, int NH, int NKV,
                                  float scale, AttnMask mask) {
  constexpr int HS = NPL * 32;
  const int lane = threadIdx.x & 31;
  int b, h, t;
  if (!warp_row(B, NH, T, b, h, t)) return;
  const int kvh = h / (NH / NKV);
  const size_t ld = (size_t)(NH + 2 * NKV) * HS;
  const T_* q = qkv + ((size_t)b * T + t) * ld + (size_t)h * HS;
  float qr[NPL], o[NPL];
#pragma unroll
  for (int k = 0; k < NPL; ++k) {
    qr[k] = to_f32(q[lane + 32 * k]);
    o[k] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  for (int s = MASKED ? mask.seq(b, T).lo(t) : 0; s <= t; ++s) {
    const T_* kp = qkv + ((size_t)b * T + s) * ld + (size_t)(NH + kvh) * HS;
    const T_* vp = qkv + ((size_t)b * T + s) * ld + (size_t)(NH + NKV + kvh) * HS;
    float x = 0.f;
#pragma unroll
    for (int k = 0; k < NPL; ++k) x += qr[k] * to_f32(kp[lane + 32 * k]);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
    x *= scale;
    const float m_new = fmaxf(m, x);
    const float alpha = expf(m - m_new), p = expf(x - m_new);
    l = l * alpha + p;
#pragma unroll
    for (int k = 0; k < NPL; ++k) o[k] = o[k] * alpha + p * to_f32(vp[lane + 32 * k]);
    m = m_new;
  }
  T_* op = out + (((size_t)b * T + t) * NH + h) * HS;
#pragma unroll
  for (int k = 0; k < NPL; ++k) op[lane + 32 * k] = from_f32<T_>(o[k] / l);
  if (lane == 0) lse[((size_t)b * NH + h) * T + t] = m + logf(l);
}

// D[b, h, t] = dO . o for each query row (one warp per row).
template <typename T_, int NPL>
__global__ void scalar_bwd_dot_kernel(float* D, const T_* dout, const T_* out, size_t rows_BTH,
                                      int T, int NH) {
  constexpr int HS = NPL * 32;
  const size_t wid = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (wid >= rows_BTH) return;  // wid = (b*T + t)*NH + h: out's row order
  float d = 0.f;
#pragma unroll
  for (int k = 0; k < NPL; ++k) d += to_f32(dout[wid * HS + lane + 32 * k]) * to_f32(out[wid * HS + lane + 32 * k]);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) d += __shfl_xor_sync(0xffffffffu, d, off);
  const int h = wid % NH, t = (wid / NH) % T;
  const size_t b = wid / ((size_t)NH * T);
  if (lane == 0) D[(b * NH + h) * T + t] = d;
}

// dQ: one warp per (b, h, query t), keys s = 0..t (lo(t)..t) in order. No atomics.
template <typename T_, int NPL, bool MASKED>
__global__ void scalar_bwd_dq_kernel(T_* dqkv, const T_* dout, const T_* qkv, const float* lse,
                                     const float* D, int B, int T, int NH, int NKV, float scale,
                                     AttnMask mask) {
  constexpr int HS = NPL * 32;
  const int lane = threadIdx.x & 31;
  int b, h, t;
  if (!warp_row(B, NH, T, b, h, t)) return;
  const int kvh = h / (NH / NKV);
  const size_t ld = (size_t)(NH + 2 * NKV) * HS;
  const size_t orow = (((size_t)b * T + t) * NH + h) * HS;
  const T_* q = qkv + ((size_t)b * T + t) * ld + (size_t)h * HS;
  float qr[NPL], dor[NPL], dq[NPL];
#pragma unroll
  for (int k = 0; k < NPL; ++k) {
    qr[k] = to_f32(q[lane + 32 * k]);
    dor[k] = to_f32(dout[orow + lane + 32 * k]);
    dq[k] = 0.f;
  }
  const float L = lse[((size_t)b * NH + h) * T + t], Dt = D[((size_t)b * NH + h) * T + t];
  for (int s = MASKED ? mask.seq(b, T).lo(t) : 0; s <= t; ++s) {
    const T_* kp = qkv + ((size_t)b * T + s) * ld + (size_t)(NH + kvh) * HS;
    const T_* vp = qkv + ((size_t)b * T + s) * ld + (size_t)(NH + NKV + kvh) * HS;
    float x = 0.f, dp = 0.f;
#pragma unroll
    for (int k = 0; k < NPL; ++k) {
      x += qr[k] * to_f32(kp[lane + 32 * k]);
      dp += dor[k] * to_f32(vp[lane + 32 * k]);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      x += __shfl_xor_sync(0xffffffffu, x, off);
      dp += __shfl_xor_sync(0xffffffffu, dp, off);
    }
    const float ds = expf(x * scale - L) * (dp - Dt);
#pragma unroll
    for (int k = 0; k < NPL; ++k) dq[k] += scale * ds * to_f32(kp[lane + 32 * k]);
  }
  T_* dqp = dqkv + ((size_t)b * T + t) * ld + (size_t)h * HS;
#pragma unroll
  for (int k = 0; k < NPL; ++k) dqp[lane + 32 * k] = from_f32<T_>(dq[k]);
}

// dK, dV: one warp per (b, kv head, key s), over the group's query heads and queries t >= s
// (MASKED: up to the last whose lo(t) <= s; lo is non-decreasing) in a fixed order. No atomics:
// bitwise reproducible.
template <typename T_, int NPL, bool MASKED>
__global__ void scalar_bwd_dkv_kernel(T_* dqkv, const T_* dout, const T_* qkv, const float* lse,
                                      const float* D, int B, int T, int NH, int NKV, float scale,
                                      AttnMask mask) {
  constexpr int HS = NPL * 32;
  const int lane = threadIdx.x & 31;
  int b, kvh, s;
  if (!warp_row(B, NKV, T, b, kvh, s)) return;
  const int G = NH / NKV;
  const size_t ld = (size_t)(NH + 2 * NKV) * HS;
  const T_* kp = qkv + ((size_t)b * T + s) * ld + (size_t)(NH + kvh) * HS;
  const T_* vp = qkv + ((size_t)b * T + s) * ld + (size_t)(NH + NKV + kvh) * HS;
  float kr[NPL], vr[NPL], dk[NPL], dv[NPL];
#pragma unroll
  for (int k = 0; k < NPL; ++k) {
    kr[k] = to_f32(kp[lane + 32 * k]);
    vr[k] = to_f32(vp[lane + 32 * k]);
    dk[k] = dv[k] = 0.f;
  }
  const SeqMask sm = mask.seq(b, T);
  for (int h = kvh * G; h < (kvh + 1) * G; ++h) {
    for (int t = s; t < T && (!MASKED || sm.lo(t) <= s); ++t) {
      const T_* q = qkv + ((size_t)b * T + t) * ld + (size_t)h * HS;
      const T_* dop = dout + (((size_t)b * T + t) * NH + h) * HS;
      float x = 0.f, dp = 0.f;
#pragma unroll
      for (int k = 0; k < NPL; ++k) {
        x += to_f32(q[lane + 32 * k]) * kr[k];
        dp += to_f32(dop[lane + 32 * k]) * vr[k];
      }
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) {
        x += __shfl_xor_sync(0xffffffffu, x, off);
        dp += __shfl_xor_sync(0xffffffffu, dp, off);
      }
      const size_t r = ((size_t)b * NH + h) * T + t;
      const float p = expf(x * scale - lse[r]);
      const float ds = p * (dp - D[r]);
#pragma unroll
      for (int k = 0; k < NPL; ++k) {
        dv[k] += p * to_f32(dop[lane + 32 * k]);
        dk[k] += scale * ds * to_f32(q[lane + 32 * k]);
      }
    }
  }
  T_* dkp = dqkv + ((size_t)b * T + s) * ld + (size_t)(NH + kvh) * HS;
  T_* dvp = dqkv + ((size_t)b * T + s) * ld + (size_t)(NH + NKV + kvh) * HS;
#pragma unroll
  for (int k = 0; k < NPL; ++k) {
    dkp[lane + 32 * k] = from_f32<T_>(dk[k]);
    dvp[lane + 32 * k] = from_f32<T_>(dv[k]);
  }
}

template <int NPL, bool MASKED>
void scalar_forward(floatX* out, float* lse, const floatX* qkv, const AttnShape& s,
                    const AttnMask& mask, cudaStream_t stream) {
  const size_t threads = (size_t)s.B * s.NH * s.T * 32;
  scalar_fwd_kernel<floatX, NPL, MASKED>
      <<<(unsigned)ceil_div(threads, (size_t)256), 256, 0, stream>>>(
          out, lse, qkv, s.B, s.T, s.NH, s.NKV, 1.f / sqrtf((float)s.HS), mask);
  CUDA_CHECK_LAUNCH();
}

template <int NPL, bool MASKED>
void scalar_backward(floatX* dqkv, float* D, const floatX* dout, const floatX* qkv,
                     const floatX* out, const float* lse, const AttnShape& s,
                     const AttnMask& mask, cudaStream_t stream) {
  const float scale = 1.f / sqrtf((float)s.HS);
  const size_t rows = (size_t)s.B * s.NH * s.T, kv_rows = (size_t)s.B * s.NKV * s.T;
  scalar_bwd_dot_kernel<floatX, NPL>
      <<<(unsigned)ceil_div(rows * 32, (size_t)256), 256, 0, stream>>>(D, dout, out, rows, s.T, s.NH);
  CUDA_CHECK_LAUNCH();
  scalar_bwd_dq_kernel<floatX, NPL, MASKED>
      <<<(unsigned)ceil_div(rows * 32, (size_t)256), 256, 0, stream>>>(
          dqkv, dout, qkv, lse, D, s.B, s.T, s.NH, s.NKV, scale, mask);
  CUDA_CHECK_LAUNCH();
  scalar_bwd_dkv_kernel<floatX, NPL, MASKED>
      <<<(unsigned)ceil_div(kv_rows * 32, (size_t)256), 256, 0, stream>>>(
          dqkv, dout, qkv, lse, D, s.B, s.T, s.NH, s.NKV, scale, mask);
  CUDA_CHECK_LAUNCH();
}

// The kernels of head size HS (NPL = HS / 32) with the mask at compile time: f(npl, masked).
template <class F>
void with_scalar_kernels(int HS, const AttnMask& mask, F&& f) {
  using std::integral_constant;
  auto by_mask = [&](auto npl) {
    if (mask.is_causal()) f(npl, integral_constant<bool, false>{});
    else f(npl, integral_constant<bool, true>{});
  };
  switch (HS) {
    case 32: by_mask(integral_constant<int, 1>{}); break;
    case 64: by_mask(integral_constant<int, 2>{}); break;
    default: by_mask(integral_constant<int, 4>{}); break;
  }
}

class ScalarAttention final : public AttentionBackend {
 public:
  ScalarAttention() : AttentionBackend(attention_spec("scalar")) {}

  void forward(const AttnForwardArgs& a, cudaStream_t stream) const override {
    check(a.shape, a.mask);
    float* lse = static_cast<float*>(a.saved);
    with_scalar_kernels(a.shape.HS, a.mask, [&](auto npl, auto masked) {
      scalar_forward<npl(), masked()>(a.out, lse, a.qkv, a.shape, a.mask, stream);
    });
  }

  void backward(const AttnBackwardArgs& a, cudaStream_t stream) const override {
    check(a.shape, a.mask);
    const float* lse = static_cast<const float*>(a.saved);
    float* D = static_cast<float*>(a.scratch);
    with_scalar_kernels(a.shape.HS, a.mask, [&](auto npl, auto masked) {
      scalar_backward<npl(), masked()>(a.dqkv, D, a.dout, a.qkv, a.out, lse, a.shape, a.mask,
                                       stream);
    });
  }
};

}  // namespace

std::unique_ptr<AttentionBackend> make_scalar_attention() {
  return std::make_unique<ScalarAttention>();
}
