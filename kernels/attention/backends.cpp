// backends.cpp — the attention backends' specs (backends.h says what a spec holds and how to add
// one). Each spec's memory and cost formulas are stated beside it.
#include "kernels/attention/backends.h"

#include <algorithm>
#include <climits>

#include "kernels/attention/flash1_tiles.h"
#include "kernels/attention/flash3_tiles.h"
#include "kernels/attention/flash_tiles.h"
#include "kernels/attention/naive_plan.h"
#include "kernels/common.h"

using flashgpt::strformat;

namespace {

int ceil_div_int(int a, int b) { return (int)(((long long)a + b - 1) / b); }
size_t lse_bytes(const AttnShape& s) { return (size_t)s.B * s.NH * s.T * sizeof(float); }

// The convention's FLOPs (equal for every backend) and the input/output bytes of a forward.
AttnCost convention(const AttnShape& s) {
  AttnCost c;
  c.fwd.flops = attention_forward_flops(s, true);
  c.bwd.flops = 2.5 * c.fwd.flops;
  return c;
}
double io_fwd_bytes(const AttnShape& s, size_t es) {  // Q, K, V read; O written
  const double R = (double)s.B * s.NH * s.T, Rk = (double)s.B * s.NKV * s.T;
  return (double)es * s.HS * (2 * R + 2 * Rk);
}

std::string head_sizes_64_128(const char* name, const AttnShape& s) {
  if (s.HS != 64 && s.HS != 128)
    return strformat("%s attention supports head size 64 or 128, not %d; use --attn naive", name,
                     s.HS);
  if (s.T > (1 << 22)) return strformat("sequence length %d is over 4M", s.T);
  return "";
}

// ---------------------------------------------------------------------------------------------
// flash: our FlashAttention-2 (flash_fwd.cu, flash_bwd.cu; tiles: flash_tiles.h).
//   saved   = LSE (B, NH, T) fp32
//   scratch = dQacc (B, NH, T, HS) fp32 + D (B, NH, T) fp32 + the deterministic order's
//             semaphores, one int per (b, h, backward Q tile) (flash_bwd_scratch)
//   mma_flops forward 4*HS*tile(T, fwd_Br, fwd_Bc) per head (S = Q K^T, O = P V); backward
//             10*HS*tile(T, bwd_skip_rows, bwd_skip_keys) per head (recomputed S, dP, dV, dK,
//             dQ), at the backward's causal skipping granularity
//   bytes   forward  io_fwd + 4R (LSE written)
//           backward es*HS*(R [O] + 2R [dO, read by the D kernel and the main kernel] + R [Q]
//                    + 2Rk [K, V] + 2Rk [dK, dV] + R [dQ]) + 4R*HS*2 [dQacc zeroed, read back
//                    by the dQ kernel] + 4R*3 [LSE read, D written and read]
//                    (the semaphores are a few bytes per tile and left out)

std::string flash_limits(const AttnShape& s, size_t) { return head_sizes_64_128("flash", s); }
size_t flash_saved(const AttnShape& s, size_t) { return lse_bytes(s); }
size_t flash_scratch(const AttnShape& s, size_t) { return flash_bwd_scratch(s).bytes; }
// The forward of a (Br x Bc)-tiled LSE forward, and flash's backward (flash3 shares it).
AttnCost flash_family_cost(const AttnShape& s, size_t es_, int fwd_Br, int fwd_Bc, bool fwd_end_aligned) {
  const FlashTiles t = flash_tiles(s.HS);
  const double es = (double)es_, HS = s.HS, heads = (double)s.B * s.NH, R = heads * s.T,
               Rk = (double)s.B * s.NKV * s.T;
  AttnCost c = convention(s);
  c.fwd.mma_flops = heads * 4 * HS * causal_tile_area(s.T, fwd_Br, fwd_Bc, fwd_end_aligned);
  c.bwd.mma_flops = heads * 10 * HS * causal_tile_area(s.T, t.bwd_skip_rows, t.bwd_skip_keys);
  c.fwd.bytes = io_fwd_bytes(s, es_) + 4 * R;
  c.bwd.bytes = es * HS * (R + 2 * R + R + 2 * Rk + 2 * Rk + R) + 4 * R * HS * 2 + 4 * R * 3;
  return c;
}
AttnCost flash_cost(const AttnShape& s, size_t es) {
  const FlashTiles t = flash_tiles(s.HS);
  return flash_family_cost(s, es, t.fwd_Br, t.fwd_Bc, false);
}

// ---------------------------------------------------------------------------------------------
// flash3: the FlashAttention-3 schedule (flash3.cu, flash3_bwd.cu; tiles: flash3_tiles.h, and
// flash_tiles.h for the backward, whose steps and tiles are flash's).
//   saved   = LSE (B, NH, T) fp32
//   scratch = flash's backward scratch, a tile counter and, with GQA, the fp32 dK/dV
//             accumulator (B, T, 2, NKV, HS) of the query-head blocks (flash3_tiles.h
//             bwd_scratch_bytes); the forward uses its first int (the work-tile counter of the
//             persistent scheduler), which the backward then overwrites
//   mma_flops forward 4*HS*tile(T, Br, 128) per head, Br = kFwdBr(HS) (192 at HS 64, 128 at
//             HS 128), row tiles ending at T; backward as flash (the same products
//             and causal skipping, scheduled over warp-specialised warpgroups)
//   bytes   as flash (the forward reads Q once per work tile and K/V tiles through TMA; L2
//           re-reads are not counted, nor the GQA backward's dK/dV sums through its
//           accumulator, which one kv head's query heads pass in turn while it is in L2)

std::string flash3_limits(const AttnShape& s, size_t) { return head_sizes_64_128("flash3", s); }
size_t flash3_scratch(const AttnShape& s, size_t) {
  return std::max(flash3::bwd_scratch_bytes(s), flash3::kFwdScratchBytes);
}
AttnCost flash3_cost(const AttnShape& s, size_t es) {
  return flash_family_cost(s, es, flash3::kFwdBr(s.HS), flash3::kFwdBc, true);
}

// ---------------------------------------------------------------------------------------------
// naive: cuBLAS GEMMs on row chunks + causal softmax kernels (naive.cu; plan: naive_plan.h).
//   saved, scratch: naive_plan.h
//   chunks c = [r0, r1): A = sum_c (r1 - r0) * r1 (the rectangles S, dP, dS are computed on) and
//   A' = sum_c (T - r0) * (r1 - r0) (the column blocks P^T dO and dS^T Q read); both are
//   (nc+1)/(2 nc) T^2 for equal chunks (56% at nc = 8, not the causal 50%)
//   mma_flops forward 4*HS*A per head (S GEMM, P V GEMM); backward 4*HS*(A + A') per head
//             (dV, dP, dQ, dK GEMMs; nothing recomputed)
//   bytes   (everything T x T in floatX; k = 1, or 2 for rows over kRegRowCap: the two-pass
//            softmax kernels read each row twice; Tri = T(T+1)/2 the lower triangle)
//           forward  io_fwd + es*B*NH*(A [S written] + k*Tri [softmax reads] + A [P written]
//                    + A [P V reads P])
//           backward es*HS*(R [Q] + 2Rk [K, V] + R [dO] + R [dQ] + 2Rk [dK, dV])
//                    + es*B*NH*(A' [P^T dO] + A [dP written] + 2k*Tri [softmax backward reads
//                    P and dP] + A [dS written] + A [dS K] + A' [dS^T Q])
//                    + (G > 1) 2*R*HS*4*2 (fp32 dK, dV partials written and reduced)

std::string naive_limits(const AttnShape& s, size_t) {
  if (s.HS % 8 != 0)
    return strformat("head size %d is not a multiple of 8 (cuBLAS batched tensor-core GEMMs need "
                     "16-byte aligned heads)", s.HS);
  if ((size_t)s.B * s.NH * s.T > (size_t)INT_MAX)
    return strformat("B*NH*T = %zu rows overflow a 32-bit grid; lower --batch",
                     (size_t)s.B * s.NH * s.T);
  if (((size_t)s.NH + 2 * (size_t)s.NKV) * s.HS > (size_t)INT_MAX)
    return "NH+2*NKV heads * HS overflows cuBLAS's int leading dimension";
  return "";
}
size_t naive_saved(const AttnShape& s, size_t es) { return NaivePlan(s, es).p_bytes; }
size_t naive_scratch(const AttnShape& s, size_t es) { return NaivePlan(s, es).scratch_bytes; }
AttnCost naive_cost(const AttnShape& s, size_t es_) {
  const NaivePlan p(s, es_);
  double A = 0, A2 = 0;
  for (int c = 0; c < p.nc; c++) {
    const double r0 = p.r0(c), r1 = p.r1(c);
    A += (r1 - r0) * r1;
    A2 += ((double)s.T - r0) * (r1 - r0);
  }
  const double es = (double)es_, HS = s.HS, T = s.T, heads = (double)s.B * s.NH, R = heads * T,
               Rk = (double)s.B * s.NKV * T;
  const double k = p.ldP > NaivePlan::kRegRowCap ? 2 : 1, tri = T * (T + 1) / 2;
  AttnCost c = convention(s);
  c.fwd.mma_flops = heads * 4 * HS * A;
  c.bwd.mma_flops = heads * 4 * HS * (A + A2);
  c.fwd.bytes = io_fwd_bytes(s, es_) + es * heads * (3 * A + k * tri);
  c.bwd.bytes = es * HS * (R + 2 * Rk + R + R + 2 * Rk) + es * heads * (2 * A2 + 3 * A + 2 * k * tri) +
                (s.NH > s.NKV ? 2 * R * HS * 4 * 2 : 0);
  return c;
}

// ---------------------------------------------------------------------------------------------
// flash1: FlashAttention-1's loop order on tensor cores (flash1.cu; tile: flash1_tiles.h).
//   saved   = LSE (B, NH, T) fp32
//   scratch = (B, NH, Tp) x (HS + 2) fp32, Tp = T padded to the tile: forward O (HS), m, l;
//             backward dQ (HS), D
//   mma_flops forward 4*HS*tile(T, 64, 64), backward 10*HS*tile(T, 64, 64) per head (no
//             warp-level skipping)
//   bytes   (one block per (b, h) walks every Q tile for each K/V tile j; no L2 reuse is
//            assumed across the j passes, the head's rows are far larger than L2 at long T)
//           forward  per head: K, V read once (2*T*HS*es, per query head: G blocks read a kv
//                    head) and per Q tile i, reaching n_i = floor((min((i+1)*64, T) - 1)/64) + 1
//                    K/V tiles: n_i reads of Q_i (64*HS*es), n_i - 1 round trips of the fp32
//                    accumulators O_i, m_i, l_i (2 * 64*(HS+2)*4: written after every pass but
//                    the last, read before every pass but the first), out_i and LSE_i once
//           backward per head: D = rowsum(dO o O) (O, dO read, D written), K, V read and dK, dV
//                    written once per kv head, and per Q tile n_i loads of Q_i, dO_i (2*64*HS*es)
//                    and LSE_i, D_i (2*64*4), n_i - 1 round trips of the fp32 dQ_i
//                    (2 * 64*HS*4), dQ_i written (es) once

std::string flash1_limits(const AttnShape& s, size_t) { return head_sizes_64_128("flash1", s); }
size_t flash1_saved(const AttnShape& s, size_t) { return lse_bytes(s); }
size_t flash1_scratch(const AttnShape& s, size_t) {
  return (size_t)s.B * s.NH * flash1_padded_T(s.T) * (s.HS + 2) * sizeof(float);
}
AttnCost flash1_cost(const AttnShape& s, size_t es_) {
  const int Br = kFlash1Tile, Tr = ceil_div_int(s.T, Br);
  const double es = (double)es_, HS = s.HS, T = s.T, heads = (double)s.B * s.NH,
               Rk = (double)s.B * s.NKV * T;
  const double area = causal_tile_area(s.T, Br, Br);
  AttnCost c = convention(s);
  c.fwd.mma_flops = heads * 4 * HS * area;
  c.bwd.mma_flops = heads * 10 * HS * area;
  double fwd = 2 * T * HS * es;          // K, V of this head's kv head
  double bwd = 2 * T * HS * es + 4 * T;  // D: O, dO read, D written
  for (int i = 0; i < Tr; i++) {
    const double rows = std::min(Br, s.T - i * Br);
    const double n = (std::min((long long)(i + 1) * Br, (long long)s.T) - 1) / Br + 1;
    fwd += n * rows * HS * es                   // Q_i per pass
           + (n - 1) * 2 * Br * (HS + 2) * 4    // O_i, m_i, l_i round trips
           + rows * HS * es + rows * 4;         // out_i, LSE_i
    bwd += n * (rows * HS * es * 2 + rows * 4 * 2)  // Q_i, dO_i, LSE_i, D_i per pass
           + (n - 1) * 2 * Br * HS * 4              // dQ_i round trips (fp32)
           + rows * HS * es;                        // dQ_i (floatX) once
  }
  c.fwd.bytes = heads * fwd;
  // K, V read and dK, dV written once per kv head (the block of a kv group).
  c.bwd.bytes = heads * bwd + Rk * HS * es * 4;
  return c;
}

// ---------------------------------------------------------------------------------------------
// scalar: one warp per query row on CUDA cores, fp32 (scalar.cu). No tiles: every product is a
// warp-reduced dot product, exact causal triangle.
//   saved   = LSE (B, NH, T) fp32
//   scratch = D (B, NH, T) fp32 (dQ is summed per query row in registers: no accumulator)
//   mma_flops (CUDA-core FLOPs here, so the tensor-core roofline is only a loose floor):
//             forward 4*HS*Tri per head (S, P V); backward 14*HS*Tri per head (dQ pass: S, dP,
//             dQ; dK/dV pass: S, dP, dV, dK), Tri = T(T+1)/2
//   bytes   forward  io_fwd + 4R (K/V rows re-read by the rows of a head come from L2)
//           backward es*HS*(2R [O, dO for D] + 2R + 2Rk [Q, dO, K, V for dQ] + R [dQ]
//                    + 2Rk + 2R [K, V, Q, dO for dK, dV] + 2Rk [dK, dV]) + 4R*5 [D written;
//                    LSE, D read by both passes]

std::string scalar_limits(const AttnShape& s, size_t) {
  if (s.HS != 32 && s.HS != 64 && s.HS != 128)
    return strformat("scalar attention supports head size 32, 64 or 128, not %d; use --attn "
                     "naive", s.HS);
  return "";
}
size_t scalar_saved(const AttnShape& s, size_t) { return lse_bytes(s); }
size_t scalar_scratch(const AttnShape& s, size_t) { return lse_bytes(s); }
AttnCost scalar_cost(const AttnShape& s, size_t es_) {
  const double es = (double)es_, HS = s.HS, T = s.T, heads = (double)s.B * s.NH, R = heads * T,
               Rk = (double)s.B * s.NKV * T, tri = T * (T + 1) / 2;
  AttnCost c = convention(s);
  c.fwd.mma_flops = heads * 4 * HS * tri;
  c.bwd.mma_flops = heads * 14 * HS * tri;
  c.fwd.bytes = io_fwd_bytes(s, es_) + 4 * R;
  c.bwd.bytes = es * HS * (7 * R + 6 * Rk) + 4 * R * 5;
  return c;
}

// ---------------------------------------------------------------------------------------------

const AttnBackendSpec kSpec_flash = {
    "flash",
    "FlashAttention-2 on tensor cores: tiled, online softmax, recomputing backward; saves LSE "
    "(B, NH, T) fp32",
    /*bf16_only=*/true, /*dq_bitwise=*/false, /*deterministic_mode=*/true,
    /*grid_per_head=*/false, /*no_masks=*/nullptr, flash_limits, flash_saved, flash_scratch, flash_cost};
const AttnBackendSpec kSpec_flash3 = {
    "flash3",
    "FlashAttention-3 schedule on sm_90a: producer warp with TMA, consumer warpgroups on wgmma "
    "(3 at HS 64, 2 at HS 128), ping-pong, persistent grid; warp-specialised backward with a "
    "dQ writer warp; saves LSE",
    /*bf16_only=*/true, /*dq_bitwise=*/false, /*deterministic_mode=*/true,
    /*grid_per_head=*/false, /*no_masks=*/nullptr, flash3_limits, flash_saved, flash3_scratch, flash3_cost};
const AttnBackendSpec kSpec_naive = {
    "naive",
    "cuBLAS GEMMs and causal softmax kernels: materialises P and saves it, (B, NH, T, T)",
    /*bf16_only=*/false, /*dq_bitwise=*/true, /*deterministic_mode=*/false,
    /*grid_per_head=*/false, /*no_masks=*/nullptr, naive_limits, naive_saved, naive_scratch, naive_cost};
const AttnBackendSpec kSpec_flash1 = {
    "flash1",
    "FlashAttention-1's loop order on tensor cores: K/V tiles outer, O, m, l in device memory, "
    "one block per head; saves LSE",
    /*bf16_only=*/true, /*dq_bitwise=*/true, /*deterministic_mode=*/false,
    /*grid_per_head=*/true,
    /*no_masks=*/"flash1 runs the causal mask only (its K/V-outer loop order has no per-tile "
    "mask ranges); use --attn flash or flash3 for --mask document or --window",
    flash1_limits, flash1_saved, flash1_scratch, flash1_cost};
const AttnBackendSpec kSpec_scalar = {
    "scalar",
    "one warp per query row on CUDA cores, fp32 online softmax, no tiles: exact and "
    "deterministic (the FP32 build's LSE backend); saves LSE",
    /*bf16_only=*/false, /*dq_bitwise=*/true, /*deterministic_mode=*/false,
    /*grid_per_head=*/false, /*no_masks=*/nullptr, scalar_limits, scalar_saved, scalar_scratch, scalar_cost};

}  // namespace

const std::vector<AttnBackendSpec>& attention_specs() {
#define FLASHGPT_SPEC_ENTRY(name) kSpec_##name,
  static const std::vector<AttnBackendSpec> specs = {FLASHGPT_ATTENTION_BACKENDS(FLASHGPT_SPEC_ENTRY)};
#undef FLASHGPT_SPEC_ENTRY
  return specs;
}

std::vector<std::string> attention_names() {
  std::vector<std::string> names;
  for (const AttnBackendSpec& s : attention_specs()) names.push_back(s.name);
  return names;
}

std::string attention_names_list() {
  std::string list;
  for (const AttnBackendSpec& s : attention_specs()) list += (list.empty() ? "" : ", ") + std::string(s.name);
  return list;
}

const AttnBackendSpec& attention_spec(const std::string& name) {
  for (const AttnBackendSpec& s : attention_specs())
    if (name == s.name) return s;
  THROW_ERROR("--attn '%s' is unknown; use one of: %s", name.c_str(), attention_names_list().c_str());
}

std::string attention_unsupported_reason(const AttnBackendSpec& spec, const AttnShape& s,
                                         size_t es, const MaskSpec& mask) {
  if (s.B < 1 || s.T < 1 || s.NH < 1 || s.NKV < 1 || s.HS < 1)
    return strformat("bad shape B=%d T=%d NH=%d NKV=%d HS=%d (every dim must be >= 1)", s.B, s.T,
                     s.NH, s.NKV, s.HS);
  if (s.NH % s.NKV != 0)
    return strformat("--kv-heads %d does not divide --heads %d", s.NKV, s.NH);
  if (spec.bf16_only && es != 2)
    return strformat("%s runs on bf16 tensor cores and is not in the FP32 build "
                     "(PRECISION=FP32); use --attn scalar or naive there", spec.name);
  const std::string why = spec.limits(s, es);
  if (!why.empty()) return why;
  if (!mask.is_causal() && spec.no_masks) return spec.no_masks;
  return "";
}

std::string attention_auto(const AttnShape& s, size_t es, const MaskSpec& mask) {
  std::string reasons;
  for (const AttnBackendSpec& spec : attention_specs()) {
    const std::string why = attention_unsupported_reason(spec, s, es, mask);
    if (why.empty()) return spec.name;
    reasons += (reasons.empty() ? "" : "; ") + std::string(spec.name) + ": " + why;
  }
  THROW_ERROR("no attention backend runs this model on the GPU (%s); use --device cpu", reasons.c_str());
}

AttnCost attention_cost(const std::string& name, const AttnShape& s, size_t es) {
  CHECK(s.B >= 1 && s.T >= 1 && s.NH >= 1 && s.NKV >= 1 && s.HS >= 1 && s.NH % s.NKV == 0,
        "attention cost: bad shape B=%d T=%d NH=%d NKV=%d HS=%d", s.B, s.T, s.NH, s.NKV, s.HS);
  return attention_spec(name).cost(s, es);
}

double causal_tile_area(int T, int Br, int Bc, bool end_aligned) {
  double tiles = 0;
  const int Tr = ceil_div_int(T, Br);
  for (int i = 0; i < Tr; i++) {
    const long long r1 = end_aligned ? (long long)T - (long long)(Tr - 1 - i) * Br
                                     : std::min((long long)(i + 1) * Br, (long long)T);
    tiles += (r1 - 1) / Bc + 1;  // key tiles up to the tile's last row r1 - 1
  }
  return tiles * Br * Bc;
}

double attention_forward_flops(const AttnShape& s, bool causal) {
  return 4.0 * s.B * s.NH * (double)s.T * s.T * s.HS * (causal ? 0.5 : 1.0);
}

double roofline_seconds(const AttnPassCost& c, double peak_flops, double bytes_per_s) {
  if (peak_flops <= 0 || bytes_per_s <= 0) return 0;
  return std::max(c.mma_flops / peak_flops, c.bytes / bytes_per_s);
}
