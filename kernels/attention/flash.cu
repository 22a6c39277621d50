// flash.cu — the "flash" attention backend: sizes, checks and dispatch around our own
// FlashAttention-2 kernels.
//
//   bf16 build (default): flash_fwd.cu (tiled forward, online softmax, LSE saved) and
//     flash_bwd.cu (D = rowsum(dO o O), recomputation backward, fp32 dQ accumulator), on
//     tensor cores; head sizes 64 and 128.
//   FP32 build (PRECISION=FP32, floatX = float): the tensor-core kernels are bf16-only, so this
//     file carries a simple, correct fallback (below: one warp per query row, the same online
//     softmax in fp32; the backward in three kernels, D, then dQ per query row and dK/dV per
//     key row, each summing in a fixed order: no atomics, bitwise reproducible). It is slow
//     (scalar, O(T^2 HS) per head with warp reductions) and meant for debugging and tight
//     tests; head sizes 32, 64, 128.
//
// saved  = LSE (B, NH, T) fp32, natural log: lse = m_i * scale + log(l_i).
// scratch = dQ accumulator (B, NH, T, HS) fp32 + D (B, NH, T) fp32 (backward only).
//
// Test:  ./build/test_gpu --gtest_filter='Flash*'      (tests/gpu/test_flash.cu)
// Bench: python3 scripts/bench_attention.py
#include <cmath>

#include "kernels/attention/flash.cuh"
#include "kernels/attention/flash_common.cuh"

namespace flash {

// ---------------------------------------------------------------------------------------------
// Simple fallback (FP32 build). One warp per (b, h, query t); lane l holds head dims l, l+32, ..
// Forward:  for s = 0..t: x = scale q.k_s (warp sum); online softmax (m, l); o = o*alpha + p v_s
// Backward: D_t = dO_t.o_t; p_ts = exp(x_ts - lse_t), dp_ts = dO_t.v_s, ds_ts = p_ts (dp_ts - D_t);
//           dq_t = scale sum_{s<=t} ds_ts k_s (warp per query row);
//           dk_s = scale sum_{h in group, t>=s} ds_ts q_t, dv_s = sum p_ts dO_t (warp per key row)
// ---------------------------------------------------------------------------------------------
template <typename T_, int NPL>  // NPL = HS / 32 elements per lane
__global__ void simple_fwd_kernel(T_* out, float* lse, const T_* qkv, int B, int T, int NH, int NKV,
                                  float scale) {
  constexpr int HS = NPL * 32;
  const size_t wid = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (wid >= (size_t)B * NH * T) return;
  const int t = wid % T;
  const int h = (wid / T) % NH;
  const int b = wid / ((size_t)T * NH);
  const int kvh = h / (NH / NKV);
  const size_t ld = (size_t)(NH + 2 * NKV) * HS;
  const T_* q = qkv + ((size_t)b * T + t) * ld + (size_t)h * HS;
  float qr[NPL], o[NPL];
#pragma unroll
  for (int k = 0; k < NPL; ++k) {
    qr[k] = (float)q[lane + 32 * k];
    o[k] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  for (int s = 0; s <= t; ++s) {
    const T_* kp = qkv + ((size_t)b * T + s) * ld + (size_t)(NH + kvh) * HS;
    const T_* vp = qkv + ((size_t)b * T + s) * ld + (size_t)(NH + NKV + kvh) * HS;
    float x = 0.f;
#pragma unroll
    for (int k = 0; k < NPL; ++k) x += qr[k] * (float)kp[lane + 32 * k];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
    x *= scale;
    const float m_new = fmaxf(m, x);
    const float alpha = expf(m - m_new), p = expf(x - m_new);
    l = l * alpha + p;
#pragma unroll
    for (int k = 0; k < NPL; ++k) o[k] = o[k] * alpha + p * (float)vp[lane + 32 * k];
    m = m_new;
  }
  T_* op = out + (((size_t)b * T + t) * NH + h) * HS;
#pragma unroll
  for (int k = 0; k < NPL; ++k) op[lane + 32 * k] = (T_)(o[k] / l);
  if (lane == 0) lse[((size_t)b * NH + h) * T + t] = m + logf(l);
}

// D[b, h, t] = dO . o for each query row (one warp per row).
template <typename T_, int NPL>
__global__ void simple_bwd_dot_kernel(float* D, const T_* dout, const T_* out, size_t rows_BTH,
                                      int T, int NH) {
  constexpr int HS = NPL * 32;
  const size_t wid = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (wid >= rows_BTH) return;  // wid = (b*T + t)*NH + h: out's row order
  float d = 0.f;
#pragma unroll
  for (int k = 0; k < NPL; ++k) d += (float)dout[wid * HS + lane + 32 * k] * (float)out[wid * HS + lane + 32 * k];
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) d += __shfl_xor_sync(0xffffffffu, d, off);
  const int h = wid % NH, t = (wid / NH) % T;
  const size_t b = wid / ((size_t)NH * T);
  if (lane == 0) D[(b * NH + h) * T + t] = d;
}

// dQ: one warp per (b, h, query t), keys s = 0..t in order. No atomics.
template <typename T_, int NPL>
__global__ void simple_bwd_dq_kernel(T_* dqkv, const T_* dout, const T_* qkv, const float* lse,
                                     const float* D, int B, int T, int NH, int NKV, float scale) {
  constexpr int HS = NPL * 32;
  const size_t wid = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (wid >= (size_t)B * NH * T) return;
  const int t = wid % T;
  const int h = (wid / T) % NH;
  const int b = wid / ((size_t)T * NH);
  const int kvh = h / (NH / NKV);
  const size_t ld = (size_t)(NH + 2 * NKV) * HS;
  const size_t orow = (((size_t)b * T + t) * NH + h) * HS;
  const T_* q = qkv + ((size_t)b * T + t) * ld + (size_t)h * HS;
  float qr[NPL], dor[NPL], dq[NPL];
#pragma unroll
  for (int k = 0; k < NPL; ++k) {
    qr[k] = (float)q[lane + 32 * k];
    dor[k] = (float)dout[orow + lane + 32 * k];
    dq[k] = 0.f;
  }
  const float L = lse[((size_t)b * NH + h) * T + t], Dt = D[((size_t)b * NH + h) * T + t];
  for (int s = 0; s <= t; ++s) {
    const T_* kp = qkv + ((size_t)b * T + s) * ld + (size_t)(NH + kvh) * HS;
    const T_* vp = qkv + ((size_t)b * T + s) * ld + (size_t)(NH + NKV + kvh) * HS;
    float x = 0.f, dp = 0.f;
#pragma unroll
    for (int k = 0; k < NPL; ++k) {
      x += qr[k] * (float)kp[lane + 32 * k];
      dp += dor[k] * (float)vp[lane + 32 * k];
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      x += __shfl_xor_sync(0xffffffffu, x, off);
      dp += __shfl_xor_sync(0xffffffffu, dp, off);
    }
    const float ds = expf(x * scale - L) * (dp - Dt);
#pragma unroll
    for (int k = 0; k < NPL; ++k) dq[k] += scale * ds * (float)kp[lane + 32 * k];
  }
  T_* dqp = dqkv + ((size_t)b * T + t) * ld + (size_t)h * HS;
#pragma unroll
  for (int k = 0; k < NPL; ++k) dqp[lane + 32 * k] = (T_)dq[k];
}

// dK, dV: one warp per (b, kv head, key s), over the group's query heads and queries t >= s
// in a fixed order. No atomics: bitwise reproducible.
template <typename T_, int NPL>
__global__ void simple_bwd_dkv_kernel(T_* dqkv, const T_* dout, const T_* qkv, const float* lse,
                                      const float* D, int B, int T, int NH, int NKV, float scale) {
  constexpr int HS = NPL * 32;
  const size_t wid = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (wid >= (size_t)B * NKV * T) return;
  const int s = wid % T;
  const int kvh = (wid / T) % NKV;
  const int b = wid / ((size_t)T * NKV);
  const int G = NH / NKV;
  const size_t ld = (size_t)(NH + 2 * NKV) * HS;
  const T_* kp = qkv + ((size_t)b * T + s) * ld + (size_t)(NH + kvh) * HS;
  const T_* vp = qkv + ((size_t)b * T + s) * ld + (size_t)(NH + NKV + kvh) * HS;
  float kr[NPL], vr[NPL], dk[NPL], dv[NPL];
#pragma unroll
  for (int k = 0; k < NPL; ++k) {
    kr[k] = (float)kp[lane + 32 * k];
    vr[k] = (float)vp[lane + 32 * k];
    dk[k] = dv[k] = 0.f;
  }
  for (int h = kvh * G; h < (kvh + 1) * G; ++h) {
    for (int t = s; t < T; ++t) {
      const T_* q = qkv + ((size_t)b * T + t) * ld + (size_t)h * HS;
      const T_* dop = dout + (((size_t)b * T + t) * NH + h) * HS;
      float x = 0.f, dp = 0.f;
#pragma unroll
      for (int k = 0; k < NPL; ++k) {
        x += (float)q[lane + 32 * k] * kr[k];
        dp += (float)dop[lane + 32 * k] * vr[k];
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
        dv[k] += p * (float)dop[lane + 32 * k];
        dk[k] += scale * ds * (float)q[lane + 32 * k];
      }
    }
  }
  T_* dkp = dqkv + ((size_t)b * T + s) * ld + (size_t)(NH + kvh) * HS;
  T_* dvp = dqkv + ((size_t)b * T + s) * ld + (size_t)(NH + NKV + kvh) * HS;
#pragma unroll
  for (int k = 0; k < NPL; ++k) {
    dkp[lane + 32 * k] = (T_)dk[k];
    dvp[lane + 32 * k] = (T_)dv[k];
  }
}

#if defined(ENABLE_FP32)
template <int NPL>
static void simple_forward(float* out, float* lse, const float* qkv, const AttnShape& s,
                           cudaStream_t stream) {
  const size_t threads = (size_t)s.B * s.NH * s.T * 32;
  simple_fwd_kernel<float, NPL><<<(unsigned)ceil_div(threads, (size_t)256), 256, 0, stream>>>(
      out, lse, qkv, s.B, s.T, s.NH, s.NKV, 1.f / sqrtf((float)s.HS));
  CUDA_CHECK_LAUNCH();
}
template <int NPL>
static void simple_backward(float* dqkv, float* D, const float* dout, const float* qkv,
                            const float* out, const float* lse, const AttnShape& s,
                            cudaStream_t stream) {
  const float scale = 1.f / sqrtf((float)s.HS);
  const size_t rows = (size_t)s.B * s.NH * s.T, kv_rows = (size_t)s.B * s.NKV * s.T;
  simple_bwd_dot_kernel<float, NPL>
      <<<(unsigned)ceil_div(rows * 32, (size_t)256), 256, 0, stream>>>(D, dout, out, rows, s.T, s.NH);
  CUDA_CHECK_LAUNCH();
  simple_bwd_dq_kernel<float, NPL><<<(unsigned)ceil_div(rows * 32, (size_t)256), 256, 0, stream>>>(
      dqkv, dout, qkv, lse, D, s.B, s.T, s.NH, s.NKV, scale);
  CUDA_CHECK_LAUNCH();
  simple_bwd_dkv_kernel<float, NPL>
      <<<(unsigned)ceil_div(kv_rows * 32, (size_t)256), 256, 0, stream>>>(dqkv, dout, qkv, lse, D,
                                                                         s.B, s.T, s.NH, s.NKV, scale);
  CUDA_CHECK_LAUNCH();
}
#endif

}  // namespace flash

namespace {

class FlashAttention final : public AttentionBackend {
 public:
  const char* name() const override { return "flash"; }
  bool deterministic_dq() const override { return false; }  // bulk reduce-adds, see flash_bwd.cu

  std::string unsupported_reason(const AttnShape& s) const override {
    if (s.B < 1 || s.T < 1 || s.NH < 1 || s.NKV < 1 || s.HS < 1)
      return flashgpt::strformat("bad shape B=%d T=%d NH=%d NKV=%d HS=%d", s.B, s.T, s.NH, s.NKV,
                                 s.HS);
    if (s.NH % s.NKV != 0)
      return flashgpt::strformat("--kv-heads %d does not divide --heads %d", s.NKV, s.NH);
#if defined(ENABLE_FP32)
    if (s.HS != 32 && s.HS != 64 && s.HS != 128)
      return flashgpt::strformat(
          "flash attention (fp32 fallback) supports head size 32, 64 or 128, not %d", s.HS);
#else
    if (s.HS != 64 && s.HS != 128)
      return flashgpt::strformat(
          "flash attention supports head size 64 or 128, not %d; use --attn naive", s.HS);
#endif
    if (s.T > (1 << 22)) return flashgpt::strformat("sequence length %d is over 4M", s.T);
    return "";
  }

  size_t saved_bytes(const AttnShape& s) const override {
    return (size_t)s.B * s.NH * s.T * sizeof(float);
  }
  size_t scratch_bytes(const AttnShape& s) const override {
    const size_t rows = (size_t)s.B * s.NH * s.T;
    return rows * s.HS * sizeof(float) + rows * sizeof(float);
  }

  void forward(const AttnForwardArgs& a, cudaStream_t stream) const override {
    check(a.shape);
    float* lse = static_cast<float*>(a.saved);
#if defined(ENABLE_FP32)
    switch (a.shape.HS) {
      case 32:
        flash::simple_forward<1>(a.out, lse, a.qkv, a.shape, stream);
        break;
      case 64:
        flash::simple_forward<2>(a.out, lse, a.qkv, a.shape, stream);
        break;
      default:
        flash::simple_forward<4>(a.out, lse, a.qkv, a.shape, stream);
        break;
    }
#else
    flash::forward_bf16(a.out, lse, a.qkv, a.shape, stream);
#endif
  }

  void backward(const AttnBackwardArgs& a, cudaStream_t stream) const override {
    check(a.shape);
    const float* lse = static_cast<const float*>(a.saved);
    float* dq_accum = static_cast<float*>(a.scratch);
    float* D = dq_accum + (size_t)a.shape.B * a.shape.NH * a.shape.T * a.shape.HS;
#if defined(ENABLE_FP32)
    switch (a.shape.HS) {  // D in the scratch's D slot; dQ needs no accumulator here
      case 32:
        flash::simple_backward<1>(a.dqkv, D, a.dout, a.qkv, a.out, lse, a.shape, stream);
        break;
      case 64:
        flash::simple_backward<2>(a.dqkv, D, a.dout, a.qkv, a.out, lse, a.shape, stream);
        break;
      default:
        flash::simple_backward<4>(a.dqkv, D, a.dout, a.qkv, a.out, lse, a.shape, stream);
        break;
    }
#else
    flash::backward_bf16(a.dqkv, dq_accum, D, a.dout, a.qkv, a.out, lse, a.shape, stream);
#endif
  }

 private:
  void check(const AttnShape& s) const {
    const std::string why = unsupported_reason(s);
    CHECK(why.empty(), "attention 'flash': %s", why.c_str());
  }
};

}  // namespace

std::unique_ptr<AttentionBackend> make_flash_attention() {
  return std::make_unique<FlashAttention>();
}
