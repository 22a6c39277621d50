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
// The cost of determinism, measured (H100 80GB HBM3, causal bf16, 16384 tokens; backward
// TFLOP/s = 2.5 x 2 B NH T^2 HS / time; HS / T = 64/4K 64/16K 128/4K 128/16K; logs in
// bench/results/flash3_nvidia-h100_2026-11-23/):
//   arrival-order adds, diagonal first (flash's HS 128 kernel)      -      -    370-382 426-441
//   kStepOrderOnly: last tile first, adds NOT ordered (=order)      347    413    337    417
//   v1 kFixed, diagonal-first steps, release at the next step's     263    302    288    317
//      first barrier (predicted ~3-6% from the wave start-up wait
//      of a static model; got 23-26%)
//   v2 kFixed as now: last tile first, release just before the      262-281 308-319 301-304 362-364
//      next add (the model predicted 0-3%; got 13-25%)
//   tried, slower: release two steps after the add (cp.async.bulk.wait_group 1): 266 303 298 342;
//      reversed order (block j after block j + 1, blocks launched from the last K/V tile,
//      diagonal-first steps, which gives block j Bc / Br steps of slack): 224 266 230 251: the
//      longest blocks then start last (a tail).
// So determinism costs 13-25% here, far over the issue's 3% for a default: the blocks of a wave
// run in lock-step one step apart, and every stall of one block (its add completing, its
// predecessor's) passes down the chain. The order alone costs nothing (kStepOrderOnly vs
// flash). flash3 keeps kDeterministic = true (flash3_tiles.h) for bitwise-reproducible training;
// FLASHGPT_FLASH3_BWD=order measures the other side. Measured cheaper ways are the next step:
// dQ partials of a block's first steps to a small slab instead of waiting, or FA3's own
// warp-specialised backward (dQ accumulated per Q tile by a separate warpgroup).
//
// Scratch (flash3_tiles.h): dQacc (B, NH, T, HS) fp32 | D (B, NH, T) fp32 | semaphores
// (B, NH, ceil(T / Br)) int.
// Limits: bf16; HS 64 or 128; sm_90a; 16-byte aligned buffers; any T >= 1; ceil(T/128) < 65536.
// Relies on blocks of a launch being dispatched in linear index order (block j waits for block
// j - 1 of the same (b, kv head), which has the lower index), as FA3's deterministic mode does.
//
// Test:  ./build/test_gpu --gtest_filter='*flash3*:Flash3*:Hopper*'
// Bench: python3 scripts/bench_attention.py --backends flash,flash3
#include <cstdlib>
#include <cstring>

#include "kernels/attention/flash3.cuh"
#include "kernels/attention/flash3_tiles.h"
#include "kernels/attention/flash_bwd_wg.cuh"

namespace flash3 {

namespace {

using flash::DqOrder;

// The dQ order that runs: kFixed (deterministic, kDeterministic) or, with
// FLASHGPT_FLASH3_BWD=order, kStepOrderOnly (the same steps, NOT deterministic): a measurement
// switch for the cost of determinism (see the notes above), read once.
DqOrder dq_order() {
  static const DqOrder o = [] {
    const char* e = std::getenv("FLASHGPT_FLASH3_BWD");
    if (e && std::strcmp(e, "order") == 0) return DqOrder::kStepOrderOnly;
    return kDeterministic ? DqOrder::kFixed : DqOrder::kStepOrderOnly;
  }();
  return o;
}

template <class K, DqOrder ORDER>
void launch_bwd(__nv_bfloat16* dqkv, void* scratch, const __nv_bfloat16* dout,
                const __nv_bfloat16* qkv, const __nv_bfloat16* out, const float* lse,
                const AttnShape& s, cudaStream_t stream) {
  static_assert(K::Bc == kBwdBc && K::Br == kBwdBr(K::HS), "flash3_tiles.h describes these tiles");
  constexpr int HS = K::HS;
  auto kernel = flash::flash_bwd_wg_kernel<K, ORDER>;
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

template <class K>
void launch_bwd_order(__nv_bfloat16* dqkv, void* scratch, const __nv_bfloat16* dout,
                      const __nv_bfloat16* qkv, const __nv_bfloat16* out, const float* lse,
                      const AttnShape& s, cudaStream_t stream) {
  if (dq_order() == DqOrder::kFixed)
    launch_bwd<K, DqOrder::kFixed>(dqkv, scratch, dout, qkv, out, lse, s, stream);
  else
    launch_bwd<K, DqOrder::kStepOrderOnly>(dqkv, scratch, dout, qkv, out, lse, s, stream);
}

}  // namespace

bool backward_deterministic() {
  return dq_order() == DqOrder::kFixed;
}

void backward_bf16(__nv_bfloat16* dqkv, void* scratch, const __nv_bfloat16* dout,
                   const __nv_bfloat16* qkv, const __nv_bfloat16* out, const float* lse,
                   const AttnShape& s, cudaStream_t stream) {
  switch (s.HS) {
    case 64:
      launch_bwd_order<flash::BwdTileWG<64, kBwdBr(64)>>(dqkv, scratch, dout, qkv, out, lse, s,
                                                         stream);
      break;
    case 128:
      launch_bwd_order<flash::BwdTileWG<128, kBwdBr(128)>>(dqkv, scratch, dout, qkv, out, lse, s,
                                                           stream);
      break;
    default:
      FAIL("flash3 attention backward: head size %d is not supported (64 or 128)", s.HS);
  }
}

}  // namespace flash3
