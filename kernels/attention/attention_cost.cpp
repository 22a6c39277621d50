// attention_cost.cpp — see attention_cost.h (the formulas are stated there).
#include "kernels/attention/attention_cost.h"

#include <algorithm>

#include "kernels/attention/flash3_tiles.h"
#include "kernels/common.h"

namespace {

int ceil_div_int(int a, int b) { return (a + b - 1) / b; }

// Tiles of the FlashAttention-2 kernels (flash_fwd.cu FwdTile64/128, flash_bwd.cu BwdTile64 /
// BwdTileWG<128, 64> and their causal skipping granularity), by head size. Head sizes the
// kernels do not support fall back to HS 64's tiles (the backend reports them unsupported).
struct FlashTiles {
  int fwd_Br, fwd_Bc, bwd_rows, bwd_keys;
};
FlashTiles flash_tiles(int HS) {
  if (HS == 128) return {128, 32, 64, 64};
  return {128, 64, 32, 16};
}
constexpr int kFlash1Tile = 64;  // flash1.cu: Br = Bc = 64

// naive.cu's Plan: row chunks of >= 256 rows, at most 8, Tc a multiple of 64.
void naive_chunk_areas(int T, double& A, double& A2) {
  constexpr int kMinChunk = 256, kMaxChunks = 8;
  int Tc = T, nc = 1;
  if (T > kMinChunk) {
    const int want = std::min(kMaxChunks, ceil_div_int(T, kMinChunk));
    Tc = (ceil_div_int(T, want) + 63) / 64 * 64;
    nc = ceil_div_int(T, Tc);
  }
  A = A2 = 0;
  for (int c = 0; c < nc; c++) {
    const double r0 = (double)c * Tc, r1 = std::min((double)T, (double)(c + 1) * Tc);
    A += (r1 - r0) * r1;
    A2 += ((double)T - r0) * (r1 - r0);
  }
}

void check_shape(const AttnShape& s) {
  CHECK(s.B >= 1 && s.T >= 1 && s.NH >= 1 && s.NKV >= 1 && s.HS >= 1 && s.NH % s.NKV == 0,
        "attention cost: bad shape B=%d T=%d NH=%d NKV=%d HS=%d", s.B, s.T, s.NH, s.NKV, s.HS);
}

}  // namespace

double causal_tile_area(int T, int Br, int Bc) {
  double tiles = 0;
  const int Tr = ceil_div_int(T, Br);
  for (int i = 0; i < Tr; i++) tiles += (std::min((i + 1) * Br, T) - 1) / Bc + 1;
  return tiles * Br * Bc;
}

double attention_forward_flops(const AttnShape& s, bool causal) {
  return 4.0 * s.B * s.NH * (double)s.T * s.T * s.HS * (causal ? 0.5 : 1.0);
}

AttnCost attention_cost(const std::string& name, const AttnShape& s, size_t es_) {
  check_shape(s);
  const double es = (double)es_, HS = s.HS, T = s.T;
  const double heads = (double)s.B * s.NH, R = heads * T, Rk = (double)s.B * s.NKV * T;
  const double io_fwd = es * HS * (2 * R + 2 * Rk);
  AttnCost c;
  c.fwd.flops = attention_forward_flops(s, true);
  c.bwd.flops = 2.5 * c.fwd.flops;

  if (name == "flash") {
    const FlashTiles t = flash_tiles(s.HS);
    c.fwd.mma_flops = heads * 4 * HS * causal_tile_area(s.T, t.fwd_Br, t.fwd_Bc);
    c.bwd.mma_flops = heads * 10 * HS * causal_tile_area(s.T, t.bwd_rows, t.bwd_keys);
    c.fwd.bytes = io_fwd + 4 * R;
    c.bwd.bytes = es * HS * (R + 2 * R + R + 2 * Rk + 2 * Rk + R) + 4 * R * HS * 2 + 4 * R * 3;
    return c;
  }
  if (name == "flash3") {  // tiles from flash3_tiles.h; the same minimum bytes as flash plus
                           // the dQ-order semaphores (one int per backward Q tile)
    c.fwd.mma_flops = heads * 4 * HS * causal_tile_area(s.T, flash3::kFwdBr, flash3::kFwdBc);
    c.bwd.mma_flops =
        heads * 10 * HS * causal_tile_area(s.T, flash3::kBwdBr(s.HS), flash3::kBwdSkipKeys);
    c.fwd.bytes = io_fwd + 4 * R;
    c.bwd.bytes = es * HS * (R + 2 * R + R + 2 * Rk + 2 * Rk + R) + 4 * R * HS * 2 + 4 * R * 3 +
                  4.0 * heads * flash3::bwd_q_tiles(s);
    return c;
  }
  if (name == "flash1") {
    const int Br = kFlash1Tile, Tr = ceil_div_int(s.T, Br);
    const double area = causal_tile_area(s.T, Br, Br);
    c.fwd.mma_flops = heads * 4 * HS * area;
    c.bwd.mma_flops = heads * 10 * HS * area;
    double fwd = 2 * T * HS * es;                  // K, V of this head's kv head
    double bwd = 2 * T * HS * es + 4 * T;          // D: O, dO read, D written
    for (int i = 0; i < Tr; i++) {
      const double rows = std::min(Br, s.T - i * Br);
      const double n = (std::min((i + 1) * Br, s.T) - 1) / Br + 1;  // K/V tiles reaching tile i
      fwd += n * rows * HS * es                    // Q_i per pass
             + (n - 1) * 2 * Br * (HS + 2) * 4     // O_i, m_i, l_i round trips
             + rows * HS * es + rows * 4;          // out_i, LSE_i
      bwd += n * (rows * HS * es * 2 + rows * 4 * 2)  // Q_i, dO_i, LSE_i, D_i per pass
             + (n - 1) * 2 * Br * HS * 4           // dQ_i round trips (fp32)
             + rows * HS * es;                     // dQ_i (floatX) once
    }
    c.fwd.bytes = heads * fwd;
    // K, V read and dK, dV written once per kv head (the block of a kv group).
    c.bwd.bytes = heads * bwd + Rk * HS * es * 4;
    return c;
  }
  if (name == "naive") {
    double A, A2;
    naive_chunk_areas(s.T, A, A2);
    const double k = s.T > 32768 ? 2 : 1, tri = T * (T + 1) / 2;
    c.fwd.mma_flops = heads * 4 * HS * A;
    c.bwd.mma_flops = heads * 4 * HS * (A + A2);
    c.fwd.bytes = io_fwd + es * heads * (3 * A + k * tri);
    c.bwd.bytes = es * HS * (R + 2 * Rk + R + R + 2 * Rk) +
                  es * heads * (2 * A2 + 3 * A + 2 * k * tri) +
                  (s.NH > s.NKV ? 2 * R * HS * 4 * 2 : 0);
    return c;
  }
  FAIL("--attn '%s' is unknown; use one of: naive, flash, flash1, flash3", name.c_str());
}

double roofline_seconds(const AttnPassCost& c, double peak_flops, double bytes_per_s) {
  if (peak_flops <= 0 || bytes_per_s <= 0) return 0;
  return std::max(c.mma_flops / peak_flops, c.bytes / bytes_per_s);
}
