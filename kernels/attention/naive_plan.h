// naive_plan — the "naive" backend's row chunking and its saved/scratch layout, everything
// derived from the shape (naive.cu's algorithm). naive.cu runs by it and the backend's spec
// (backends.cpp) sizes memory and cost from it. Host code, no CUDA headers.
//
// Row chunks: query rows split into nc chunks of Tc rows (Tc a multiple of 64, nc <= 8; one
// chunk when T <= 256); chunk c (rows r0..r1-1) only needs keys 0..r1-1. At least 256 rows per
// chunk, at most 8 chunks (56% of the full T x T work instead of 100%). Measured on H200 (naive
// fwd+bwd, HS 64 and 128, T 1024 and 4096, 16384 tokens): chunks of >= 128 rows (<= 16 chunks)
// were 8-16% slower and >= 64 rows 25-36% slower, because the narrow batched GEMMs lose more
// efficiency than the bytes they save; >= 512 rows (<= 4) was within 3%.
//
// Memory (bytes; es = sizeof(floatX), ldP = T rounded up to a multiple of 8 so that every row
// and every GEMM pointer is 16-byte aligned):
//   saved   = B*NH*T*ldP*es               P, written by forward, read by backward
//   scratch = 10*nc*B*NH*8 (256-aligned)  GEMM pointer arrays (forward and backward)
//           + B*NH*T*ldP*es (256-aligned) dP, overwritten in place by dS (backward only)
//           + 2*B*NH*T*HS*4 when G > 1    fp32 dK, dV partials per query head (256-aligned)
// Sizes use checked arithmetic: a shape whose P does not fit in 2^64 bytes throws (naming
// --seq-len) instead of wrapping around.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/attention/backends.h"
#include "kernels/common.h"

struct NaivePlan {
  static constexpr int kMinChunk = 256;
  static constexpr int kMaxChunks = 8;
  static constexpr int kMaxDescs = 10;       // pointer arrays per call (backward uses all ten)
  static constexpr int kRegRowCap = 32768;   // longest row the softmax kernels hold in registers;
                                             // longer rows take the two-pass loop kernel

  int B, T, NH, NKV, HS, G;
  int H3;      // heads per token in qkv
  int ld;      // qkv row stride (elements) = H3*HS
  int ldo;     // out/dout row stride = NH*HS
  int ldP;     // P / dP row stride = T rounded up to 8
  int Tc, nc;  // row chunk size and count
  int BNH;
  size_t es;
  size_t p_bytes;        // one (B, NH, T, ldP) floatX buffer
  size_t ptr_bytes;      // pointer arrays
  size_t partial_bytes;  // one fp32 (B, NH, T, HS) buffer, 0 when G == 1
  size_t off_dp, off_dkp, off_dvp, scratch_bytes;

  NaivePlan(const AttnShape& s, size_t es_)
      : B(s.B), T(s.T), NH(s.NH), NKV(s.NKV), HS(s.HS), G(s.NH / s.NKV), es(es_) {
    H3 = NH + 2 * NKV;
    ld = H3 * HS;
    ldo = NH * HS;
    ldP = (int)std::min<size_t>(round_up((size_t)T, 8), (size_t)0x7fffffff);
    if (T <= kMinChunk) {
      Tc = T;
      nc = 1;
    } else {
      const int want = std::min(kMaxChunks, (int)(((size_t)T + kMinChunk - 1) / kMinChunk));
      Tc = (int)round_up(((size_t)T + want - 1) / want, 64);
      nc = (int)(((size_t)T + Tc - 1) / Tc);
    }
    BNH = B * NH;
    const size_t rows = (size_t)B * NH * T;
    p_bytes = mul(mul(rows, (size_t)ldP), es);
    ptr_bytes = round_up((size_t)kMaxDescs * nc * B * NH * sizeof(void*), 256);
    partial_bytes = G > 1 ? round_up(mul(rows, (size_t)HS * sizeof(float)), 256) : 0;
    off_dp = ptr_bytes;
    off_dkp = add(off_dp, round_up(p_bytes, 256));
    off_dvp = add(off_dkp, partial_bytes);
    scratch_bytes = add(off_dvp, partial_bytes);
  }
  int r0(int c) const { return c * Tc; }
  int r1(int c) const { return std::min(T, (c + 1) * Tc); }

 private:
  static size_t round_up(size_t a, size_t b) { return (a + b - 1) / b * b; }
  [[noreturn]] void too_big() const {
    THROW_ERROR("naive attention at T=%d (B=%d, %d heads) would keep more than 2^64 bytes of T x T "
                "state; lower --seq-len or use --attn flash", T, B, NH);
  }
  size_t mul(size_t a, size_t b) const {
    if (b != 0 && a > SIZE_MAX / b) too_big();
    return a * b;
  }
  size_t add(size_t a, size_t b) const {
    if (a > SIZE_MAX - b) too_big();
    return a + b;
  }
};
