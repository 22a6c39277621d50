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

  void forward(const AttnForwardArgs& a, cudaStream_t stream) const override {
    check(a.shape);  // the FP32 build stops here: flash is bf16-only
#if !defined(ENABLE_FP32)
    flash::forward_bf16(a.out, static_cast<float*>(a.saved), a.qkv, a.shape, stream);
#endif
  }

  void backward(const AttnBackwardArgs& a, cudaStream_t stream) const override {
    check(a.shape);
#if !defined(ENABLE_FP32)
    flash::backward_bf16(a.dqkv, a.scratch, a.dout, a.qkv, a.out,
                         static_cast<const float*>(a.saved), a.shape, a.deterministic, stream);
#endif
  }
};

}  // namespace

std::unique_ptr<AttentionBackend> make_flash_attention() {
  return std::make_unique<FlashAttention>();
}
