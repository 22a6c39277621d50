// layout — the 16 parameter tensors of GPT-2 in llm.c's order (also the checkpoint order).
// All parameters live in one allocation; tensor i starts at offset(i).
#pragma once
#include <array>
#include <cstddef>

#include "model/config.h"

constexpr int kNumParamTensors = 16;
enum ParamIndex {
  P_WTE, P_WPE, P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_ATTPROJW, P_ATTPROJB,
  P_LN2W, P_LN2B, P_FCW, P_FCB, P_FCPROJW, P_FCPROJB, P_LNFW, P_LNFB
};

struct ParamLayout {
  std::array<size_t, kNumParamTensors> sizes{};
  std::array<size_t, kNumParamTensors> offsets{};
  size_t total = 0;
  explicit ParamLayout(const GPTConfig& c) {
    size_t Vp = c.padded_vocab_size, C = c.channels, L = c.num_layers, maxT = c.max_seq_len;
    size_t QKV = c.qkv_channels();
    // With RoPE there is no position table: wpe has 0 elements (the 16-tensor order stays).
    size_t wpe_rows = c.rope ? 0 : maxT;
    sizes = {Vp * C,  wpe_rows * C, L * C,         L * C,     L * QKV * C, L * QKV,
             L * C * C, L * C,  L * C,         L * C,     L * 4 * C * C, L * 4 * C,
             L * C * 4 * C, L * C, C,           C};
    for (int i = 0; i < kNumParamTensors; i++) {
      offsets[i] = total;
      total += sizes[i];
    }
  }
  // Weight decay applies to the 2-D matrices only (llm.c, nanoGPT).
  static bool decayed(int i) {
    return i == P_WTE || i == P_WPE || i == P_QKVW || i == P_ATTPROJW || i == P_FCW || i == P_FCPROJW;
  }
  static const char* name(int i) {
    static const char* n[kNumParamTensors] = {"wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb",
                                              "attprojw", "attprojb", "ln2w", "ln2b", "fcw", "fcb",
                                              "fcprojw", "fcprojb", "lnfw", "lnfb"};
    return n[i];
  }
};
