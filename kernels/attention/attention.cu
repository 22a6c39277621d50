// attention.cu — the GPU attention registry: name -> backend. Tests and benchmarks loop over
// attention_names(), so a backend added here is tested and benched the day it is added.
//   "flash": our FlashAttention-2 kernels (flash*.cu), saves LSE (B, NH, T) fp32; the default.
//   "naive": cuBLAS + causal softmax kernels (naive.cu), saves P (B, NH, T, T).
//   "flash1": FlashAttention-1's loop order (flash1.cu: K/V tiles outer, O/m/l in device
//             memory, one block per head), saves LSE like flash; there to be compared with it.
//   "flash3": the FlashAttention-3 schedule on sm_90a (flash3.cu, flash3_bwd.cu; facts in
//             flash3_tiles.h), saves LSE like flash; bitwise-reproducible backward.
// -DFLASHGPT_ATTN_NAIVE_ONLY builds the registry without flash (only for a private binary
// while flash*.cu is being written; the committed build always includes flash).
#include "kernels/attention/attention.cuh"

#include "kernels/attention/naive.cuh"
#if !defined(FLASHGPT_ATTN_NAIVE_ONLY)
#include "kernels/attention/flash.cuh"
#include "kernels/attention/flash1.cuh"
#include "kernels/attention/flash3.cuh"
#endif

std::vector<std::string> attention_names() {
#if defined(FLASHGPT_ATTN_NAIVE_ONLY)
  return {"naive"};
#else
  return {"flash", "naive", "flash1", "flash3"};
#endif
}

std::unique_ptr<AttentionBackend> make_attention(const std::string& name) {
#if !defined(FLASHGPT_ATTN_NAIVE_ONLY)
  if (name == "flash") return make_flash_attention();
  if (name == "flash1") return make_flash1_attention();
  if (name == "flash3") return make_flash3_attention();
#endif
  if (name == "naive") return make_naive_attention();
  std::string known;
  for (const std::string& n : attention_names()) known += (known.empty() ? "" : ", ") + n;
  FAIL("attention backend '%s' is unknown (--attn, --backends); use one of: %s", name.c_str(),
       known.c_str());
}
