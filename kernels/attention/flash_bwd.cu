// flash_bwd.cu — FlashAttention-2 backward by recomputation, causal, on Hopper tensor cores
// (bf16 inputs, fp32 accumulate, wgmma warpgroup MMAs). Nothing T x T is ever stored. Shared by
// the "flash" and "flash3" backends (flash3 differs in its forward only).
//
// Computes dqkv (B, T, NH + 2*NKV, HS) (overwritten) from dO = dout (B, T, NH, HS), the
// forward's inputs qkv, output O = out and saved LSE (B, NH, T), scale = 1/sqrt(HS), causal,
// query head h using kv head h / (NH/NKV). dK and dV of a kv head sum over its NH/NKV query
// heads inside one thread block (no expanded per-query-head buffers).
//
// Algorithm (paper notation; Br query rows per Q tile, Bc = 128 key rows per K/V tile):
//   1. flash_bwd_dot_kernel:   D_i = rowsum(dO_i o O_i) (fp32), dQacc = 0 (and, deterministic,
//                              the dQ-order semaphores = 0; flash3: the semaphores are its dQ
//                              tickets and dQacc is left to its first partials' stores)
//   2. flash_bwd_wg_kernel (flash_bwd_wgmma.cuh): one thread block per (K/V tile j, kv head,
//      batch), 2 warpgroups; warpgroup wg owns keys j Bc + 64 wg .. +63, so dK_j, dV_j stay in
//      registers.
//        load K_j, V_j -> smem
//        for each query head h of the group, for each Q tile i with i Br + Br > j Bc:
//          load Q_i, dO_i, LSE_i, D_i -> smem (double-buffered: the next (h, i) loads while
//                                              this one computes)
//          S_ij^T  = K_j Q_i^T                         (transposed products: the key rows are
//          P_ij^T  = exp2(S_ij^T scale log2e            the wgmma M dimension, so P^T and dS^T
//                         - LSE_i log2e)                come out in the A-operand registers of
//                    (0 where key > query)              the next products)
//          dP_ij^T = V_j dO_i^T
//          dS_ij^T = P_ij^T o (dP_ij^T - D_i)
//          dV_j   += P_ij^T dO_i          dK_j += dS_ij^T Q_i
//          dS_ij^T -> smem (bf16)
//          dQacc_i += dS_ij K_j        (the fp32 tile is staged in smem and added to dQacc by one
//                                       bulk reduce-add, cp.reduce.async.bulk, in L2)
//        dK_j *= scale; write dK_j, dV_j (bf16) into dqkv
//   3. flash_bwd_dq_kernel: dQ = scale dQacc -> bf16 into dqkv.
// Causal skipping per warpgroup: a step whose queries all precede the warpgroup's 64 keys skips
// its products, so the diagonal tiles cost about half a tile. Blocks run in order of j
// (blockIdx.y = 0 first): tile 0 visits the most Q tiles.
// Masks (mask.h; the MASKED kernels, the causal ones untouched): a block's steps run over the Q
// tiles that its K/V tile meets (mask.h q_tiles_for_keys: each warp finds the range's two ends
// by 32-way searches over lo, ~4 rounds of one load at T = 128K, at the block's start); each
// step's rows' doc_start comes with LSE_i and D_i; a warpgroup skips a step none of whose rows
// sees its keys and masks P element by element only in the tiles outside the range's FULL
// ones. --deterministic with a mask: Q tile i's semaphore starts at the first K/V tile that
// meets it (fixed_order_start) instead of 0.
//
// Determinism: dK and dV are bitwise reproducible (each block owns its rows, fixed order). dQ
// is summed in L2 in the order the blocks arrive (DqOrder::kArrival), so its last bits can
// differ between runs, unless `deterministic` (--deterministic) asks for the fixed order
// (DqOrder::kFixed: block j adds after block j - 1, by a semaphore per Q tile; 11-15% slower,
// measured in flash_bwd_wgmma.cuh). The tests check dQ to tolerance, and bitwise in the fixed
// order; dK, dV, O, LSE always bitwise.
//
// Scratch (flash_tiles.h, flash_bwd_scratch_bytes): dQacc (B, NH, T, HS) fp32 | D (B, NH, T)
// fp32 | semaphores (B, NH, ceil(T / Br)) int. Inside each dQacc row the 8-float segment s is
// stored at s ^ (t % 8) (so the smem staging stores are conflict-free and the bulk copy stays
// linear); flash_bwd_dq_kernel undoes it.
// Limits: bf16 only; HS 64 or 128; sm_90a (wgmma, cp.reduce.async.bulk: the Makefile's default
// GPU_ARCH=90a); 16-byte aligned buffers; any T >= 1 (ragged tiles are zero-filled loads and
// predicated stores); ceil(T/Bc) < 65536. The fixed order relies on blocks of a launch being
// dispatched in linear index order (as FlashAttention-3's deterministic mode does).
//
// Files: this one holds the D and dQ-convert kernels and the launch; the mainloop is
// flash_bwd_wgmma.cuh, its loads and epilogues flash_bwd_shared.cuh. Tiles: flash_tiles.h.
//
// Test:  make build/test_gpu && ./build/test_gpu --gtest_filter='Flash*:AttentionGpu*'
// Bench: ./build/flashgpt bench-attention --backends flash [--deterministic]
//        python3 scripts/bench_attention.py   (against PyTorch SDPA in the same run)
#include "kernels/attention/flash.cuh"
#include "kernels/attention/flash_bwd_wgmma.cuh"

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "flash_bwd.cu uses wgmma: build for sm_90a (GPU_ARCH=90a, the Makefile's default)"
#endif

namespace flash {

// ---- 1. D_i = rowsum(dO_i o O_i); dQacc = 0 unless its first adds will store; dq_sem = 0
// when given ----
// One group of HS/8 threads per (b, t, h) row, 16-byte loads. dq_sem (B, NH, ceil(T/sem_Br)):
// the semaphores of the fixed dQ order (one per Q tile of sem_Br rows), or null.
template <int HS>
__global__ void flash_bwd_dot_kernel(float* __restrict__ D, float* __restrict__ dq_accum,
                                     const __nv_bfloat16* __restrict__ dout,
                                     const __nv_bfloat16* __restrict__ out, int T, int NH,
                                     size_t rows, int* __restrict__ dq_sem, int sem_Br,
                                     bool zero_dq) {
  constexpr int TPR = HS / 8;  // threads per row
  const size_t gid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  const size_t row = gid / TPR;  // (b, t, h) order of out
  const int c = gid % TPR;
  float acc = 0.f;
  const bool ok = row < rows;
  if (ok) {
    const uint4 a = *reinterpret_cast<const uint4*>(dout + row * HS + c * 8);
    const uint4 o = *reinterpret_cast<const uint4*>(out + row * HS + c * 8);
    const __nv_bfloat162* a2 = reinterpret_cast<const __nv_bfloat162*>(&a);
    const __nv_bfloat162* o2 = reinterpret_cast<const __nv_bfloat162*>(&o);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 x = __bfloat1622float2(a2[k]), y = __bfloat1622float2(o2[k]);
      acc += x.x * y.x + x.y * y.y;
    }
  }
#pragma unroll
  for (int off = TPR / 2; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (ok) {
    const int h = row % NH;
    const size_t bt = row / NH;
    const int t = bt % T;
    const size_t b = bt / T;
    const size_t r2 = (b * NH + h) * T + t;  // (b, h, t)
    if (c == 0) D[r2] = acc;
    if (dq_sem != nullptr && c == 0 && t % sem_Br == 0)
      dq_sem[(b * NH + h) * ((T + sem_Br - 1) / sem_Br) + t / sem_Br] = 0;
    if (zero_dq) {
      float4* z = reinterpret_cast<float4*>(dq_accum + r2 * HS + c * 8);
      z[0] = make_float4(0.f, 0.f, 0.f, 0.f);
      z[1] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }
}

// ---- 3. dQ = scale dQacc -> bf16, into dqkv's query heads ----
template <int HS>
__global__ void flash_bwd_dq_kernel(__nv_bfloat16* __restrict__ dqkv,
                                    const float* __restrict__ dq_accum, int T, int NH, int NKV,
                                    float scale, size_t rows) {
  constexpr int TPR = HS / 8;
  const size_t gid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  const size_t row = gid / TPR;  // (b, h, t) order of dq_accum
  const int c = gid % TPR;
  if (row >= rows) return;
  const int t = row % T;
  const size_t bh = row / T;
  const int h = bh % NH;
  const size_t b = bh / NH;
  const float4* src = reinterpret_cast<const float4*>(dq_accum + row * HS + ((c ^ (t & 7)) * 8));
  const float4 x = src[0], y = src[1];
  uint4 v;
  v.x = pack_bf16(x.x * scale, x.y * scale);
  v.y = pack_bf16(x.z * scale, x.w * scale);
  v.z = pack_bf16(y.x * scale, y.y * scale);
  v.w = pack_bf16(y.z * scale, y.w * scale);
  *reinterpret_cast<uint4*>(dqkv + ((b * T + t) * (size_t)(NH + 2 * NKV) + h) * HS + c * 8) = v;
}

// MASKED: the problem's mask (p.mask not causal) in place of p.causal.
template <class K, DqOrder ORDER, bool MASKED>
static void launch_main_as(const BwdProblem& p, int* dq_sem, cudaStream_t stream) {
  auto kernel = flash_bwd_wg_kernel<K, ORDER, MASKED>;
  constexpr int smem = K::SMEM + (MASKED ? 2 * K::Br * 4 : 0);  // MASKED: the rows' doc_start
  static_assert(smem <= 227 * 1024, "shared memory per block");
  allow_dynamic_smem(reinterpret_cast<const void*>(kernel), smem);
  if (MASKED) check_problem_mask(p);
  else CHECK(!p.causal || p.Tq == p.Tk, "internal: flash backward: causal needs Tq == Tk");
  CHECK((p.dk != nullptr) != (p.dk_acc != nullptr), "internal: flash backward: one dK output");
  const float scale = 1.f / sqrtf((float)K::HS);
  CHECK(!p.query_head_blocks, "internal: flash backward: blocks per kv head only");
  dim3 grid((unsigned)(p.B * p.NKV), (unsigned)ceil_div(p.Tk, K::Bc));
  KernelMask<MASKED> mk;
  if constexpr (MASKED) mk = p;
  kernel<<<grid, K::NTHREADS, smem, stream>>>(p, dq_sem, scale * kLog2e, scale, mk);
  CUDA_CHECK_LAUNCH();
}
template <class K, DqOrder ORDER>
static void launch_main(const BwdProblem& p, int* dq_sem, cudaStream_t stream) {
  if (p.mask.is_causal()) launch_main_as<K, ORDER, false>(p, dq_sem, stream);
  else launch_main_as<K, ORDER, true>(p, dq_sem, stream);
}

// The fixed dQ order with a mask: the blocks that add into Q tile i are the K/V tiles j from
// jb(i) = lo(i Br) / Bc on (a range: mask.h), so its semaphore starts at jb(i), where the causal
// order's starts at 0 (block j waits until it reads j, then stores j + 1, either way). One
// thread per (b, h, Q tile), after the D kernel has zeroed them. Whole sequences only (the
// ring's backward adds in arrival order).
__global__ void fixed_order_start_kernel(int* __restrict__ dq_sem, AttnMask mask, int B, int T,
                                         int NH, int Br, int Bc) {
  const int n_i = (T + Br - 1) / Br;
  const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= (size_t)B * NH * n_i) return;
  const int i = idx % n_i, b = idx / ((size_t)NH * n_i);
  dq_sem[idx] = mask.seq(b, T).lo(i * Br) / Bc;
}
void fixed_order_start(int* dq_sem, const AttnMask& mask, const AttnShape& s, cudaStream_t stream) {
  const FlashTiles t = flash_tiles(s.HS);
  const size_t n = (size_t)s.B * s.NH * ceil_div(s.T, t.bwd_Br);
  fixed_order_start_kernel<<<(unsigned)ceil_div(n, (size_t)256), 256, 0, stream>>>(
      dq_sem, mask, s.B, s.T, s.NH, t.bwd_Br, t.bwd_Bc);
  CUDA_CHECK_LAUNCH();
}

struct BwdScratchPtrs {
  float* dq_accum;
  float* D;
  int* sem;
};
static BwdScratchPtrs scratch_ptrs(void* scratch, const AttnShape& s) {
  const FlashBwdScratch at = flash_bwd_scratch(s);
  char* base = static_cast<char*>(scratch);
  return {reinterpret_cast<float*>(base + at.dq_accum), reinterpret_cast<float*>(base + at.D),
          reinterpret_cast<int*>(base + at.sem)};
}

template <int HS>
static void launch_begin(const BwdScratchPtrs& sp, const __nv_bfloat16* dout,
                         const __nv_bfloat16* out, const AttnShape& s, int* sem,
                         cudaStream_t stream, bool zero_dq = true) {
  const size_t rows = (size_t)s.B * s.T * s.NH;
  const int threads = 256;
  const size_t blocks = ceil_div(rows * (HS / 8), (size_t)threads);
  flash_bwd_dot_kernel<HS><<<(unsigned)blocks, threads, 0, stream>>>(
      sp.D, sp.dq_accum, dout, out, s.T, s.NH, rows, sem, BwdTileFor<HS>::Br, zero_dq);
  CUDA_CHECK_LAUNCH();
}

template <int HS>
static void launch_end(__nv_bfloat16* dqkv, const BwdScratchPtrs& sp, const AttnShape& s,
                       cudaStream_t stream) {
  const size_t rows = (size_t)s.B * s.T * s.NH;
  const int threads = 256;
  const size_t blocks = ceil_div(rows * (HS / 8), (size_t)threads);
  const float scale = 1.f / sqrtf((float)HS);
  flash_bwd_dq_kernel<HS><<<(unsigned)blocks, threads, 0, stream>>>(dqkv, sp.dq_accum, s.T, s.NH,
                                                                    s.NKV, scale, rows);
  CUDA_CHECK_LAUNCH();
}

BwdProblem whole_sequence_problem(__nv_bfloat16* dqkv, void* scratch, const __nv_bfloat16* dout,
                                  const __nv_bfloat16* qkv, const float* lse, const AttnShape& s,
                                  const AttnMask& mask) {
  const BwdScratchPtrs sp = scratch_ptrs(scratch, s);
  const size_t ld = (size_t)(s.NH + 2 * s.NKV) * s.HS;
  BwdProblem p{};
  set_whole_sequence_qkv(p, qkv, s, mask);
  p.dout = dout;
  p.do_ld = (size_t)s.NH * s.HS;
  p.do_bs = (size_t)s.T * p.do_ld;
  p.lse = lse;
  p.D = sp.D;
  p.dq_accum = sp.dq_accum;
  p.dq_T = s.T;
  p.dq_row0 = 0;
  p.dk = dqkv + (size_t)s.NH * s.HS;
  p.dv = dqkv + (size_t)(s.NH + s.NKV) * s.HS;
  p.dkv_ld = ld;
  p.dkv_bs = (size_t)s.T * ld;
  return p;
}

int* dq_semaphores(void* scratch, const AttnShape& s) { return scratch_ptrs(scratch, s).sem; }

template <int HS>
static void launch_bwd_hs(__nv_bfloat16* dqkv, void* scratch, const __nv_bfloat16* dout,
                          const __nv_bfloat16* qkv, const __nv_bfloat16* out, const float* lse,
                          const AttnShape& s, bool deterministic, const AttnMask& mask,
                          cudaStream_t stream) {
  const BwdScratchPtrs sp = scratch_ptrs(scratch, s);
  launch_begin<HS>(sp, dout, out, s, deterministic ? sp.sem : nullptr, stream);
  if (deterministic && !mask.is_causal()) fixed_order_start(sp.sem, mask, s, stream);
  const BwdProblem p = whole_sequence_problem(dqkv, scratch, dout, qkv, lse, s, mask);
  if (deterministic)
    launch_main<BwdTileFor<HS>, DqOrder::kFixed>(p, sp.sem, stream);
  else
    launch_main<BwdTileFor<HS>, DqOrder::kArrival>(p, nullptr, stream);
  launch_end<HS>(dqkv, sp, s, stream);
}

void backward_bf16(__nv_bfloat16* dqkv, void* scratch, const __nv_bfloat16* dout,
                   const __nv_bfloat16* qkv, const __nv_bfloat16* out, const float* lse,
                   const AttnShape& s, bool deterministic, const AttnMask& mask,
                   cudaStream_t stream) {
  switch (s.HS) {
    case 64:
      launch_bwd_hs<64>(dqkv, scratch, dout, qkv, out, lse, s, deterministic, mask, stream);
      break;
    case 128:
      launch_bwd_hs<128>(dqkv, scratch, dout, qkv, out, lse, s, deterministic, mask, stream);
      break;
    default:
      THROW_ERROR("flash attention backward: head size %d is not supported (64 or 128)", s.HS);
  }
}

void backward_begin(void* scratch, const __nv_bfloat16* dout, const __nv_bfloat16* out,
                    const AttnShape& s, cudaStream_t stream, bool zero_semaphores,
                    bool zero_dq_accum) {
  const BwdScratchPtrs sp = scratch_ptrs(scratch, s);
  int* sem = zero_semaphores ? sp.sem : nullptr;
  if (s.HS == 64) launch_begin<64>(sp, dout, out, s, sem, stream, zero_dq_accum);
  else if (s.HS == 128) launch_begin<128>(sp, dout, out, s, sem, stream, zero_dq_accum);
  else THROW_ERROR("flash attention backward: head size %d is not supported (64 or 128)", s.HS);
}

void backward_problem(const BwdProblem& p, cudaStream_t stream) {
  if (p.HS == 64) launch_main<BwdTileFor<64>, DqOrder::kArrival>(p, nullptr, stream);
  else if (p.HS == 128) launch_main<BwdTileFor<128>, DqOrder::kArrival>(p, nullptr, stream);
  else THROW_ERROR("flash attention backward: head size %d is not supported (64 or 128)", p.HS);
}

void backward_end(__nv_bfloat16* dqkv, void* scratch, const AttnShape& s, cudaStream_t stream) {
  const BwdScratchPtrs sp = scratch_ptrs(scratch, s);
  if (s.HS == 64) launch_end<64>(dqkv, sp, s, stream);
  else if (s.HS == 128) launch_end<128>(dqkv, sp, s, stream);
  else THROW_ERROR("flash attention backward: head size %d is not supported (64 or 128)", s.HS);
}

}  // namespace flash
