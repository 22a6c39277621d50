// layernorm.cu — see layernorm.cuh.
#include "kernels/layernorm.cuh"

#include "kernels/matmul.cuh"  // column_sums: dinp_colsum past the registers

namespace {

// kLayerNormBwdBlocks (layernorm.h, which says why the count is fixed) blocks of 4 warps.
constexpr int kLayerNormBwdWarps = 4;

template <int W>
__global__ void layernorm_forward_kernel(floatX* out, float* mean, float* rstd, const floatX* inp,
                                         const floatX* weight, const floatX* bias, int N, int C) {
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= N) return;
  const floatX* x = inp + (size_t)row * C;
  float sum = 0.0f;
  for (int c = lane * W; c < C; c += 32 * W) {
    float v[W];
    load_floats<W>(v, x + c);
#pragma unroll
    for (int k = 0; k < W; k++) sum += v[k];
  }
  const float m = warp_reduce_sum(sum) / C;
  float ss = 0.0f;
  for (int c = lane * W; c < C; c += 32 * W) {
    float v[W];
    load_floats<W>(v, x + c);
#pragma unroll
    for (int k = 0; k < W; k++) ss += (v[k] - m) * (v[k] - m);
  }
  const float s = rsqrtf(warp_reduce_sum(ss) / C + 1e-5f);
  floatX* y = out + (size_t)row * C;
  for (int c = lane * W; c < C; c += 32 * W) {
    float v[W], w[W], b[W], o[W];
    load_floats<W>(v, x + c);
    load_floats<W>(w, weight + c);
    load_floats<W>(b, bias + c);
#pragma unroll
    for (int k = 0; k < W; k++) o[k] = (v[k] - m) * s * w[k] + b[k];
    store_floats<W>(y + c, o);
  }
  if (lane == 0) {
    if (mean) mean[row] = m;
    if (rstd) rstd[row] = s;
  }
}

// Forward with the row held in registers: lane `lane` owns chunks c = (k*32 + lane)*W,
// k < K (C <= 32*W*K): one read of the row from memory, no re-reads.
template <int W, int K>
__global__ void layernorm_forward_reg_kernel(floatX* out, float* mean, float* rstd,
                                             const floatX* inp, const floatX* weight,
                                             const floatX* bias, int N, int C) {
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= N) return;
  const floatX* x = inp + (size_t)row * C;
  float v[K][W];
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < K; k++) {
    const int c = (k * 32 + lane) * W;
    if (c < C) {
      load_floats<W>(v[k], x + c);
#pragma unroll
      for (int j = 0; j < W; j++) sum += v[k][j];
    }
  }
  const float m = warp_reduce_sum(sum) / C;
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < K; k++) {
    const int c = (k * 32 + lane) * W;
    if (c < C) {
#pragma unroll
      for (int j = 0; j < W; j++) ss += (v[k][j] - m) * (v[k][j] - m);
    }
  }
  const float s = rsqrtf(warp_reduce_sum(ss) / C + 1e-5f);
  floatX* y = out + (size_t)row * C;
#pragma unroll
  for (int k = 0; k < K; k++) {
    const int c = (k * 32 + lane) * W;
    if (c < C) {
      float w[W], b[W], o[W];
      load_floats<W>(w, weight + c);
      load_floats<W>(b, bias + c);
#pragma unroll
      for (int j = 0; j < W; j++) o[j] = (v[k][j] - m) * s * w[j] + b[j];
      store_floats<W>(y + c, o);
    }
  }
  if (lane == 0) {
    if (mean) mean[row] = m;
    if (rstd) rstd[row] = s;
  }
}

// W consecutive floatX of a row held in registers as loaded (one x128 on the vector path).
template <int W>
struct HeldChunk {
  floatX v[W];
};
template <>
struct HeldChunk<x128::size> {
  x128 v;
};
template <int W>
__device__ __forceinline__ HeldChunk<W> load_held(const floatX* src) {
  HeldChunk<W> h;
  if constexpr (W == x128::size) h.v = load128(src);
  else
#pragma unroll
    for (int k = 0; k < W; k++) h.v[k] = src[k];
  return h;
}
template <int W>
__device__ __forceinline__ void held_floats(float* dst, const HeldChunk<W>& h) {
#pragma unroll
  for (int k = 0; k < W; k++) dst[k] = to_f32(h.v[k]);
}

// RK > 0: rows of at most RK chunks of W channels per lane (C <= 32 W RK): x and dy stay in
// registers from the first pass to the second, which reads only dinp (and the weight, from L1).
// COLSUM (RK > 0): also the column sums of dinp as stored after the update (the bias gradient of
// the layer whose output was added to this residual: layernorm.cuh says why), in registers.
template <int W, int RK, bool COLSUM>
__global__ void __launch_bounds__(32 * kLayerNormBwdWarps)
    layernorm_backward_kernel(floatX* dinp, float* partials, const floatX* dout, const floatX* inp,
                              const floatX* weight, const float* mean, const float* rstd, int N,
                              int C) {
  static_assert(!COLSUM || RK > 0, "the column sums need the rows in registers");
  // (warps, 2, Cp): a dweight row and a dbias row per warp, Cp = C rounded up to 32*W. Channel
  // c + k (c = lane*W + j*32*W) is stored at j*32*W + k*32 + lane: consecutive lanes hit
  // consecutive banks (the natural order would be an 8-way bank conflict at W = 8).
  extern __shared__ float smem[];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int Cp = (C + 32 * W - 1) / (32 * W) * (32 * W);
  float* dw_s = smem + (size_t)warp * 2 * Cp;
  float* db_s = dw_s + Cp;
  for (int c = lane; c < Cp; c += 32) dw_s[c] = db_s[c] = 0.0f;  // own-warp rows: no barrier
  __syncwarp();
  float colsum[COLSUM ? RK : 1][W] = {};
  for (int row = blockIdx.x * kLayerNormBwdWarps + warp; row < N;
       row += gridDim.x * kLayerNormBwdWarps) {
    const floatX* x = inp + (size_t)row * C;
    const floatX* dy = dout + (size_t)row * C;
    floatX* dx = dinp + (size_t)row * C;
    const float m = mean[row], s = rstd[row];
    float g_sum = 0.0f, gx_sum = 0.0f;
    auto first = [&](int c, const float* xv, const float* dv) {  // the row sums, dw, db
      float wv[W];
      load_floats<W>(wv, weight + c);
#pragma unroll
      for (int k = 0; k < W; k++) {
        const float xhat = (xv[k] - m) * s, g = wv[k] * dv[k];
        g_sum += g;
        gx_sum += g * xhat;
        const int pos = (c - lane * W) + k * 32 + lane;
        dw_s[pos] += dv[k] * xhat;
        db_s[pos] += dv[k];
      }
    };
    float g_mean, gx_mean;
    auto second = [&](int c, const float* xv, const float* dv, float* cs) {  // dinp +=
      float wv[W], o[W];
      load_floats<W>(wv, weight + c);
      load_floats<W>(o, dx + c);
#pragma unroll
      for (int k = 0; k < W; k++) {
        const float xhat = (xv[k] - m) * s;
        o[k] += s * (wv[k] * dv[k] - g_mean - xhat * gx_mean);
        if constexpr (COLSUM) cs[k] += to_f32(from_f32<floatX>(o[k]));  // as stored
      }
      store_floats<W>(dx + c, o);
    };
    if constexpr (RK > 0) {
      HeldChunk<W> xh[RK], dh[RK];
#pragma unroll
      for (int j = 0; j < RK; j++) {
        const int c = lane * W + j * 32 * W;
        if (c < C) {
          xh[j] = load_held<W>(x + c);
          dh[j] = load_held<W>(dy + c);
          float xv[W], dv[W];
          held_floats<W>(xv, xh[j]);
          held_floats<W>(dv, dh[j]);
          first(c, xv, dv);
        }
      }
      g_mean = warp_reduce_sum(g_sum) / C;
      gx_mean = warp_reduce_sum(gx_sum) / C;
#pragma unroll
      for (int j = 0; j < RK; j++) {
        const int c = lane * W + j * 32 * W;
        if (c < C) {
          float xv[W], dv[W];
          held_floats<W>(xv, xh[j]);
          held_floats<W>(dv, dh[j]);
          second(c, xv, dv, colsum[COLSUM ? j : 0]);
        }
      }
    } else {  // the second pass re-reads x and dy (from L1 where they are still there)
      for (int c = lane * W; c < C; c += 32 * W) {
        float xv[W], dv[W];
        load_floats<W>(xv, x + c);
        load_floats<W>(dv, dy + c);
        first(c, xv, dv);
      }
      g_mean = warp_reduce_sum(g_sum) / C;
      gx_mean = warp_reduce_sum(gx_sum) / C;
      for (int c = lane * W; c < C; c += 32 * W) {
        float xv[W], dv[W];
        load_floats<W>(xv, x + c);
        load_floats<W>(dv, dy + c);
        second(c, xv, dv, nullptr);
      }
    }
  }
  __syncthreads();
  float* out = partials + (size_t)blockIdx.x * (COLSUM ? 3 : 2) * C;
  for (int i = threadIdx.x; i < 2 * C; i += blockDim.x) {
    const int half = i / C, c = i % C;  // half 0: dweight, 1: dbias
    const int j = c / (32 * W), rem = c % (32 * W);
    const int pos = half * Cp + j * 32 * W + (rem % W) * 32 + rem / W;
    float acc = 0.0f;
#pragma unroll
    for (int w = 0; w < kLayerNormBwdWarps; w++) acc += smem[(size_t)w * 2 * Cp + pos];
    out[i] = acc;
  }
  if constexpr (COLSUM) {  // the column sums through the (now read) dweight rows, in warp order
    __syncthreads();
#pragma unroll
    for (int j = 0; j < RK; j++)
#pragma unroll
      for (int k = 0; k < W; k++) dw_s[j * 32 * W + k * 32 + lane] = colsum[j][k];
    __syncthreads();
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
      const int j = c / (32 * W), rem = c % (32 * W);
      const int pos = j * 32 * W + (rem % W) * 32 + rem / W;
      float acc = 0.0f;
#pragma unroll
      for (int w = 0; w < kLayerNormBwdWarps; w++) acc += smem[(size_t)w * 2 * Cp + pos];
      out[2 * C + c] = acc;
    }
  }
}

template <int W, int RK, bool COLSUM>
void layernorm_backward_launch(floatX* dinp, float* partials, const floatX* dout,
                               const floatX* inp, const floatX* weight, const float* mean,
                               const float* rstd, int N, int C, cudaStream_t stream) {
  const int Cp = ceil_div(C, 32 * W) * 32 * W;
  const size_t smem = (size_t)kLayerNormBwdWarps * 2 * Cp * sizeof(float);
  const int block = 32 * kLayerNormBwdWarps;
  if (smem > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(layernorm_backward_kernel<W, RK, COLSUM>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  layernorm_backward_kernel<W, RK, COLSUM><<<kLayerNormBwdBlocks, block, smem, stream>>>(
      dinp, partials, dout, inp, weight, mean, rstd, N, C);
  CUDA_CHECK_LAUNCH();
}

// Rows of up to kLayerNormBwdHeldChunks chunks per lane (C <= 1024 bf16 on the 128-bit path)
// run the kernel that holds them in registers (RK = their chunks), longer ones the looping one
// (RK = 0), which cannot take the column sums (returns false: the caller sums after it).
constexpr int kLayerNormBwdHeldChunks = 4;
template <int W, bool COLSUM>
bool layernorm_backward_any(floatX* dinp, float* partials, const floatX* dout, const floatX* inp,
                            const floatX* weight, const float* mean, const float* rstd, int N,
                            int C, cudaStream_t stream) {
  static_assert(kLayerNormBwdHeldChunks == 4, "the cases below");
  switch (ceil_div(C, 32 * W)) {
#define LN_BWD_CASE(K)                                                                       \
  case K:                                                                                    \
    layernorm_backward_launch<W, K, COLSUM>(dinp, partials, dout, inp, weight, mean, rstd, N, \
                                            C, stream);                                      \
    return true;
    LN_BWD_CASE(1) LN_BWD_CASE(2) LN_BWD_CASE(3) LN_BWD_CASE(4)
#undef LN_BWD_CASE
    default:
      layernorm_backward_launch<W, 0, false>(dinp, partials, dout, inp, weight, mean, rstd, N, C,
                                             stream);
      return !COLSUM;
  }
}

template <int W>
bool layernorm_forward_reg(floatX* out, float* mean, float* rstd, const floatX* inp,
                           const floatX* weight, const floatX* bias, int N, int C, int grid,
                           int block, cudaStream_t stream) {
  switch (ceil_div(C, 32 * W)) {
#define LN_FWD_CASE(K)                                                                       \
  case K:                                                                                    \
    layernorm_forward_reg_kernel<W, K><<<grid, block, 0, stream>>>(out, mean, rstd, inp,     \
                                                                   weight, bias, N, C);      \
    return true;
    LN_FWD_CASE(1) LN_FWD_CASE(2) LN_FWD_CASE(3) LN_FWD_CASE(4)
    LN_FWD_CASE(5) LN_FWD_CASE(6) LN_FWD_CASE(7) LN_FWD_CASE(8)
#undef LN_FWD_CASE
    default:
      return false;
  }
}

}  // namespace

void layernorm_forward(floatX* out, float* mean, float* rstd, const floatX* inp,
                       const floatX* weight, const floatX* bias, int N, int C,
                       cudaStream_t stream) {
  const bool vec = C % x128::size == 0 && aligned16(out) && aligned16(inp) &&
                   aligned16(weight) && aligned16(bias);
  const int block = 256, rows_per_block = block / 32, grid = ceil_div(N, rows_per_block);
  // Rows up to 8 chunks per lane (C <= 2048 bf16 on the 128-bit path, 256 scalar) live in
  // registers; longer rows loop, re-reading from L1.
  const bool reg = vec ? layernorm_forward_reg<x128::size>(out, mean, rstd, inp, weight, bias, N,
                                                           C, grid, block, stream)
                       : layernorm_forward_reg<1>(out, mean, rstd, inp, weight, bias, N, C, grid,
                                                  block, stream);
  if (reg) {
    CUDA_CHECK_LAUNCH();
    return;
  }
  if (vec)
    layernorm_forward_kernel<x128::size><<<ceil_div(N, rows_per_block), block, 0, stream>>>(
        out, mean, rstd, inp, weight, bias, N, C);
  else
    layernorm_forward_kernel<1><<<ceil_div(N, rows_per_block), block, 0, stream>>>(
        out, mean, rstd, inp, weight, bias, N, C);
  CUDA_CHECK_LAUNCH();
}

void layernorm_backward(floatX* dinp, float* dweight, float* dbias, const floatX* dout,
                        const floatX* inp, const floatX* weight, const float* mean,
                        const float* rstd, int N, int C, float* scratch, cudaStream_t stream,
                        float* dinp_colsum) {
  const bool vec = C % x128::size == 0 && aligned16(dinp) && aligned16(dout) && aligned16(inp) &&
                   aligned16(weight);
  bool colsum = false;
  if (dinp_colsum)
    colsum = vec ? layernorm_backward_any<x128::size, true>(dinp, scratch, dout, inp, weight, mean,
                                                            rstd, N, C, stream)
                 : layernorm_backward_any<1, true>(dinp, scratch, dout, inp, weight, mean, rstd,
                                                   N, C, stream);
  else if (vec)
    layernorm_backward_any<x128::size, false>(dinp, scratch, dout, inp, weight, mean, rstd, N, C,
                                              stream);
  else
    layernorm_backward_any<1, false>(dinp, scratch, dout, inp, weight, mean, rstd, N, C, stream);
  reduce_partials(dweight, dbias, scratch, kLayerNormBwdBlocks, C, (colsum ? 3 : 2) * C, stream,
                  colsum ? dinp_colsum : nullptr);
  if (dinp_colsum && !colsum) column_sums(dinp_colsum, dinp, N, C, 1.0f, scratch, stream);
}
