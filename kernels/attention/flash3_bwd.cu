// flash3_bwd.cu — the "flash3" backward: FlashAttention-2's recomputation backward on warpgroup
// MMAs (flash_bwd_wg.cuh, shared with flash's HS 128 backward), for HS 64 and 128, with dQ
// summed in a FIXED order so that the whole backward is bitwise reproducible.
//
//   1. flash_bwd_dot_kernel   D_i = rowsum(dO_i o O_i), dQacc = 0, dQ-order semaphores = 0
//   2. flash_bwd_wg_kernel<DET = true>: one block per (K/V tile j of Bc = 128 keys, kv head,
//      batch), 2 consumer warpgroups of 64 keys each, looping over the group's query heads and
//      the Q tiles i >= j Bc / Br (Br = 64 at HS 128, 128 at HS 64): S^T = K Q^T, dP^T = V dO^T,
//      P^T = exp2(S^T scale log2e - LSE log2e), dS^T = P^T o (dP^T - D), dV += P^T dO,
//      dK += dS^T Q on wgmma with dK_j, dV_j in registers; dQ_i partial = dS K_j staged in smem
//      and added to dQacc_i by the copy engine (bulk reduce-add) after blocks 0..j-1 have added
//      theirs (semaphore per (b, h, Q tile), flash_bwd_wg.cuh).
//   3. flash_bwd_dq_kernel    dQ = scale dQacc -> bf16
//
// What is FlashAttention-3-like here and what is not: wgmma for all five products, K/V tile
// resident per block, dQ accumulated in fp32 through the copy engine, the deterministic mode by
// semaphore-ordered accumulation (as FA3's). Not yet: a producer warp with TMA and mbarriers
// (loads are cp.async by all threads, double-buffered, two __syncthreads per step), setmaxnreg,
// and the overlap of one step's softmax with the next step's GEMMs.
//
// Scratch (flash3_tiles.h): dQacc (B, NH, T, HS) fp32 | D (B, NH, T) fp32 | semaphores
// (B, NH, ceil(T / Br)) int.
// Limits: bf16; HS 64 or 128; sm_90a; 16-byte aligned buffers; any T >= 1; ceil(T/128) < 65536.
// Relies on blocks of a launch being dispatched in linear index order (block j waits for block
// j - 1 of the same (b, kv head), which has the lower index), as FA3's deterministic mode does.
//
// Test:  ./build/test_gpu --gtest_filter='*flash3*:Flash3*:Hopper*'
// Bench: python3 scripts/bench_attention.py --backends flash,flash3
#include "kernels/attention/flash3.cuh"
#include "kernels/attention/flash3_tiles.h"
#include "kernels/attention/flash_bwd_wg.cuh"

namespace flash3 {

namespace {

template <class K>
void launch_bwd(__nv_bfloat16* dqkv, void* scratch, const __nv_bfloat16* dout,
                const __nv_bfloat16* qkv, const __nv_bfloat16* out, const float* lse,
                const AttnShape& s, cudaStream_t stream) {
  static_assert(K::Bc == kBwdBc && K::Br == kBwdBr(K::HS), "flash3_tiles.h describes these tiles");
  constexpr int HS = K::HS;
  auto kernel = flash::flash_bwd_wg_kernel<K, kDeterministic>;
  static bool attr_set = false;  // one-time, per instantiation
  if (!attr_set) {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, K::SMEM));
    attr_set = true;
  }
  char* base = static_cast<char*>(scratch);
  float* dq_accum = reinterpret_cast<float*>(base + scratch_dq_offset(s));
  float* D = reinterpret_cast<float*>(base + scratch_D_offset(s));
  int* sem = reinterpret_cast<int*>(base + scratch_sem_offset(s));
  const float scale = 1.f / sqrtf((float)HS);
  const size_t rows = (size_t)s.B * s.T * s.NH;
  const int threads = 256;
  const size_t blocks = ceil_div(rows * (HS / 8), (size_t)threads);
  flash::flash_bwd_dot_kernel<HS><<<(unsigned)blocks, threads, 0, stream>>>(
      D, dq_accum, dout, out, s.T, s.NH, rows, sem, K::Br);
  CUDA_CHECK_LAUNCH();
  dim3 grid((unsigned)(s.B * s.NKV), (unsigned)ceil_div(s.T, K::Bc));
  kernel<<<grid, K::NTHREADS, K::SMEM, stream>>>(dqkv, dq_accum, dout, qkv, lse, D, sem, s.T,
                                                 s.NH, s.NKV, scale * flash::kLog2e, scale);
  CUDA_CHECK_LAUNCH();
  flash::flash_bwd_dq_kernel<HS>
      <<<(unsigned)blocks, threads, 0, stream>>>(dqkv, dq_accum, s.T, s.NH, s.NKV, scale, rows);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void backward_bf16(__nv_bfloat16* dqkv, void* scratch, const __nv_bfloat16* dout,
                   const __nv_bfloat16* qkv, const __nv_bfloat16* out, const float* lse,
                   const AttnShape& s, cudaStream_t stream) {
  switch (s.HS) {
    case 64:
      launch_bwd<flash::BwdTileWG<64, kBwdBr(64)>>(dqkv, scratch, dout, qkv, out, lse, s, stream);
      break;
    case 128:
      launch_bwd<flash::BwdTileWG<128, kBwdBr(128)>>(dqkv, scratch, dout, qkv, out, lse, s,
                                                     stream);
      break;
    default:
      FAIL("flash3 attention backward: head size %d is not supported (64 or 128)", s.HS);
  }
}

}  // namespace flash3
