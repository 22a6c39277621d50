// flash.cu — the "flash" attention backend: sizes, checks and dispatch around our own
// FlashAttention-2 kernels.
//
//   bf16 build (default): flash_fwd.cu (tiled forward, online softmax, LSE saved) and
//     flash_bwd.cu (D = rowsum(dO o O), recomputation backward, fp32 dQ accumulator), on
//     tensor cores; head sizes 64 and 128.
//   FP32 build (PRECISION=FP32, floatX = float): the tensor-core kernels are bf16-only, so this
//     file carries a simple, correct fallback (below: one warp per query row, the same online
//     softmax in fp32, atomics for dK/dV). It is slow (scalar, O(T^2 HS) per head with warp
//     reductions) and meant for debugging and tight tests; head sizes 32, 64, 128.
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
// Backward: D = dO.o; for s = 0..t: p = exp(x - lse), dp = dO.v_s, ds = p (dp - D);
//           dq += scale ds k_s; dk_s += scale ds q (atomic); dv_s += p dO (atomic)
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

// dK, dV rows of dqkv are accumulated with atomics: zero them first (fp32 build only).
template <typename T_>
__global__ void simple_zero_kv_kernel(T_* dqkv, size_t tokens, int NH, int NKV, int HS) {
  const size_t per = (size_t)2 * NKV * HS;
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= tokens * per) return;
  dqkv[(i / per) * (NH + 2 * NKV) * (size_t)HS + (size_t)NH * HS + i % per] = (T_)0.f;
}

template <typename T_, int NPL>
__global__ void simple_bwd_kernel(T_* dqkv, const T_* dout, const T_* qkv, const T_* out,
                                  const float* lse, int B, int T, int NH, int NKV, float scale) {
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
  float D = 0.f;
#pragma unroll
  for (int k = 0; k < NPL; ++k) {
    qr[k] = (float)q[lane + 32 * k];
    dor[k] = (float)dout[orow + lane + 32 * k];
    D += dor[k] * (float)out[orow + lane + 32 * k];
    dq[k] = 0.f;
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) D += __shfl_xor_sync(0xffffffffu, D, off);
  const float L = lse[((size_t)b * NH + h) * T + t];
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
    const float p = expf(x * scale - L);
    const float ds = p * (dp - D);
    T_* dk = dqkv + ((size_t)b * T + s) * ld + (size_t)(NH + kvh) * HS;
    T_* dv = dqkv + ((size_t)b * T + s) * ld + (size_t)(NH + NKV + kvh) * HS;
#pragma unroll
    for (int k = 0; k < NPL; ++k) {
      dq[k] += scale * ds * (float)kp[lane + 32 * k];
      atomicAdd(dk + lane + 32 * k, (T_)(scale * ds * qr[k]));
      atomicAdd(dv + lane + 32 * k, (T_)(p * dor[k]));
    }
  }
  T_* dqp = dqkv + ((size_t)b * T + t) * ld + (size_t)h * HS;
#pragma unroll
  for (int k = 0; k < NPL; ++k) dqp[lane + 32 * k] = (T_)dq[k];
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
static void simple_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                            const float* lse, const AttnShape& s, cudaStream_t stream) {
  const size_t tokens = (size_t)s.B * s.T, nkv = tokens * 2 * s.NKV * s.HS;
  simple_zero_kv_kernel<float>
      <<<(unsigned)ceil_div(nkv, (size_t)256), 256, 0, stream>>>(dqkv, tokens, s.NH, s.NKV, s.HS);
  CUDA_CHECK_LAUNCH();
  const size_t threads = (size_t)s.B * s.NH * s.T * 32;
  simple_bwd_kernel<float, NPL><<<(unsigned)ceil_div(threads, (size_t)256), 256, 0, stream>>>(
      dqkv, dout, qkv, out, lse, s.B, s.T, s.NH, s.NKV, 1.f / sqrtf((float)s.HS));
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
#if defined(ENABLE_FP32)
    switch (a.shape.HS) {
      case 32:
        flash::simple_backward<1>(a.dqkv, a.dout, a.qkv, a.out, lse, a.shape, stream);
        break;
      case 64:
        flash::simple_backward<2>(a.dqkv, a.dout, a.qkv, a.out, lse, a.shape, stream);
        break;
      default:
        flash::simple_backward<4>(a.dqkv, a.dout, a.qkv, a.out, lse, a.shape, stream);
        break;
    }
#else
    float* dq_accum = static_cast<float*>(a.scratch);
    float* D = dq_accum + (size_t)a.shape.B * a.shape.NH * a.shape.T * a.shape.HS;
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
