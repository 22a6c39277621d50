// decode.cu — see decode.cuh for the algorithm (flash-decoding: split-K partials + combine).
#include "kernels/attention/decode.cuh"

#include <algorithm>
#include <cmath>

namespace {

constexpr int kMaxGQ = kDecodeMaxGQ;    // query heads of one kv head per block (register budget)
constexpr int kE = kDecodeLaneDims;     // head dims per lane
constexpr int kMaxSplits = kDecodeMaxSplits;  // also the combine kernel's shared weight array
constexpr int kCombineThreads = 1024;  // combine block: 32 dims x 32 split rows
constexpr float kLog2e = 1.4426950408889634f;

// Pass-1 configuration per head size and query heads per block (GQ).
//   Threads: block size. KU: keys per key group per step (2*KU 128-bit loads issued before
//   any is used).
// Tuning (H100 80GB HBM3, bf16, n = 131072, median of 40 calls, K/V rotated past L2; the
// numbers include the combine kernel):
//   GQ = 1: 128 threads, KU = 2 (48-64 registers, many blocks per SM): NH=NKV=12 HS=64 147 us,
//           2.7 TB/s; HS=128 281 us, 2.86 TB/s. KU = 4 (96 registers) was 163 us / 301 us.
//   GQ = 4: 256 threads, KU = 4 (GQA NH=12 NKV=4 HS=128: 127 us, 2.1 TB/s; NH=32 NKV=8:
//           249 us, 2.15 TB/s). 128 threads KU = 4: 153 us; 128 threads KU = 8: 131 us;
//           256 threads KU = 8: 135 us. MQA (NH=12, NKV=1) is bound by the per-key score
//           work, not by bytes: 54 us for 34 MB.
template <int HS, int GQ>
struct DecodeTraits {
  static constexpr int Threads = decode_threads(GQ);  // sizes: decode.h
  static constexpr int KU = decode_keys_per_group(GQ);
  static constexpr int L = HS / kE;            // lanes per key group
  static constexpr int NG = Threads / L;       // key groups per block
  static constexpr int kStep = NG * KU;        // keys per block step
  static_assert(HS % kE == 0 && L >= 1 && L <= 32 && 32 % L == 0, "HS/8 lanes must tile a warp");
  static_assert(kE % x128::size == 0, "a lane's dims are whole 128-bit chunks");
  static_assert(HS % 32 == 0, "combine: blocks of 32 dims");
  static_assert(GQ * NG * HS * 4 <= 32 * 1024, "shared merge buffer");
  static_assert(kStep == decode_step(HS, GQ), "decode.h sizes the scratch by this step");
};

constexpr int kLoads = kE / x128::size;  // 128-bit loads per lane per row (1 bf16, 2 fp32)

__device__ __forceinline__ void load_row(x128 (&r)[kLoads], const floatX* p) {
#pragma unroll
  for (int c = 0; c < kLoads; c++) r[c] = load128(p + c * x128::size);
}
__device__ __forceinline__ float elem(const x128 (&r)[kLoads], int e) {
  return to_f32(r[e / x128::size][e % x128::size]);
}

// Pass 1: one block per (kv head g, query-head group hc) x split; see decode.cuh.
//   part_acc (NH, S, HS) un-normalised sum of 2^(s_j - m) v_j over the split's keys
//   part_ml  (NH, S, 2)  m (base-2 max of the scaled scores) and l = sum 2^(s_j - m)
// GQ: query heads per block (1, 2 or 4 = min(4, G) rounded up to a power of two); the block
// does gq = min(GQ, G - hc*GQ) of them. GQ = 1 (no GQA) needs far fewer registers (more
// blocks per SM) than GQ = 4.
template <int HS, int GQ>
__global__ void __launch_bounds__(DecodeTraits<HS, GQ>::Threads)
    decode_partial_kernel(float* part_acc, float* part_ml, const floatX* q, const floatX* k_cache,
                          const floatX* v_cache, int n, int first, int slots, int NH, int NKV,
                          int chunk, int S, float qscale) {
  using Tr = DecodeTraits<HS, GQ>;
  constexpr int L = Tr::L, NG = Tr::NG, KU = Tr::KU, Threads = Tr::Threads;
  __shared__ float sm_m[GQ][NG], sm_l[GQ][NG];
  __shared__ float sm_acc[GQ][NG][HS];  // GQ * Threads * 32 bytes whatever HS

  const int G = NH / NKV, hchunks = (G + GQ - 1) / GQ;
  const int g = blockIdx.x / hchunks, hc = blockIdx.x % hchunks;
  const int h0 = g * G + hc * GQ, gq = min(GQ, G - hc * GQ);
  const int split = blockIdx.y;
  const int j0 = split * chunk, j1 = min(n, j0 + chunk);  // j0 < n: S = ceil(n / chunk)
  const int kg = threadIdx.x / L, d0 = (threadIdx.x % L) * kE;

  float qr[GQ][kE], acc[GQ][kE], m[GQ], l[GQ];
#pragma unroll
  for (int qi = 0; qi < GQ; qi++) {
    if (qi < gq) {
      x128 r[kLoads];
      load_row(r, q + (size_t)(h0 + qi) * HS + d0);
#pragma unroll
      for (int e = 0; e < kE; e++) qr[qi][e] = elem(r, e) * qscale;
    } else {
#pragma unroll
      for (int e = 0; e < kE; e++) qr[qi][e] = 0.0f;
    }
#pragma unroll
    for (int e = 0; e < kE; e++) acc[qi][e] = 0.0f;
    m[qi] = -INFINITY;
    l[qi] = 0.0f;
  }

  const size_t row = (size_t)NKV * HS;  // elements between consecutive positions
  const floatX* kb = k_cache + (size_t)g * HS + d0;
  const floatX* vb = v_cache + (size_t)g * HS + d0;
  // jb is uniform over the block, so every lane reaches every shuffle; keys past j1 are masked.
  for (int jb = j0; jb < j1; jb += Tr::kStep) {
    x128 kr[KU][kLoads], vr[KU][kLoads];
    bool valid[KU];
#pragma unroll
    for (int u = 0; u < KU; u++) {
      const int j = jb + u * NG + kg;
      valid[u] = j < j1;
      if (valid[u]) {
        const int slot = first + j < slots ? first + j : first + j - slots;  // j < n <= slots
        load_row(kr[u], kb + (size_t)slot * row);
        load_row(vr[u], vb + (size_t)slot * row);
      } else {
#pragma unroll
        for (int c = 0; c < kLoads; c++)
#pragma unroll
          for (int k = 0; k < x128::size; k++) kr[u][c][k] = vr[u][c][k] = from_f32<floatX>(0.0f);
      }
    }
#pragma unroll
    for (int qi = 0; qi < GQ; qi++) {
      if (qi >= gq) break;  // gq is uniform over the block
      float s[KU];
#pragma unroll
      for (int u = 0; u < KU; u++) {
        float d = 0.0f;
#pragma unroll
        for (int e = 0; e < kE; e++) d += qr[qi][e] * elem(kr[u], e);
#pragma unroll
        for (int o = L / 2; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
        s[u] = valid[u] ? d : -INFINITY;
      }
      float m_new = m[qi];
#pragma unroll
      for (int u = 0; u < KU; u++) m_new = fmaxf(m_new, s[u]);
      // Nothing seen yet (m_new = -inf): subtract 0 instead, so that c = p = 2^-inf = 0, no NaN.
      const float base = m_new == -INFINITY ? 0.0f : m_new;
      const float c = exp2f(m[qi] - base);
      float p[KU], psum = 0.0f;
#pragma unroll
      for (int u = 0; u < KU; u++) {
        p[u] = exp2f(s[u] - base);
        psum += p[u];
      }
      l[qi] = l[qi] * c + psum;
#pragma unroll
      for (int e = 0; e < kE; e++) {
        float a = acc[qi][e] * c;
#pragma unroll
        for (int u = 0; u < KU; u++) a += p[u] * elem(vr[u], e);
        acc[qi][e] = a;
      }
      m[qi] = m_new;
    }
  }

  // Merge the NG key groups' partials (shared memory), write the block's partial.
#pragma unroll
  for (int qi = 0; qi < GQ; qi++) {
    if (qi >= gq) break;
    if (d0 == 0) {
      sm_m[qi][kg] = m[qi];
      sm_l[qi][kg] = l[qi];
    }
#pragma unroll
    for (int e = 0; e < kE; e++) sm_acc[qi][kg][d0 + e] = acc[qi][e];
  }
  __syncthreads();
  for (int t = threadIdx.x; t < gq * HS; t += Threads) {
    const int qi = t / HS, d = t % HS;
    float M = -INFINITY;
    for (int k = 0; k < NG; k++) M = fmaxf(M, sm_m[qi][k]);
    // M is finite: key j0 < n is valid for key group 0. Empty groups (m = -inf) weigh 0.
    float A = 0.0f, Ls = 0.0f;
    for (int k = 0; k < NG; k++) {
      const float w = exp2f(sm_m[qi][k] - M);
      A += w * sm_acc[qi][k][d];
      Ls += w * sm_l[qi][k];
    }
    const size_t o = (size_t)(h0 + qi) * S + split;
    part_acc[o * HS + d] = A;
    if (d == 0) {
      part_ml[o * 2 + 0] = M;
      part_ml[o * 2 + 1] = Ls;
    }
  }
}

// Pass 2: one block per (query head h, 32 dims d0..d0+31); 32 rows of 32 threads.
//   M = max_s m_s; w_s = 2^(m_s - M); out[h, d] = sum_s w_s acc_s[d] / sum_s w_s l_s.
// Row r sums the splits s = r, r + 32, ... (unrolled, so several loads are in flight), then
// row 0 adds the 32 row sums in order: deterministic.
__global__ void __launch_bounds__(kCombineThreads)
    decode_combine_kernel(floatX* out, const float* part_acc, const float* part_ml, int S,
                          int HS) {
  constexpr int kRows = kCombineThreads / 32;
  __shared__ float sm_w[kMaxSplits];
  __shared__ float sm_red[kRows][33];
  const int h = blockIdx.x, c = threadIdx.x % 32, r = threadIdx.x / 32;
  const int d = blockIdx.y * 32 + c;
  const float* ml = part_ml + (size_t)h * S * 2;
  float M = -INFINITY;
  for (int s = threadIdx.x; s < S; s += kCombineThreads) M = fmaxf(M, ml[2 * s]);
  M = block_reduce_max(M);
  float Ls = 0.0f;
  for (int s = threadIdx.x; s < S; s += kCombineThreads) {
    const float w = exp2f(ml[2 * s] - M);
    sm_w[s] = w;
    Ls += w * ml[2 * s + 1];
  }
  Ls = block_reduce_sum(Ls);
  __syncthreads();  // sm_w complete
  const float* acc = part_acc + (size_t)h * S * HS + d;
  float A = 0.0f;
#pragma unroll 4
  for (int s = r; s < S; s += kRows) A += sm_w[s] * acc[(size_t)s * HS];
  sm_red[r][c] = A;
  __syncthreads();
  if (r == 0) {
    float a = 0.0f;
    for (int k = 0; k < kRows; k++) a += sm_red[k][c];
    out[(size_t)h * HS + d] = from_f32<floatX>(a / Ls);
  }
}

// Query heads per block for a GQA group of G.
int decode_gq(int G) { return G == 1 ? 1 : G == 2 ? 2 : kMaxGQ; }

template <int HS, int GQ>
int partial_blocks_per_sm() {
  static int n = 0;  // per instantiation, per process (one device model assumed)
  if (n == 0)
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, decode_partial_kernel<HS, GQ>,
                                                             DecodeTraits<HS, GQ>::Threads, 0));
  return std::max(n, 1);
}

// Splits for n keys: two waves of pass-1 blocks over the GPU (blocks per SM from the
// occupancy of this instantiation), chunk a multiple of the step (every block runs whole
// steps, the last one masked), at most kMaxSplits; every split non-empty.
void plan_splits(int n, int hchunks, int step, int blocks_per_sm, int* S, int* chunk) {
  const int target = 2 * blocks_per_sm * cuda_num_sms();
  const int want = std::max(1, std::min(kMaxSplits, ceil_div(target, hchunks)));
  *chunk = ceil_div(ceil_div(n, want), step) * step;
  *S = ceil_div(n, *chunk);
}

template <int HS, int GQ>
void run_decode(floatX* out, const floatX* q, const floatX* k_cache, const floatX* v_cache,
                int n, int first, int slots, int NH, int NKV, void* scratch, cudaStream_t stream) {
  const int hchunks = NKV * ceil_div(NH / NKV, GQ);
  int S = 0, chunk = 0;
  plan_splits(n, hchunks, DecodeTraits<HS, GQ>::kStep, partial_blocks_per_sm<HS, GQ>(), &S,
              &chunk);
  float* part_acc = (float*)scratch;
  float* part_ml = (float*)((char*)scratch + align256((size_t)NH * S * HS * sizeof(float)));
  const float qscale = kLog2e / std::sqrt((float)HS);
  decode_partial_kernel<HS, GQ><<<dim3(hchunks, S), DecodeTraits<HS, GQ>::Threads, 0, stream>>>(
      part_acc, part_ml, q, k_cache, v_cache, n, first, slots, NH, NKV, chunk, S, qscale);
  CUDA_CHECK_LAUNCH();
  decode_combine_kernel<<<dim3(NH, HS / 32), kCombineThreads, 0, stream>>>(out, part_acc, part_ml,
                                                                          S, HS);
  CUDA_CHECK_LAUNCH();
}

template <int HS>
void run_decode_hs(floatX* out, const floatX* q, const floatX* k_cache, const floatX* v_cache,
                   int n, int first, int slots, int NH, int NKV, void* scratch,
                   cudaStream_t stream) {
  switch (decode_gq(NH / NKV)) {
    case 1:
      run_decode<HS, 1>(out, q, k_cache, v_cache, n, first, slots, NH, NKV, scratch, stream);
      break;
    case 2:
      run_decode<HS, 2>(out, q, k_cache, v_cache, n, first, slots, NH, NKV, scratch, stream);
      break;
    default:
      run_decode<HS, kMaxGQ>(out, q, k_cache, v_cache, n, first, slots, NH, NKV, scratch, stream);
      break;
  }
}

}  // namespace

void attention_decode(floatX* out, const floatX* q, const floatX* k_cache, const floatX* v_cache,
                      int n, int NH, int NKV, int HS, void* scratch, cudaStream_t stream) {
  attention_decode_ring(out, q, k_cache, v_cache, n, 0, std::max(n, 1), NH, NKV, HS, scratch,
                        stream);
}

void attention_decode_ring(floatX* out, const floatX* q, const floatX* k_cache,
                           const floatX* v_cache, int n, int first, int slots, int NH, int NKV,
                           int HS, void* scratch, cudaStream_t stream) {
  CHECK(n >= 1 && NH >= 1 && NKV >= 1, "attention_decode: bad shape n=%d NH=%d NKV=%d", n, NH,
        NKV);
  CHECK(n <= slots && first >= 0 && first < slots,
        "attention_decode: %d keys from row %d of a ring of %d rows", n, first, slots);
  CHECK(NH % NKV == 0, "attention_decode: NH=%d is not a multiple of NKV=%d", NH, NKV);
  CHECK(decode_min_step(HS) > 0,
        "attention_decode: head size HS=%d is not supported (32, 64, 128 or 256)", HS);
  CHECK(aligned16(q) && aligned16(k_cache) && aligned16(v_cache) && aligned16(scratch) &&
            scratch != nullptr,
        "attention_decode: q, k_cache, v_cache and scratch must be 16-byte aligned device "
        "pointers (scratch non-null)");
  switch (HS) {
#define FLASHGPT_DECODE_HS(hs)                                                                  \
  case hs:                                                                                     \
    run_decode_hs<hs>(out, q, k_cache, v_cache, n, first, slots, NH, NKV, scratch, stream);    \
    break;
    FLASHGPT_DECODE_HS(32) FLASHGPT_DECODE_HS(64) FLASHGPT_DECODE_HS(128) FLASHGPT_DECODE_HS(256)
#undef FLASHGPT_DECODE_HS
  }
}
