// rope.cu — see rope.cuh.
#include "kernels/rope.cuh"

namespace {

// One thread per (token bt, rotated head h, group of W pairs starting at i = g*W).
// BWD: rotate by -angle (sin negated). VEC: W = x128::size with 128-bit accesses, else W = 1.
template <bool BWD, bool VEC>
__global__ void rope_kernel(floatX* qkv, const float* cos_sin, size_t work, int T, int NH,
                            int NKV, int HS, int pos0) {
  constexpr int W = VEC ? x128::size : 1;
  const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= work) return;
  const int half = HS / 2, groups = half / W, NR = NH + NKV, H3 = NH + 2 * NKV;
  const int g = (int)(idx % groups);
  const size_t th = idx / groups;  // token * NR + head
  const int h = (int)(th % NR);
  const size_t bt = th / NR;
  const int p = pos0 + (int)(bt % T);
  const int i = g * W;
  floatX* x0p = qkv + (bt * H3 + h) * HS + i;
  floatX* x1p = x0p + half;
  const float* cs = cos_sin + ((size_t)p * half + i) * 2;
  const float sgn = BWD ? -1.0f : 1.0f;
  if constexpr (VEC) {
    x128 a = load128(x0p), b = load128(x1p), ya, yb;
    float c[W], s[W];
#pragma unroll
    for (int k = 0; k < W; k += 2) {  // 2 pairs (cos, sin, cos, sin) per 128-bit load
      const f128 t = load128(cs + 2 * k);
      c[k] = t[0], s[k] = sgn * t[1], c[k + 1] = t[2], s[k + 1] = sgn * t[3];
    }
#pragma unroll
    for (int k = 0; k < W; k++) {
      const float u = to_f32(a[k]), v = to_f32(b[k]);
      ya[k] = from_f32<floatX>(u * c[k] - v * s[k]);
      yb[k] = from_f32<floatX>(u * s[k] + v * c[k]);
    }
    store128(x0p, ya);
    store128(x1p, yb);
  } else {
    const float c = cs[0], s = sgn * cs[1];
    const float u = to_f32(*x0p), v = to_f32(*x1p);
    *x0p = from_f32<floatX>(u * c - v * s);
    *x1p = from_f32<floatX>(u * s + v * c);
  }
}

template <bool BWD>
void rope_launch(floatX* qkv, const float* cos_sin, int B, int T, int NH, int NKV, int HS,
                 int pos0, cudaStream_t stream) {
  CHECK(B >= 0 && T >= 0 && NH >= 0 && NKV >= 0, "rope: bad shape B=%d T=%d NH=%d NKV=%d", B, T,
        NH, NKV);
  CHECK(HS > 0 && HS % 2 == 0, "rope: head size HS=%d must be even (pairs x[i], x[i+HS/2])", HS);
  CHECK(pos0 >= 0, "rope: pos0=%d must be >= 0", pos0);
  const size_t pairs = (size_t)B * T * (NH + NKV) * (HS / 2);
  if (pairs == 0) return;
  // x128 of W pairs needs W | HS/2; every head then starts 16-byte aligned if qkv is, and the
  // table offset (p*HS/2 + i)*2 floats is a multiple of 2W floats (>= 16 bytes).
  constexpr int W = x128::size;
  const bool vec = (HS / 2) % W == 0 && aligned16(qkv) && aligned16(cos_sin);
  const size_t work = vec ? pairs / W : pairs;
  const int block = 256;
  const size_t grid = ceil_div(work, (size_t)block);
  if (vec)
    rope_kernel<BWD, true><<<grid, block, 0, stream>>>(qkv, cos_sin, work, T, NH, NKV, HS, pos0);
  else
    rope_kernel<BWD, false><<<grid, block, 0, stream>>>(qkv, cos_sin, work, T, NH, NKV, HS, pos0);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void rope_forward(floatX* qkv, const float* cos_sin, int B, int T, int NH, int NKV, int HS,
                  int pos0, cudaStream_t stream) {
  rope_launch<false>(qkv, cos_sin, B, T, NH, NKV, HS, pos0, stream);
}

void rope_backward(floatX* dqkv, const float* cos_sin, int B, int T, int NH, int NKV, int HS,
                   int pos0, cudaStream_t stream) {
  rope_launch<true>(dqkv, cos_sin, B, T, NH, NKV, HS, pos0, stream);
}
