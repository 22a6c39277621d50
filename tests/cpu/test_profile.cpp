// test_profile.cpp — `flashgpt profile --plan-only` on the CPU build (no GPU anywhere), its
// option errors, and the attention cost model (kernels/attention/attention_cost.h).
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "kernels/attention/attention_cost.h"
#include "model/memory_plan.h"
#include "test_helpers.h"
#include "train/profile.h"

namespace {

ProfileOptions parse(std::vector<std::string> args) {
  args.insert(args.begin(), "profile");
  Argv a(args);
  ProfileOptions opt;
  EXPECT_TRUE(parse_profile_options(a.argc(), a.argv(), opt));
  return opt;
}

std::string read_all(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Runs the plan and returns what it printed.
std::string run_plan(const ProfileOptions& opt, ProfileReport& r) {
  std::FILE* f = std::tmpfile();
  r = run_profile(opt, f);
  std::fflush(f);
  std::rewind(f);
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  std::fclose(f);
  return text;
}

const ProfilePoint& point(const ProfileReport& r, const std::string& be, int T) {
  for (const ProfilePoint& p : r.points)
    if (p.backend == be && p.T == T) return p;
  ADD_FAILURE() << "no point " << be << " T=" << T;
  return r.points.front();
}

}  // namespace

TEST(Profile, PlanOnlyD12) {
  TempDir dir;
  ProfileOptions opt = parse({"--plan-only", "--gpu-memory", "80", "--plot=false", "--out", dir / "out"});
  ProfileReport r;
  const std::string text = run_plan(opt, r);
  ASSERT_EQ(r.points.size(), 16u);  // flash, naive x T = 1K .. 128K
  const size_t L = 12, NH = 12, HS = 64;

  // naive keeps P (B, NH, T, T) bf16 per layer: at T = 32768, B = 16384 / 32768 -> 1.
  const ProfilePoint& n32 = point(r, "naive", 32768);
  const size_t T = 32768;
  EXPECT_EQ(n32.B, 1);
  EXPECT_EQ(n32.attn_saved_bytes, L * 1 * NH * T * T * 2);
  EXPECT_FALSE(n32.fits);
  EXPECT_NE(text.find("naive at T=32768 needs"), std::string::npos) << text;
  EXPECT_NE(text.find("for attention alone (saved state of 12 layers 288.0 GiB"), std::string::npos)
      << text;
  // flash keeps the fp32 LSE: B*NH*T*4 per layer, and fits at 128K.
  const ProfilePoint& f128 = point(r, "flash", 131072);
  EXPECT_EQ(f128.attn_saved_bytes, L * 1 * NH * 131072 * 4);
  EXPECT_TRUE(f128.fits);
  EXPECT_NE(text.find("flash: every T fits in 80.0 GiB"), std::string::npos) << text;
  // naive at T = 1024 (B = 16) fits; its T x T state is B*NH*T*T*2 per layer.
  const ProfilePoint& n1 = point(r, "naive", 1024);
  EXPECT_EQ(n1.B, 16);
  EXPECT_EQ(n1.attn_saved_bytes, L * 16 * NH * 1024 * 1024 * 2);
  EXPECT_TRUE(n1.fits);

  // Every point's total is the model's own plan; the attention FLOPs per step follow the
  // convention: L x 3.5 x 4*B*NH*T^2*HS/2.
  for (const ProfilePoint& p : r.points) {
    ModelOptions mo;
    mo.config = gpt_preset("d12", 50257, p.T);
    mo.config.rope = 1;
    mo.B = p.B;
    mo.T = p.T;
    mo.attn = p.backend;
    EXPECT_EQ(p.pred_bytes, plan_memory(memory_plan_inputs(mo)).total) << p.backend << " " << p.T;
    const double fwd = 4.0 * p.B * NH * double(p.T) * p.T * HS / 2;
    EXPECT_NEAR(p.attn_flops_step / (L * 3.5 * fwd), 1.0, 1e-12);
    EXPECT_EQ(p.roof_attn_ms, 0.0);  // no ceilings without a GPU
  }
  EXPECT_NE(text.find("summary: 16 points planned"), std::string::npos) << text;

  // CSV: metadata lines, a header, one row per point; JSON beside it.
  const std::string csv = read_all(dir / "out/plan.csv");
  EXPECT_NE(csv.find("# command: flashgpt profile --plan-only"), std::string::npos);
  EXPECT_NE(csv.find("\nbackend,seq_len,batch,tokens,status,fits,pred_bytes,"), std::string::npos);
  EXPECT_NE(csv.find("mem_attention_saved"), std::string::npos);
  int rows = 0;
  std::istringstream lines(csv);
  for (std::string l; std::getline(lines, l);) rows += l.rfind("flash,", 0) == 0 || l.rfind("naive,", 0) == 0;
  EXPECT_EQ(rows, 16);
  const std::string json = read_all(dir / "out/plan.json");
  EXPECT_NE(json.find("\"points\": ["), std::string::npos);
  EXPECT_NE(json.find("\"breakdown_predicted\": {\"parameters\": "), std::string::npos);
}

TEST(Profile, PlanOnlyOptions) {
  TempDir dir;
  // --batch overrides --tokens; learned positions add maxT*C parameters; recompute layer keeps
  // one layer of attention state.
  ProfileOptions opt = parse({"--plan-only", "--plot=false", "--out", dir.path, "--attn", "naive",
                              "--seq-lens", "2048,4096", "--batch", "2", "--recompute", "layer",
                              "--pos", "learned", "--gpu-memory", "40"});
  ProfileReport r;
  const std::string text = run_plan(opt, r);
  ASSERT_EQ(r.points.size(), 2u);
  EXPECT_EQ(r.capacity_bytes, size_t(40) << 30);
  const ProfilePoint& p = point(r, "naive", 4096);
  EXPECT_EQ(p.B, 2);
  EXPECT_EQ(p.attn_saved_bytes, size_t(2) * 12 * 4096 * 4096 * 2);  // one layer deep
  const ProfilePoint& q = point(r, "naive", 2048);
  // The wpe table (T x C floatX + fp32 master, gradient, m, v) grows with T.
  EXPECT_GT(p.pred_lines[0].bytes, q.pred_lines[0].bytes);
  EXPECT_NEAR(double(p.pred_lines[0].bytes - q.pred_lines[0].bytes), 2048.0 * 768 * (2 + 4), 512);
  // With --recompute layer the attention forward runs twice per step.
  EXPECT_NEAR(p.attn_flops_step / (12 * 4.5 * p.cost.fwd.flops), 1.0, 1e-12);
  EXPECT_NE(text.find("recompute layer"), std::string::npos) << text;
}

TEST(Profile, SweepWithoutGpuSaysPlanOnly) {
  TempDir dir;
  ProfileOptions opt = parse({"--out", dir.path, "--plot=false"});
  expect_error([&] { run_profile(opt, stdout); }, "--plan-only");
}

TEST(Profile, BadFlagsNameTheFlag) {
  auto bad = [](std::vector<std::string> args, const std::string& needle) {
    args.insert(args.begin(), "profile");
    Argv a(args);
    ProfileOptions opt;
    const std::string msg =
        expect_error([&] { parse_profile_options(a.argc(), a.argv(), opt); }, needle);
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;  // one line
  };
  bad({"--attn", "flash,fast"}, "--attn 'fast'");
  bad({"--seq-lens", "1024,abc"}, "--seq-lens");
  bad({"--seq-lens", "1024,0"}, "--seq-lens");
  bad({"--tokens", "many"}, "--tokens");
  bad({"--tokens", "0"}, "--tokens");
  bad({"--steps", "0"}, "--steps");
  bad({"--warmup", "-1"}, "--warmup");
  bad({"--recompute", "all"}, "--recompute");
  bad({"--pos", "alibi"}, "--pos");
  bad({"--model", "d99"}, "--model");
  bad({"--gpu-memory", "-5"}, "--gpu-memory");
  bad({"--max-step-seconds", "0"}, "--max-step-seconds");
  bad({"--batch", "100000", "--seq-lens", "131072"}, "--batch");
  bad({"--frobnicate"}, "frobnicate");
  bad({"stray"}, "stray");
}

TEST(Profile, CostModelScaling) {
  auto shape = [](int T) { return AttnShape{1, T, 12, 12, 64}; };
  for (const char* be : {"naive", "flash", "flash1", "flash3"}) {
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

TEST(Profile, Roofline) {
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
}
