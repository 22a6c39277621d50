// test_backends.cpp — the attention backends' CUDA-free specs (kernels/attention/backends.h):
// the registry, limits, saved and scratch bytes (from the tile and plan headers the kernels
// include), determinism flags, and the cost model behind profile's roofline.
#include <cmath>

#include "kernels/attention/backends.h"
#include "kernels/attention/flash1_tiles.h"
#include "kernels/attention/flash3_tiles.h"
#include "kernels/attention/naive_plan.h"
#include "test_helpers.h"

TEST(AttentionSpec, Registry) {
  const std::vector<std::string> names = attention_names();
  ASSERT_GE(names.size(), 4u);
  EXPECT_EQ(names.front(), "flash3");  // --attn auto's first choice
  EXPECT_EQ(attention_names_list(), "flash3, flash, naive, flash1, scalar");
  for (const std::string& n : names) {
    const AttnBackendSpec& s = attention_spec(n);
    EXPECT_EQ(s.name, n);
    EXPECT_GT(std::string(s.summary).size(), 20u) << n;
    EXPECT_EQ(&s, &attention_specs()[&s - attention_specs().data()]);
  }
  const std::string msg = expect_error([] { attention_spec("fast"); }, "--attn 'fast'");
  for (const std::string& n : names) EXPECT_NE(msg.find(n), std::string::npos) << msg;
  expect_error([] { attention_spec("Flash"); }, "--attn 'Flash'");
}

// --attn auto: the first backend in registry order that runs the shape in this build.
TEST(AttentionSpec, Auto) {
  EXPECT_EQ(attention_auto({2, 1024, 12, 4, 64}, 2), "flash3");
  EXPECT_EQ(attention_auto({2, 1024, 12, 4, 128}, 2), "flash3");
  EXPECT_EQ(attention_auto({1, 1048576, 12, 12, 128}, 2), "flash3");  // at every T
  EXPECT_EQ(attention_auto({1, 64, 4, 4, 32}, 2), "naive");   // the tiny preset's HS 32
  EXPECT_EQ(attention_auto({2, 1024, 12, 4, 64}, 4), "naive");  // the FP32 build
  expect_error([] { attention_auto({1, 64, 4, 4, 12}, 2); }, "--device cpu");
}

// Masks (--mask document, --window): every backend but flash1 runs them; flash1 refuses them in
// one line that names the backends that do, and auto skips it.
TEST(AttentionSpec, Masks) {
  const AttnShape s{2, 1024, 12, 4, 64};
  MaskSpec doc, win, both;
  doc.kind = MaskKind::kDocument;
  win.window = 256;
  both.kind = MaskKind::kDocument, both.window = 1024;
  for (const AttnBackendSpec& spec : attention_specs())
    for (const MaskSpec& m : {doc, win, both}) {
      const std::string why = attention_unsupported_reason(spec, s, 2, m);
      if (std::string(spec.name) == "flash1") {
        EXPECT_NE(why.find("--attn flash or flash3"), std::string::npos) << why;
        EXPECT_EQ(why.find('\n'), std::string::npos) << "one line: " << why;
      } else {
        EXPECT_EQ(why, "") << spec.name;
      }
      EXPECT_EQ(attention_unsupported_reason(spec, s, 2, MaskSpec{}), "") << spec.name;
    }
  EXPECT_EQ(attention_auto(s, 2, both), "flash3");
  EXPECT_EQ(attention_auto({1, 64, 4, 4, 32}, 2, doc), "naive");
  // The shape's reason comes first: flash1 at HS 96 names the head size, not the mask.
  const std::string hs = attention_unsupported_reason(attention_spec("flash1"), {1, 64, 4, 4, 96},
                                                      2, doc);
  EXPECT_NE(hs.find("head size"), std::string::npos) << hs;
}

// flash3's forward goes head-major once the K/V of all heads outgrow L2 (flash3_tiles.h): the
// shapes it was measured at on an H100 (50 MiB of L2) fall on the side that measured faster.
TEST(AttentionSpec, Flash3WorkOrder) {
  const long long l2 = 50ll << 20;
  EXPECT_FALSE(flash3::kv_outgrows_l2(1, 12, 16384, 64, l2));   // 48 MiB: row-major kept
  EXPECT_FALSE(flash3::kv_outgrows_l2(4, 12, 4096, 64, l2));    // the same 48 MiB at B 4
  EXPECT_TRUE(flash3::kv_outgrows_l2(4, 16, 4096, 128, l2));    // 128 MiB: head-major, +10%
  EXPECT_TRUE(flash3::kv_outgrows_l2(1, 12, 524288, 64, l2));
  EXPECT_TRUE(flash3::kv_outgrows_l2(1, 4, 1 << 20, 64, l2));   // no int overflow at 1M
}

// flash3's GQA backward runs a block per query head once a kv head's G query heads' rows
// (G x T x HS x 8 bytes) outgrow L2 and a pair group is one query head (flash3_tiles.h): the
// H200 shapes it was measured at (50 MiB, 132 SMs) fall on the side that measured faster.
TEST(AttentionSpec, Flash3BackwardQueryHeadBlocks) {
  const long long l2 = 50ll << 20, sms = 132;
  auto rule = [&](int NH, int NKV, int T, int HS, bool det = false) {
    return flash3::kBwdQueryHeadBlocks(NH, NKV, T, HS, l2, sms, det);
  };
  EXPECT_TRUE(rule(64, 8, 16384, 128));    // 128 MiB: x1.025
  EXPECT_TRUE(rule(64, 8, 32768, 128));    // x1.027
  EXPECT_FALSE(rule(64, 8, 16384, 128, /*det=*/true));
  EXPECT_FALSE(rule(64, 8, 4096, 128));    // 32 MiB: x0.85 as query-head blocks
  EXPECT_FALSE(rule(64, 8, 2048, 128));    // x0.53
  EXPECT_FALSE(rule(12, 4, 16384, 64));    // 24 MiB: x0.974
  EXPECT_FALSE(rule(16, 8, 16384, 128));   // 32 MiB: x1.003
  EXPECT_FALSE(rule(16, 16, 1 << 20, 64)); // no GQA
  EXPECT_FALSE(rule(64, 2, 8192, 64));     // 512 MiB, but 64 K/V tiles: 2 query heads a wave
  EXPECT_TRUE(rule(64, 2, 8448 + 128, 64));
  EXPECT_TRUE(rule(32, 1, 1 << 20, 128));  // no overflow at 1M
}

// flash3's backward runs its blocks in groups of (batch, kv head) pairs, the largest group
// whose blocks fit one wave of the SMs (flash3_tiles.h): the H100 shapes it was measured at
// (132 SMs, K/V tiles of 128 keys) get a group that measured fastest or within noise of it.
TEST(AttentionSpec, Flash3BackwardPairGroup) {
  EXPECT_EQ(flash3::bwd_pair_group(64, 4096 / 128, 132), 4);   // HS 128 B 4 T 4K: 380 -> ~440
  EXPECT_EQ(flash3::bwd_pair_group(16, 8192 / 128, 132), 2);
  EXPECT_EQ(flash3::bwd_pair_group(16, 16384 / 128, 132), 1);
  EXPECT_EQ(flash3::bwd_pair_group(16, 65536 / 128, 132), 1);   // a pair fills the GPU alone
  EXPECT_EQ(flash3::bwd_pair_group(3, 1, 132), 3);               // never more than all pairs
  EXPECT_EQ(flash3::bwd_pair_group(384, 1024 / 128, 132), 16);   // d12 B 32 x T 1K
  EXPECT_EQ(flash3::bwd_pair_group(1, 1ll << 23, 132), 1);       // T 1G: no overflow, at least 1
}

TEST(AttentionSpec, Limits) {
  auto why = [](const char* n, AttnShape s, size_t es = 2) {
    return attention_unsupported_reason(attention_spec(n), s, es);
  };
  for (const char* n : {"flash", "naive", "flash1", "flash3", "scalar"}) {
    EXPECT_EQ(why(n, {2, 1024, 12, 4, 64}), "") << n;
    EXPECT_EQ(why(n, {3, 17, 16, 16, 128}), "") << n;
    EXPECT_NE(why(n, {2, 64, 12, 5, 64}).find("--kv-heads 5"), std::string::npos) << n;
    EXPECT_NE(why(n, {0, 64, 12, 12, 64}).find("bad shape"), std::string::npos) << n;
  }
  // Head sizes: the tensor-core kernels do 64 and 128, scalar also 32, naive multiples of 8.
  EXPECT_NE(why("flash", {1, 64, 4, 4, 32}).find("--attn naive"), std::string::npos);
  EXPECT_NE(why("flash1", {1, 64, 4, 4, 96}), "");
  EXPECT_EQ(why("scalar", {1, 64, 4, 4, 32}), "");
  EXPECT_NE(why("scalar", {1, 64, 4, 4, 96}), "");
  EXPECT_EQ(why("naive", {1, 64, 4, 4, 96}), "");
  EXPECT_NE(why("naive", {1, 64, 4, 4, 12}).find("multiple of 8"), std::string::npos);
  EXPECT_NE(why("flash", {1, (1 << 22) + 1, 4, 4, 64}).find("over 4M"), std::string::npos);
  EXPECT_NE(why("naive", {1 << 20, 4096, 12, 12, 64}).find("--batch"), std::string::npos);
  // The FP32 build (es 4) has no bf16 tensor-core kernels: they say so instead of running
  // something else under their name.
  EXPECT_NE(why("flash3", {1, 64, 4, 4, 32}).find("--attn naive"), std::string::npos);
  for (const char* n : {"flash", "flash1", "flash3"}) {
    EXPECT_TRUE(attention_spec(n).bf16_only) << n;
    EXPECT_NE(why(n, {2, 1024, 12, 4, 64}, 4).find("FP32 build"), std::string::npos) << n;
  }
  for (const char* n : {"naive", "scalar"}) EXPECT_EQ(why(n, {2, 1024, 12, 4, 64}, 4), "") << n;
}

TEST(AttentionSpec, SavedAndScratchBytes) {
  const AttnShape s{3, 1000, 12, 4, 64};
  const size_t rows = 3 * 12 * 1000;
  for (size_t es : {2, 4}) {
    // The LSE backends save B*NH*T fp32 whatever floatX is.
    for (const char* n : {"flash", "flash1", "flash3", "scalar"})
      EXPECT_EQ(attention_spec(n).saved_bytes(s, es), rows * 4) << n;
    // dQacc, D, and one int per (b, h, 128-row backward Q tile at HS 64): the semaphores of
    // --deterministic. flash3's backward uses flash's scratch and one int more, its persistent
    // blocks' tile counter (its forward needs one int of it); with GQA (here 12 query heads on 4
    // kv heads) then its query-head blocks' turns, one int per (b, kv head, 128-key tile), and,
    // 16-byte aligned, their fp32 dK, dV accumulator (B, T, 2, NKV, HS).
    const size_t sems = 3 * 12 * 8 * 4, flash_bytes = rows * (64 + 1) * 4 + sems;
    EXPECT_EQ(attention_spec("flash").scratch_bytes(s, es), flash_bytes);
    EXPECT_EQ(flash_bytes, 9361152u);  // + 4 (counter) + 3 x 4 x 8 x 4 (turns) = 9361540 -> 9361552
    EXPECT_EQ(attention_spec("flash3").scratch_bytes(s, es),
              9361552u + size_t(3) * 1000 * 2 * 4 * 64 * 4);
    const AttnShape mha{3, 1000, 12, 12, 64};
    EXPECT_EQ(attention_spec("flash3").scratch_bytes(mha, es),
              attention_spec("flash").scratch_bytes(mha, es) + 4);
    EXPECT_EQ(attention_spec("scalar").scratch_bytes(s, es), rows * 4);            // D
    // flash1: O, m, l (forward) or dQ, D (backward) per row of T padded to its tile.
    EXPECT_EQ(flash1_padded_T(1000), 1024u);
    EXPECT_EQ(attention_spec("flash1").scratch_bytes(s, es), 3 * 12 * 1024 * (64 + 2) * 4u);
    // naive: P (B, NH, T, T rounded up to 8) floatX; scratch adds dP, the GQA partials and the
    // GEMM pointer arrays.
    EXPECT_EQ(attention_spec("naive").saved_bytes(s, es), rows * 1000 * es);
    const NaivePlan p(s, es);
    EXPECT_EQ(p.nc, 4);  // T = 1000: 4 chunks of 256 rows
    EXPECT_EQ(p.Tc, 256);
    const size_t ptrs = (10 * 4 * 3 * 12 * 8 + 255) / 256 * 256,
                 partial = (rows * 64 * 4 + 255) / 256 * 256;
    EXPECT_EQ(attention_spec("naive").scratch_bytes(s, es),
              ptrs + (rows * 1000 * es + 255) / 256 * 256 + 2 * partial);
  }
  // T not a multiple of 8: P rows padded; no GQA: no partials.
  const AttnShape r{4, 1023, 12, 12, 64};
  EXPECT_EQ(attention_spec("naive").saved_bytes(r, 2), size_t(4) * 12 * 1023 * 1024 * 2);
  EXPECT_EQ(NaivePlan(r, 2).partial_bytes, 0u);
  // Chunking: one chunk up to 256 rows, then at most 8 of >= 256 rows, multiples of 64.
  EXPECT_EQ(NaivePlan({1, 256, 1, 1, 64}, 2).nc, 1);
  EXPECT_EQ(NaivePlan({1, 257, 1, 1, 64}, 2).nc, 2);
  EXPECT_EQ(NaivePlan({1, 131072, 1, 1, 64}, 2).nc, 8);
  EXPECT_EQ(NaivePlan({1, 131072, 1, 1, 64}, 2).Tc, 16384);
}

// At a T where P (B*NH*T*T) passes 2^64 bytes the sizes are an error naming the flag, not a
// number that wrapped around.
TEST(AttentionSpec, NaiveSizesDoNotWrapAround) {
  const AttnShape s{1, 2000000000, 12, 12, 64};
  expect_error([&] { attention_spec("naive").saved_bytes(s, 2); }, "--seq-len");
  expect_error([&] { attention_spec("naive").scratch_bytes(s, 2); }, "--seq-len");
  expect_error([&] { attention_cost("naive", s, 2); }, "--seq-len");
  // flash stays linear in T: no overflow at the same T.
  EXPECT_EQ(attention_spec("flash").saved_bytes(s, 2), size_t(12) * 2000000000 * 4);
}

TEST(AttentionSpec, Determinism) {
  // flash and flash3 (one backward) sum dQ with reduce-adds in arrival order unless
  // --deterministic; every other backend is bitwise and has no switch.
  for (const char* n : {"flash", "flash3"}) {
    EXPECT_FALSE(attention_spec(n).dq_bitwise) << n;
    EXPECT_TRUE(attention_spec(n).deterministic_mode) << n;
  }
  for (const char* n : {"naive", "flash1", "scalar"}) {
    EXPECT_TRUE(attention_spec(n).dq_bitwise) << n;
    EXPECT_FALSE(attention_spec(n).deterministic_mode) << n;
  }
  // flash1's grid is one block per head (profile scales its time guess by busy SMs).
  EXPECT_TRUE(attention_spec("flash1").grid_per_head);
  EXPECT_FALSE(attention_spec("flash").grid_per_head);
}

TEST(AttentionSpec, CostModelScaling) {
  auto shape = [](int T) { return AttnShape{1, T, 12, 12, 64}; };
  for (const char* be : {"naive", "flash", "flash1", "flash3", "scalar"}) {
    const AttnCost a = attention_cost(be, shape(8192), 2);
    // The FLOPs convention is the backend's useful work, equal for every backend; the executed
    // matrix FLOPs are at least that (masked diagonal tiles, naive's chunk rectangles).
    EXPECT_EQ(a.fwd.flops, attention_forward_flops(shape(8192), true));
    EXPECT_EQ(a.bwd.flops, 2.5 * a.fwd.flops);
    EXPECT_GE(a.fwd.mma_flops, a.fwd.flops);
    EXPECT_LE(a.fwd.mma_flops, 1.2 * a.fwd.flops) << be;
    EXPECT_GE(a.bwd.mma_flops, 0.8 * a.bwd.flops) << be;  // naive recomputes nothing
  }
  // Causal halves the convention.
  EXPECT_EQ(attention_forward_flops(shape(4096), true), 0.5 * attention_forward_flops(shape(4096), false));
  EXPECT_EQ(attention_forward_flops(shape(4096), false), 4.0 * 12 * 4096.0 * 4096 * 64);
  // naive's chunk rectangles: (nc+1)/(2 nc) of T^2 at nc = 8 -> 9/16, not 1/2.
  const AttnCost n8k = attention_cost("naive", shape(8192), 2);
  EXPECT_NEAR(n8k.fwd.mma_flops / (2 * n8k.fwd.flops), 9.0 / 16, 1e-9);

  // Bytes: flash linear in T, naive and flash1 quadratic.
  for (int T : {4096, 16384}) {
    const double f = attention_cost("flash", shape(2 * T), 2).fwd.bytes /
                     attention_cost("flash", shape(T), 2).fwd.bytes;
    const double fb = attention_cost("flash", shape(2 * T), 2).bwd.bytes /
                      attention_cost("flash", shape(T), 2).bwd.bytes;
    const double n = attention_cost("naive", shape(2 * T), 2).fwd.bytes /
                     attention_cost("naive", shape(T), 2).fwd.bytes;
    const double nb = attention_cost("naive", shape(2 * T), 2).bwd.bytes /
                      attention_cost("naive", shape(T), 2).bwd.bytes;
    const double f1 = attention_cost("flash1", shape(2 * T), 2).fwd.bytes /
                      attention_cost("flash1", shape(T), 2).fwd.bytes;
    EXPECT_NEAR(f, 2.0, 1e-9) << T;
    EXPECT_NEAR(fb, 2.0, 1e-9) << T;
    EXPECT_NEAR(n, 4.0, 0.1) << T;
    EXPECT_NEAR(nb, 4.0, 0.1) << T;
    EXPECT_NEAR(f1, 4.0, 0.2) << T;
  }
  // Flash at fixed tokens: bytes do not depend on how they are split into sequences.
  EXPECT_NEAR(attention_cost("flash", AttnShape{16, 1024, 12, 12, 64}, 2).fwd.bytes,
              attention_cost("flash", AttnShape{1, 16384, 12, 12, 64}, 2).fwd.bytes, 1.0);
  // flash's minimum forward traffic is Q, K, V, O in bf16 + the fp32 LSE.
  const double R = 12.0 * 4096;
  EXPECT_EQ(attention_cost("flash", shape(4096), 2).fwd.bytes, 2.0 * 64 * 4 * R + 4 * R);
  // The naive forward moves the T x T matrix ~4 times over its chunk rectangles.
  const double rect = 12.0 * 9 / 16 * 8192.0 * 8192;
  EXPECT_NEAR(n8k.fwd.bytes / (2 * rect), 3.9, 0.1);
  EXPECT_GT(attention_cost("flash1", shape(16384), 2).fwd.bytes,
            20 * attention_cost("flash", shape(16384), 2).fwd.bytes);
  // fp32 floatX doubles the flash I/O.
  EXPECT_GT(attention_cost("flash", shape(4096), 4).fwd.bytes,
            1.9 * attention_cost("flash", shape(4096), 2).fwd.bytes);
  expect_error([&] { attention_cost("slow", shape(64), 2); }, "--attn");
}

TEST(AttentionSpec, Roofline) {
  AttnPassCost c;
  c.mma_flops = 1e12;
  c.bytes = 1e9;
  EXPECT_DOUBLE_EQ(roofline_seconds(c, 1e15, 1e12), 1e-3);  // both 1 ms
  EXPECT_DOUBLE_EQ(roofline_seconds(c, 1e14, 1e12), 1e-2);  // compute-bound
  EXPECT_DOUBLE_EQ(roofline_seconds(c, 1e15, 1e11), 1e-2);  // memory-bound
  EXPECT_EQ(roofline_seconds(c, 0, 1e12), 0.0);             // unknown ceiling
  // With H100-like ceilings flash is compute-bound and naive memory-bound at long T, so the
  // predicted flash-over-naive speedup grows with T.
  auto speedup = [](int T) {
    const AttnShape s{std::max(1, 16384 / T), T, 12, 12, 64};
    const AttnCost n = attention_cost("naive", s, 2), f = attention_cost("flash", s, 2);
    const double peak = 700e12, bw = 2.6e12;
    return (roofline_seconds(n.fwd, peak, bw) + roofline_seconds(n.bwd, peak, bw)) /
           (roofline_seconds(f.fwd, peak, bw) + roofline_seconds(f.bwd, peak, bw));
  };
  EXPECT_GT(speedup(1024), 1.0);
  EXPECT_GT(speedup(8192), speedup(1024));
  // The causal tile area: a whole square tile per diagonal tile.
  EXPECT_EQ(causal_tile_area(128, 64, 64), 3.0 * 64 * 64);
  EXPECT_EQ(causal_tile_area(100, 64, 64), 3.0 * 64 * 64);
  EXPECT_EQ(causal_tile_area(64, 128, 64), 1.0 * 128 * 64);
  // End-aligned row tiles (flash3's forward): T 320, Br 192: rows -64..127 (1 key tile of 128)
  // and 128..319 (3), against 0..191 (2) and 192..319 (3) from the start.
  EXPECT_EQ(causal_tile_area(320, 192, 128, true), 4.0 * 192 * 128);
  EXPECT_EQ(causal_tile_area(320, 192, 128, false), 5.0 * 192 * 128);
  EXPECT_EQ(causal_tile_area(4096, 128, 128, true), causal_tile_area(4096, 128, 128, false));
}
