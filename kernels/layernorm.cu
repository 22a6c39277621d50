// layernorm.cu — see layernorm.cuh.
#include "kernels/layernorm.cuh"

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

template <int W>
__global__ void __launch_bounds__(32 * kLayerNormBwdWarps)
    layernorm_backward_kernel(floatX* dinp, float* partials, const floatX* dout, const floatX* inp,
                              const floatX* weight, const float* mean, const float* rstd, int N,
                              int C) {
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
  for (int row = blockIdx.x * kLayerNormBwdWarps + warp; row < N;
       row += gridDim.x * kLayerNormBwdWarps) {
    const floatX* x = inp + (size_t)row * C;
    const floatX* dy = dout + (size_t)row * C;
    const float m = mean[row], s = rstd[row];
    float g_sum = 0.0f, gx_sum = 0.0f;
    for (int c = lane * W; c < C; c += 32 * W) {
      float xv[W], dv[W], wv[W];
      load_floats<W>(xv, x + c);
      load_floats<W>(dv, dy + c);
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
    }
    const float g_mean = warp_reduce_sum(g_sum) / C, gx_mean = warp_reduce_sum(gx_sum) / C;
    floatX* dx = dinp + (size_t)row * C;
    for (int c = lane * W; c < C; c += 32 * W) {
      float xv[W], dv[W], wv[W], o[W];
      load_floats<W>(xv, x + c);
      load_floats<W>(dv, dy + c);
      load_floats<W>(wv, weight + c);
      load_floats<W>(o, dx + c);
#pragma unroll
      for (int k = 0; k < W; k++) {
        const float xhat = (xv[k] - m) * s;
        o[k] += s * (wv[k] * dv[k] - g_mean - xhat * gx_mean);
      }
      store_floats<W>(dx + c, o);
    }
  }
  __syncthreads();
  float* out = partials + (size_t)blockIdx.x * 2 * C;
  for (int i = threadIdx.x; i < 2 * C; i += blockDim.x) {
    const int half = i / C, c = i % C;  // half 0: dweight, 1: dbias
    const int j = c / (32 * W), rem = c % (32 * W);
    const int pos = half * Cp + j * 32 * W + (rem % W) * 32 + rem / W;
    float acc = 0.0f;
#pragma unroll
    for (int w = 0; w < kLayerNormBwdWarps; w++) acc += smem[(size_t)w * 2 * Cp + pos];
    out[i] = acc;
  }
}

template <int W>
void layernorm_backward_launch(floatX* dinp, float* partials, const floatX* dout,
                               const floatX* inp, const floatX* weight, const float* mean,
                               const float* rstd, int N, int C, cudaStream_t stream) {
  const int Cp = ceil_div(C, 32 * W) * 32 * W;
  const size_t smem = (size_t)kLayerNormBwdWarps * 2 * Cp * sizeof(float);
  const int block = 32 * kLayerNormBwdWarps;
  if (smem > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(layernorm_backward_kernel<W>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  layernorm_backward_kernel<W><<<kLayerNormBwdBlocks, block, smem, stream>>>(
      dinp, partials, dout, inp, weight, mean, rstd, N, C);
  CUDA_CHECK_LAUNCH();
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
                        const float* rstd, int N, int C, float* scratch, cudaStream_t stream) {
  const bool vec = C % x128::size == 0 && aligned16(dinp) && aligned16(dout) && aligned16(inp) &&
                   aligned16(weight);
  if (vec)
    layernorm_backward_launch<x128::size>(dinp, scratch, dout, inp, weight, mean, rstd, N, C,
                                          stream);
  else
    layernorm_backward_launch<1>(dinp, scratch, dout, inp, weight, mean, rstd, N, C, stream);
  reduce_partials(dweight, dbias, scratch, kLayerNormBwdBlocks, C, 2 * C, stream);
}
