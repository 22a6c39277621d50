// attention_cost — FLOPs and minimum HBM bytes of each GPU attention backend (naive, flash,
// flash1, flash3), forward and backward, as functions of the shape: the inputs of the roofline that
// `flashgpt profile` predicts attention time from (DESIGN.md, performance protocol). Host
// code; the tile sizes below are the kernels' (keep in step with the files named).
//
// Notation: R = B*NH*T query rows, Rk = B*NKV*T key/value rows, es = sizeof(floatX) (2 for
// bf16), G = NH/NKV. All backends are causal.
//
// FLOPs, two numbers per pass:
//   flops      the convention (DESIGN.md), the same for every backend:
//                forward = 4*B*NH*T^2*HS, halved when causal (attention_forward_flops);
//                backward = 2.5 x forward.
//   mma_flops  the matrix FLOPs the kernels actually execute, used by the roofline:
//                tile(T, Br, Bc) = Br*Bc * #{(i, j) : j*Bc <= min((i+1)*Br, T) - 1}, the area
//                of the Br x Bc tiles touching the causal triangle (diagonal tiles are computed
//                whole, masked entries included; padded rows of a ragged last tile too).
//     flash   forward  4*HS*tile(T, Br, Bc) per head, flash_fwd.cu: HS 64 Br 128 Bc 64,
//                      HS 128 Br 128 Bc 32 (S = Q K^T and O = P V)
//             backward 10*HS*tile(T, rows, keys) per head (recomputed S, dP, dV, dK, dQ),
//                      flash_bwd.cu: HS 64 skips per warp (16 keys) and query chunk (CQ = 32
//                      rows): tile(T, 32, 16); HS 128 per warpgroup (64 keys) and Q tile
//                      (Br = 64): tile(T, 64, 64)
//     flash3  forward  4*HS*tile(T, 128, 128), backward 10*HS*tile(T, Br, 64) with the backward
//                      Br of flash3_tiles.h (HS 64: 128, HS 128: 64); bytes as flash plus the
//                      dQ-order semaphores (4 bytes per head and backward Q tile)
//     flash1  forward  4*HS*tile(T, 64, 64), backward 10*HS*tile(T, 64, 64) (flash1.cu, Br = Bc
//                      = 64, no warp-level skipping)
//     naive   row chunks c = [r0, r1) of Tc rows (naive.cu's Plan: one chunk when T <= 256,
//             else nc = min(8, ceil(T/256)) chunks of Tc = roundup(ceil(T/nc), 64) rows);
//             A = sum_c (r1 - r0) * r1 (the rectangles S, dP, dS are computed on) and
//             A' = sum_c (T - r0) * (r1 - r0) (the column blocks P^T dO and dS^T Q read); both
//             are (nc+1)/(2 nc) T^2 for equal chunks (56% at nc = 8, not the causal 50%)
//             forward  4*HS*A per head (S GEMM, P V GEMM);
//             backward 4*HS*(A + A') per head (dV, dP, dQ, dK GEMMs; nothing recomputed)
//
// Minimum HBM bytes: what the backend's schedule must move through device memory, counting
// each input read and each output written once, plus every intermediate that the schedule
// keeps in device memory between passes (written and read each time). Re-reads of input tiles
// that the kernels leave to L2 (K/V per Q tile in flash forward, Q/dO per K/V tile in flash
// backward, K per row chunk in naive's GEMMs) and flash's dQ reduce-adds (done in L2 by the
// copy engine, cp.reduce.async.bulk) are not counted.
//   io_fwd = es*HS*(2R + 2Rk)                               Q, K, V read; O written
//   flash   forward  io_fwd + 4R                            LSE written
//           backward es*HS*(R [O] + 2R [dO, read by the D kernel and the main kernel] + R [Q]
//                    + 2Rk [K, V] + 2Rk [dK, dV] + R [dQ]) + 4R*HS*2 [dQacc zeroed, read back
//                    by the dQ kernel] + 4R*3 [LSE read, D written and read]
//   flash1  (one block per (b, h) walks every Q tile for each K/V tile j; no L2 reuse is
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
//   naive   (everything T x T in floatX; k = 1, or 2 when T > 32768: the two-pass loop
//            softmax kernels read each row twice; Tri = T(T+1)/2 the lower triangle)
//           forward  io_fwd + es*B*NH*(A [S written] + k*Tri [softmax reads] + A [P written]
//                    + A [P V reads P])
//           backward es*HS*(R [Q] + 2Rk [K, V] + R [dO] + R [dQ] + 2Rk [dK, dV])
//                    + es*B*NH*(A' [P^T dO] + A [dP written] + 2k*Tri [softmax backward reads
//                    P and dP] + A [dS written] + A [dS K] + A' [dS^T Q])
//                    + (G > 1) 2*R*HS*4*2 (fp32 dK, dV partials written and reduced)
//
// Roofline (roofline_seconds): time of a pass = max(mma_flops / peak FLOP/s, bytes / bandwidth),
// forward and backward separately, with the ceilings measured on the GPU at the start of the
// run (train/ceilings.h: cuBLAS bf16 GEMM rate, device-to-device copy bandwidth). It is a floor:
// a kernel at its roofline would reach the GPU's best matmul rate or copy bandwidth.
//
// Test: build/test_cpu --gtest_filter='Profile*'  (tests/cpu/test_profile.cpp)
#pragma once
#include <cstddef>
#include <string>

#include "kernels/attention/attention_ref.h"  // AttnShape

struct AttnPassCost {
  double flops = 0;      // the FLOPs convention (useful work)
  double mma_flops = 0;  // matrix FLOPs the kernels execute
  double bytes = 0;      // minimum HBM bytes
};

struct AttnCost {
  AttnPassCost fwd, bwd;
};

// Forward FLOPs by the convention: 4*B*NH*T^2*HS, halved when causal.
double attention_forward_flops(const AttnShape& s, bool causal);

// Costs of one attention call (one layer) of backend `name` on shape s with floatX of es
// bytes. Unknown name: throws naming --attn.
AttnCost attention_cost(const std::string& name, const AttnShape& s, size_t es);

// max(mma_flops / peak_flops, bytes / bytes_per_s) in seconds; 0 when a ceiling is unknown (<= 0).
double roofline_seconds(const AttnPassCost& c, double peak_flops, double bytes_per_s);

// Area (elements) of the Br x Bc tiles that touch the causal triangle of a T x T matrix.
double causal_tile_area(int T, int Br, int Bc);
