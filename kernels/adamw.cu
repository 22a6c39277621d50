// adamw.cu — see adamw.cuh.
#include "kernels/adamw.cuh"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace {

struct AdamWArgs {
  float lr, beta1, beta2, eps, clip, bc1, bc2;
};

constexpr int kThreads = 256, kBlockElems = 4 * kThreads;  // a block: 1024 elements of a piece

// The pieces by value (kernel parameters), with the first block of each: block b updates
// elements [(b - first_block[k]) * kBlockElems, +kBlockElems) of the piece k it falls in.
struct AdamWLaunch {
  AdamWPiece piece[kAdamWMaxPieces];
  int first_block[kAdamWMaxPieces + 1];
  bool vec[kAdamWMaxPieces];  // 128-bit path: all five pointers of the piece aligned
  int num_pieces;
};

__device__ __forceinline__ float adamw_one(float p, float g, float& m, float& v, float gs, float wd,
                                           const AdamWArgs& a) {
  g *= gs;
  m = a.beta1 * m + (1.0f - a.beta1) * g;
  v = a.beta2 * v + (1.0f - a.beta2) * g * g;
  return p - a.lr * ((m / a.bc1) / (sqrtf(v / a.bc2) + a.eps) + wd * p);
}

// Vector pieces: thread i takes elements 4i..4i+3 of the block's 1024 by 128-bit loads and
// stores (params_x by 64 bits); the piece's last n % 4 elements one at a time. Other pieces:
// elements i, i + 256, ... one at a time (coalesced).
__global__ void __launch_bounds__(kThreads) adamw_kernel(float* params, floatX* params_x,
                                                         const float* grads, float* m, float* v,
                                                         const double* norm_squared, AdamWArgs a,
                                                         const __grid_constant__ AdamWLaunch L) {
  const float norm = grad_norm_from_squared(*norm_squared);
  if (!isfinite(norm)) return;  // diverged: the trainer stops; nothing is changed
  const float gs = clip_scale(norm, a.clip);
  int k = 0;
  while (k + 1 < L.num_pieces && (int)blockIdx.x >= L.first_block[k + 1]) k++;
  const AdamWPiece pc = L.piece[k];
  const size_t e0 = (size_t)((int)blockIdx.x - L.first_block[k]) * kBlockElems;
  float* P = params + pc.begin;
  floatX* PX = params_x ? params_x + pc.begin : nullptr;
  const float* G = grads + pc.begin;
  float* M = m + pc.opt_offset;
  float* V = v + pc.opt_offset;
  const float wd = pc.weight_decay;
  if (L.vec[k]) {
    const size_t e = e0 + 4 * threadIdx.x;
    if (e + 4 <= pc.count) {
      const size_t i = e / 4;
      float4 p = reinterpret_cast<const float4*>(P)[i];
      const float4 g = __ldcs(reinterpret_cast<const float4*>(G) + i);
      float4 mi = reinterpret_cast<const float4*>(M)[i], vi = reinterpret_cast<const float4*>(V)[i];
      p.x = adamw_one(p.x, g.x, mi.x, vi.x, gs, wd, a);
      p.y = adamw_one(p.y, g.y, mi.y, vi.y, gs, wd, a);
      p.z = adamw_one(p.z, g.z, mi.z, vi.z, gs, wd, a);
      p.w = adamw_one(p.w, g.w, mi.w, vi.w, gs, wd, a);
      reinterpret_cast<float4*>(M)[i] = mi;
      reinterpret_cast<float4*>(V)[i] = vi;
      reinterpret_cast<float4*>(P)[i] = p;
      if (PX) {
        floatX px[4] = {from_f32<floatX>(p.x), from_f32<floatX>(p.y), from_f32<floatX>(p.z),
                        from_f32<floatX>(p.w)};
        if constexpr (sizeof(floatX) == 2)
          reinterpret_cast<uint2*>(PX)[i] = *reinterpret_cast<const uint2*>(px);
        else
          reinterpret_cast<float4*>(PX)[i] = *reinterpret_cast<const float4*>(px);
      }
    } else {
      for (size_t j = e; j < pc.count && j < e + 4; j++) {
        const float pn = adamw_one(P[j], G[j], M[j], V[j], gs, wd, a);
        P[j] = pn;
        if (PX) PX[j] = from_f32<floatX>(pn);
      }
    }
  } else {
    for (size_t j = e0 + threadIdx.x; j < pc.count && j < e0 + kBlockElems; j += kThreads) {
      const float pn = adamw_one(P[j], G[j], M[j], V[j], gs, wd, a);
      P[j] = pn;
      if (PX) PX[j] = from_f32<floatX>(pn);
    }
  }
}

__global__ void copy_float_to_floatX_kernel(floatX* out, const float* in, size_t n) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = from_f32<floatX>(in[i]);
}

}  // namespace

void adamw_update(float* params, floatX* params_x, const float* grads, float* m, float* v,
                  const AdamWPiece* pieces, int num_pieces, const double* norm_squared, float clip,
                  float lr, float beta1, float beta2, float eps, int t, cudaStream_t stream) {
  CHECK(t >= 1, "adamw: step t=%d must count from 1", t);
  CHECK(num_pieces >= 0 && num_pieces <= kAdamWMaxPieces,
        "internal: adamw_update takes at most %d pieces, got %d", kAdamWMaxPieces, num_pieces);
  AdamWLaunch L{};
  size_t blocks = 0;
  for (int k = 0; k < num_pieces; k++) {
    const AdamWPiece& pc = pieces[k];
    L.piece[L.num_pieces] = pc;
    L.first_block[L.num_pieces] = (int)blocks;
    L.vec[L.num_pieces] = aligned16(params + pc.begin) && aligned16(grads + pc.begin) &&
                          aligned16(m + pc.opt_offset) && aligned16(v + pc.opt_offset) &&
                          (params_x == nullptr ||
                           (uintptr_t)(params_x + pc.begin) % (4 * sizeof(floatX)) == 0);
    blocks += ceil_div(pc.count, (size_t)kBlockElems);
    if (pc.count > 0) L.num_pieces++;
  }
  CHECK(blocks < (size_t)INT32_MAX, "internal: adamw_update over %zu blocks", blocks);
  L.first_block[L.num_pieces] = (int)blocks;
  if (blocks == 0) return;
  const AdamWArgs a{lr, beta1, beta2, eps, clip, (float)(1.0 - std::pow((double)beta1, t)),
                    (float)(1.0 - std::pow((double)beta2, t))};
  adamw_kernel<<<(unsigned)blocks, kThreads, 0, stream>>>(params, params_x, grads, m, v,
                                                          norm_squared, a, L);
  CUDA_CHECK_LAUNCH();
}

void copy_float_to_floatX(floatX* out, const float* in, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  copy_float_to_floatX_kernel<<<ceil_div(n, (size_t)256), 256, 0, stream>>>(out, in, n);
  CUDA_CHECK_LAUNCH();
}
