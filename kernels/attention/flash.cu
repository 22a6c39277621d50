// flash.cu — the "flash" attention backend: our FlashAttention-2 kernels behind the
// AttentionBackend interface. Its spec (limits, saved and scratch bytes, cost) is kSpec_flash in
// backends.cpp; the kernels are flash_fwd.cu (tiled forward, online softmax, LSE saved) and
// flash_bwd.cu (D = rowsum(dO o O), recomputation backward, fp32 dQ accumulator), on tensor
// cores, head sizes 64 and 128, bf16 only: the FP32 build reports flash unsupported (its LSE
// backend there is "scalar", scalar.cu), so the name flash always means these kernels.
//
// saved   = LSE (B, NH, T) fp32, natural log: lse = m_i * scale + log(l_i).
// scratch = flash_bwd_scratch (flash_tiles.h): dQ accumulator (B, NH, T, HS) fp32, D (B, NH, T)
//           fp32 and the deterministic order's semaphores (backward only).
//
// Test:  ./build/test_gpu --gtest_filter='Flash*:AttentionGpu*flash_*'  (tests/gpu/test_flash.cu)
// Bench: ./build/flashgpt bench-attention --backends flash; python3 scripts/bench_attention.py
#include "kernels/attention/flash.cuh"

namespace {

class FlashAttention final : public FlashFamilyBackend {
 public:
  FlashAttention() : FlashFamilyBackend(attention_spec("flash")) {}

 protected:
  void forward_bf16(const Bf16ForwardArgs& a, cudaStream_t st) const override {
    flash::forward_bf16(a.out, a.lse, a.qkv, a.shape, a.mask, st);
  }
  void backward_bf16(const Bf16BackwardArgs& a, cudaStream_t st) const override {
    flash::backward_bf16(a.dqkv, a.scratch, a.dout, a.qkv, a.out, a.lse, a.shape, a.deterministic,
                         a.mask, st);
  }
};

}  // namespace

std::unique_ptr<AttentionBackend> make_flash_attention() {
  return std::make_unique<FlashAttention>();
}
