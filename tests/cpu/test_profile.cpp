// test_profile.cpp — `flashgpt profile --plan-only` on the CPU build (no GPU anywhere) and its
// option errors. The attention cost model it uses: test_backends.cpp.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "model/memory_plan.h"
#include "test_helpers.h"
#include "bench/profile.h"
#include "bench/profile_report.h"

namespace {

ProfileOptions parse(std::vector<std::string> args) {
  args.insert(args.begin(), "profile");
  return parsed(parse_profile_options, args);
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
  ASSERT_EQ(r.points.size(), 24u);  // flash3, flash, naive x T = 1K .. 128K
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
  // flash3 keeps what flash keeps (the same LSE); its scratch is flash's and one int more, its
  // persistent backward's tile counter (test_backends), so its plan is one 256-byte rounding of
  // the scratch buffer larger at most.
  const ProfilePoint& g128 = point(r, "flash3", 131072);
  EXPECT_EQ(g128.attn_saved_bytes, f128.attn_saved_bytes);
  EXPECT_GT(g128.pred_bytes, f128.pred_bytes);
  EXPECT_LE(g128.pred_bytes - f128.pred_bytes, 256u);
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
  EXPECT_NE(text.find("summary: 24 points planned"), std::string::npos) << text;

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

// d12 at T = 1M, the three long-context modes: layer-but-attn keeps every layer's LSE and runs
// attention's forward once per step; layer keeps one layer of LSE and runs it twice; the plan
// lies between layer's and none's, 11 x (atty + LSE) = 11 x 1584 bytes per token above layer's.
TEST(Profile, PlanOnlyLayerButAttnAtOneMillion) {
  TempDir dir;
  const int T = 1048576;
  std::map<std::string, ProfilePoint> at;
  std::map<std::string, std::string> text;
  for (const char* rc : {"none", "layer-but-attn", "layer"}) {
    ProfileOptions opt = parse({"--plan-only", "--plot=false", "--out", dir.path, "--attn",
                                "flash", "--seq-lens", std::to_string(T), "--recompute", rc,
                                "--gpu-memory", "80"});
    ProfileReport r;
    text[rc] = run_plan(opt, r);
    ASSERT_EQ(r.points.size(), 1u);
    at[rc] = r.points[0];
  }
  EXPECT_NE(text["layer-but-attn"].find("recompute layer-but-attn"), std::string::npos)
      << text["layer-but-attn"];
  const ProfilePoint &none = at["none"], &lba = at["layer-but-attn"], &layer = at["layer"];
  EXPECT_EQ(lba.attn_saved_bytes, size_t(12) * 12 * T * 4);  // LSE of every layer
  EXPECT_EQ(layer.attn_saved_bytes, size_t(12) * T * 4);
  EXPECT_NEAR(lba.attn_flops_step / (12 * 3.5 * lba.cost.fwd.flops), 1.0, 1e-12);
  EXPECT_NEAR(layer.attn_flops_step / (12 * 4.5 * layer.cost.fwd.flops), 1.0, 1e-12);
  EXPECT_EQ(lba.pred_bytes - layer.pred_bytes, size_t(11) * T * (768 * 2 + 12 * 4));
  EXPECT_LT(lba.pred_bytes, none.pred_bytes);
  EXPECT_TRUE(lba.fits) << "d12 at 1M with layer-but-attn should plan under 80 GiB";
  EXPECT_FALSE(none.fits);
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
  bad({"--gpu-memory", "1e308"}, "--gpu-memory");  // not a capacity of 0 after wrapping around
  bad({"--max-step-seconds", "0"}, "--max-step-seconds");
  bad({"--batch", "100000", "--seq-lens", "131072"}, "--batch");
  bad({"--frobnicate"}, "frobnicate");
  bad({"stray"}, "stray");
}

// Capacities up to the limit are taken as given, in bytes.
TEST(Profile, GpuMemoryLargeButValid) {
  TempDir dir;
  ProfileOptions opt = parse({"--plan-only", "--plot=false", "--out", dir.path, "--gpu-memory",
                              "1000000", "--seq-lens", "1024", "--attn", "flash"});
  ProfileReport r;
  run_plan(opt, r);
  EXPECT_EQ(r.capacity_bytes, size_t(1000000) << 30);
  EXPECT_TRUE(point(r, "flash", 1024).fits);
}

// At a T where naive's T x T state passes 2^64 bytes, that point says so (naming --seq-len)
// instead of wrapping around to a total smaller than its parts, and the plan goes on. flash at
// the same T has a plan (hundreds of TiB) whose lines add up to its total, and is unsupported
// (its kernels stop at 4M).
TEST(Profile, PlanOnlyHugeSeqLen) {
  TempDir dir;
  ProfileOptions opt = parse({"--plan-only", "--gpu-memory", "80", "--plot=false", "--out",
                              dir.path, "--seq-lens", "1024,2000000000", "--attn", "naive,flash"});
  ProfileReport r;
  const std::string text = run_plan(opt, r);
  ASSERT_EQ(r.points.size(), 4u);
  const ProfilePoint& n = point(r, "naive", 2000000000);
  EXPECT_FALSE(n.fits);
  EXPECT_NE(n.status.find("2^64 bytes"), std::string::npos) << n.status;
  EXPECT_NE(n.status.find("--seq-len"), std::string::npos) << n.status;
  EXPECT_NE(text.find("naive at T=2000000000: error: "), std::string::npos) << text;
  for (const ProfilePoint& p : r.points) {
    size_t sum = 0;
    for (const MemoryLine& l : p.pred_lines) {
      EXPECT_LE(l.bytes, p.pred_bytes) << p.backend << " " << p.T << " " << l.what;
      sum += l.bytes;
    }
    EXPECT_EQ(sum, p.pred_bytes) << p.backend << " " << p.T;
  }
  const ProfilePoint& f = point(r, "flash", 2000000000);
  EXPECT_FALSE(f.fits);
  EXPECT_NE(f.status.find("unsupported: sequence length"), std::string::npos) << f.status;
  EXPECT_GT(f.pred_bytes, size_t(500000) << 30);  // activations alone are about 530 TiB
  EXPECT_TRUE(point(r, "naive", 1024).fits);
  EXPECT_TRUE(point(r, "flash", 1024).fits);
  EXPECT_NE(text.find("summary: 4 points planned, 2 fit"), std::string::npos) << text;
}

// --plan-only draws the plan's plot (scripts/plot_profile.py, matplotlib): memory_vs_T.png in
// --out, a real PNG. (The other two plots need measurements.)
TEST(Profile, PlanOnlyWritesThePlot) {
  if (plot_python().empty())
    GTEST_SKIP() << "no python3 with matplotlib (apt-get install python3-matplotlib), so the "
                    "plot cannot be drawn";
  TempDir dir;
  ProfileOptions opt = parse({"--plan-only", "--gpu-memory", "80", "--out", dir / "out",
                              "--seq-lens", "1024,4096,16384,65536", "--attn", "flash,naive"});
  ProfileReport r;
  run_plan(opt, r);  // the plot script prints its own "plots: ..." line to stdout
  const std::string png = read_all(dir / "out/memory_vs_T.png");
  ASSERT_GT(png.size(), 10000u) << "no plot in " << dir / "out";
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
}

// --mask: the predicted FLOPs count what the mask leaves. Documents of mean 1024 (--doc-len:
// geometric lengths, whose pairs E[n^2]/2 per document make a share near 2 x 1024 / T) at T 16K
// leave about 1/8 of the causal pairs, a window of 1024 about 1/8 of them too; the
// convention FLOPs scale by exactly the visible pairs' share, the executed matrix FLOPs by the
// tiles'; the memory plan gains the document starts (B x T ints) only.
TEST(Profile, PlanOnlyCountsWhatTheMaskLeaves) {
  TempDir dir;
  const int T = 16384;
  auto plan = [&](std::vector<std::string> mask) {
    std::vector<std::string> args = {"--plan-only", "--plot=false", "--out", dir.path, "--attn",
                                     "flash", "--seq-lens", std::to_string(T), "--gpu-memory",
                                     "80"};
    args.insert(args.end(), mask.begin(), mask.end());
    ProfileReport r;
    run_plan(parse(args), r);
    EXPECT_EQ(r.points.size(), 1u);
    return r.points.at(0);
  };
  const ProfilePoint causal = plan({}), doc = plan({"--mask", "document", "--doc-len", "1024"}),
                     win = plan({"--window", "1024"});
  EXPECT_EQ(causal.mask_pairs_share, 1.0);
  EXPECT_LT(doc.mask_pairs_share, 0.15);
  EXPECT_GT(doc.mask_pairs_share, 0.0);
  const double w = (1024.0 * 1025 / 2 + (T - 1024.0) * 1024) / (T * (T + 1.0) / 2);
  EXPECT_NEAR(win.mask_pairs_share, w, 1e-12);
  for (const ProfilePoint* p : {&doc, &win}) {
    EXPECT_NEAR(p->cost.fwd.flops / causal.cost.fwd.flops, p->mask_pairs_share, 1e-12);
    EXPECT_NEAR(p->cost.bwd.mma_flops / causal.cost.bwd.mma_flops, p->mask_tiles_share, 1e-12);
    EXPECT_GE(p->mask_tiles_share, p->mask_pairs_share);  // whole tiles cover the pairs
    EXPECT_EQ(p->cost.fwd.bytes, causal.cost.fwd.bytes);
  }
  EXPECT_EQ(doc.pred_bytes - causal.pred_bytes, (size_t(causal.B) * T * 4 + 255) / 256 * 256);
  EXPECT_EQ(win.pred_bytes, causal.pred_bytes);
  std::printf("  T %d: documents of mean 1024 leave %.2f%% of the pairs (%.2f%% of the tiles), a "
              "window of 1024 %.2f%% (%.2f%%)\n", T, 100 * doc.mask_pairs_share,
              100 * doc.mask_tiles_share, 100 * win.mask_pairs_share, 100 * win.mask_tiles_share);
}
