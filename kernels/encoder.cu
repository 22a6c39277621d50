// encoder.cu — see encoder.cuh for what it computes and the deterministic backward scheme.
#include "kernels/encoder.cuh"

#include <cub/device/device_radix_sort.cuh>

namespace {

template <bool VEC>
__global__ void encoder_forward_kernel(floatX* out, const int* inp, const floatX* wte,
                                       const floatX* wpe, int B, int T, int C) {
  constexpr int W = VEC ? x128::size : 1;
  const int groups = C / W;
  const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= (size_t)B * T * groups) return;
  const int bt = (int)(idx / groups), c = (int)(idx % groups) * W, t = bt % T;
  const int tok = inp[bt];
  if constexpr (VEC) {
    x128 a = load128(wte + (size_t)tok * C + c), o = a;
    if (wpe != nullptr) {  // uniform over the grid
      x128 p = load128(wpe + (size_t)t * C + c);
#pragma unroll
      for (int k = 0; k < W; k++) o[k] = from_f32<floatX>(to_f32(a[k]) + to_f32(p[k]));
    }
    store128(out + (size_t)bt * C + c, o);
  } else {
    const floatX a = wte[(size_t)tok * C + c];
    out[(size_t)bt * C + c] =
        wpe == nullptr ? a : from_f32<floatX>(to_f32(a) + to_f32(wpe[(size_t)t * C + c]));
  }
}

// dwpe[t, c..c+W) += sum_b dout[b, t, c..c+W), b in order.
template <bool VEC>
__global__ void encoder_backward_wpe_kernel(float* dwpe, const floatX* dout, int B, int T, int C) {
  constexpr int W = VEC ? x128::size : 1;
  const int groups = C / W;
  const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= (size_t)T * groups) return;
  const int t = (int)(idx / groups), c = (int)(idx % groups) * W;
  float acc[W] = {};
  for (int b = 0; b < B; b++) {
    const floatX* d = dout + ((size_t)b * T + t) * C + c;
    float v[W];
    load_floats<W, true>(v, d);
#pragma unroll
    for (int k = 0; k < W; k++) acc[k] += v[k];
  }
  float* o = dwpe + (size_t)t * C + c;
#pragma unroll
  for (int k = 0; k < W; k++) o[k] += acc[k];
}

__global__ void iota_kernel(int* v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) v[i] = i;
}

// One block per sorted index s; only the first index of each run of equal tokens works.
template <bool VEC>
__global__ void encoder_backward_wte_kernel(float* dwte, const floatX* dout, const int* tok_sorted,
                                            const int* pos_sorted, int N, int C) {
  constexpr int W = VEC ? x128::size : 1;
  const int s = blockIdx.x;
  const int tok = tok_sorted[s];
  if (s > 0 && tok_sorted[s - 1] == tok) return;
  int end = s + 1;
  while (end < N && tok_sorted[end] == tok) end++;
  for (int c = threadIdx.x * W; c < C; c += blockDim.x * W) {
    float acc[W] = {};
    for (int j = s; j < end; j++) {
      const floatX* d = dout + (size_t)pos_sorted[j] * C + c;
      if constexpr (VEC) {
        x128 v = load128(d);
#pragma unroll
        for (int k = 0; k < W; k++) acc[k] += to_f32(v[k]);
      } else {
        acc[0] += to_f32(d[0]);
      }
    }
    float* o = dwte + (size_t)tok * C + c;
#pragma unroll
    for (int k = 0; k < W; k++) o[k] += acc[k];
  }
}

struct SortScratch {
  int *tok_sorted, *pos_in, *pos_sorted;
  void* cub_tmp;
  size_t cub_bytes;
};
// The layout encoder_backward_scratch_bytes (encoder.h) sizes.
SortScratch carve(void* scratch, int B, int T) {
  const int N = B * T;
  char* p = (char*)scratch;
  SortScratch s;
  size_t nb = align256((size_t)N * sizeof(int));
  s.tok_sorted = (int*)p;
  s.pos_in = (int*)(p + nb);
  s.pos_sorted = (int*)(p + 2 * nb);
  s.cub_tmp = p + 3 * nb;
  s.cub_bytes = encoder_sort_temp_bytes(B, T);
  return s;
}

}  // namespace

void encoder_forward(floatX* out, const int* inp, const floatX* wte, const floatX* wpe, int B,
                     int T, int C, cudaStream_t stream) {
  const bool vec = C % x128::size == 0 && aligned16(out) && aligned16(wte) && aligned16(wpe);
  const size_t work = (size_t)B * T * (vec ? C / x128::size : C);
  const int block = 256;
  if (vec)
    encoder_forward_kernel<true><<<ceil_div(work, (size_t)block), block, 0, stream>>>(
        out, inp, wte, wpe, B, T, C);
  else
    encoder_forward_kernel<false><<<ceil_div(work, (size_t)block), block, 0, stream>>>(
        out, inp, wte, wpe, B, T, C);
  CUDA_CHECK_LAUNCH();
}

size_t encoder_sort_temp_bytes(int B, int T) {
  size_t bytes = 0;
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, (const int*)nullptr, (int*)nullptr,
                                             (const int*)nullptr, (int*)nullptr, B * T));
  return bytes;
}

void encoder_backward(float* dwte, float* dwpe, const floatX* dout, const int* inp, int B, int T,
                      int C, void* scratch, cudaStream_t stream) {
  const int N = B * T;
  const bool vec = C % x128::size == 0 && aligned16(dout) && aligned16(dwte) && aligned16(dwpe);
  const int W = vec ? x128::size : 1;
  // dwpe (none without learned positions)
  if (dwpe != nullptr) {
    const size_t work = (size_t)T * (C / W);
    const int block = 256;
    if (vec)
      encoder_backward_wpe_kernel<true><<<ceil_div(work, (size_t)block), block, 0, stream>>>(
          dwpe, dout, B, T, C);
    else
      encoder_backward_wpe_kernel<false><<<ceil_div(work, (size_t)block), block, 0, stream>>>(
          dwpe, dout, B, T, C);
    CUDA_CHECK_LAUNCH();
  }
  // dwte: stable sort of (token, position), then one block per run of equal tokens.
  SortScratch s = carve(scratch, B, T);
  iota_kernel<<<ceil_div(N, 256), 256, 0, stream>>>(s.pos_in, N);
  CUDA_CHECK_LAUNCH();
  size_t bytes = s.cub_bytes;
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(s.cub_tmp, bytes, inp, s.tok_sorted, s.pos_in,
                                             s.pos_sorted, N, 0, 8 * (int)sizeof(int), stream));
  const int threads = std::min(256, std::max(32, ceil_div(C / W, 32) * 32));
  if (vec)
    encoder_backward_wte_kernel<true><<<N, threads, 0, stream>>>(dwte, dout, s.tok_sorted,
                                                                 s.pos_sorted, N, C);
  else
    encoder_backward_wte_kernel<false><<<N, threads, 0, stream>>>(dwte, dout, s.tok_sorted,
                                                                  s.pos_sorted, N, C);
  CUDA_CHECK_LAUNCH();
}
