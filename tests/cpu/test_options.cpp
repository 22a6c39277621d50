// The command-line modules (train/options.h, bench/options.h, model/cli.h): every
// subcommand's parser, including profile's and the benchmarks', reads its flags into its struct
// and refuses a bad value with one line naming the flag; the validators shared by several
// subcommands (--device, --attn, --pos, --batch and --seq-len) say the same thing wherever they
// run; --attn takes exactly the registry's names (and auto where the subcommand does), so a
// backend added to the registry is accepted and listed in --help with no edit to the options.
// More per-subcommand cases: test_train.cpp (BadInput.TrainOptions, SampleOptions,
// PrepareOptions), test_eval.cpp, test_profile.cpp.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bench/options.h"
#include "kernels/attention/backends.h"
#include "tests/cpu/test_helpers.h"
#include "train/options.h"
#include "train/train.h"

namespace {

// Parses `args` (argv[0] first) with `parse` into o; what the parser returns.
template <typename Options>
bool parse_into(bool (*parse)(int, char**, Options&), std::vector<std::string> args, Options& o) {
  Argv a(std::move(args));
  return parse(a.argc(), a.argv(), o);
}

// Expects the parse to throw one line mentioning `needle`.
template <typename Options>
void expect_refused(bool (*parse)(int, char**, Options&), std::vector<std::string> args,
                    const std::string& needle) {
  Options o;
  SCOPED_TRACE(args[0] + " ... " + args.back());
  const std::string msg = expect_error([&] { parse_into(parse, args, o); }, needle);
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

TEST(Options, PosIsParsedOnceIntoAnEnum) {
  EXPECT_EQ(parse_pos("learned"), PosEncoding::learned);
  EXPECT_EQ(parse_pos("rope"), PosEncoding::rope);
  for (PosEncoding p : {PosEncoding::learned, PosEncoding::rope})
    EXPECT_EQ(parse_pos(pos_name(p)), p);
  expect_error([] { parse_pos("alibi"); }, "--pos 'alibi' is unknown; use learned or rope");
  // The defaults: learned for train, rope for profile.
  EXPECT_EQ(parsed(parse_train_options, {"train", "--bench"}).pos, PosEncoding::learned);
  EXPECT_EQ(parsed(parse_profile_options, {"profile"}).pos, PosEncoding::rope);
  EXPECT_EQ(parsed(parse_train_options, {"train", "--bench", "--pos", "rope"}).pos,
            PosEncoding::rope);
  EXPECT_EQ(parsed(parse_profile_options, {"profile", "--pos", "learned"}).pos,
            PosEncoding::learned);
  expect_refused(parse_profile_options, {"profile", "--pos", "alibi"}, "--pos 'alibi'");
}

// --attn: every registry name is accepted by every subcommand that takes a backend; auto only
// where the subcommand chooses one itself (train, sample, eval); anything else lists the names.
TEST(Options, AttnTakesTheRegistryNames) {
  for (const std::string& name : attention_names()) {
    SCOPED_TRACE(name);
    const TrainOptions t = parsed(parse_train_options, {"train", "--bench", "--attn", name});
    EXPECT_EQ(t.attn, name);
    const SampleOptions s =
        parsed(parse_sample_options, {"sample", "--checkpoint", "m.bin", "--attn", name});
    EXPECT_EQ(s.attn, name);
    const EvalOptions e =
        parsed(parse_eval_options, {"eval", "--checkpoint", "m", "--data", "d", "--attn", name});
    EXPECT_EQ(e.attn, name);
    const ProfileOptions p = parsed(parse_profile_options, {"profile", "--attn", "naive," + name});
    EXPECT_EQ(p.attn, (std::vector<std::string>{"naive", name}));
    const BenchAttentionOptions ba =
        parsed(parse_bench_attention_options, {"bench-attention", "--backends", name});
    EXPECT_EQ(ba.backends, std::vector<std::string>{name});
    const BenchKernelsOptions bk =
        parsed(parse_bench_kernels_options, {"bench-kernels", "--attn", name});
    EXPECT_EQ(bk.attn, name);
  }
  EXPECT_EQ(parse_attn("auto", AttnAuto::allowed), "auto");
  expect_error([] { parse_attn("auto", AttnAuto::refused); }, "--attn 'auto' is unknown");
  const std::string names = attention_names_list();
  expect_refused(parse_train_options, {"train", "--bench", "--attn", "fast"},
                 "--attn 'fast' is unknown; use one of: " + names);
  expect_refused(parse_sample_options, {"sample", "--checkpoint", "m", "--attn", "fast"},
                 "--attn 'fast'");
  expect_refused(parse_eval_options, {"eval", "--checkpoint", "m", "--data", "d", "--attn", "fast"},
                 "--attn 'fast'");
  expect_refused(parse_profile_options, {"profile", "--attn", "flash,auto"}, "--attn 'auto'");
  expect_refused(parse_bench_attention_options, {"bench-attention", "--backends", "naive,fast"},
                 "--attn 'fast'");
  expect_refused(parse_bench_kernels_options, {"bench-kernels", "--attn", "auto"}, "--attn 'auto'");
}

// `cmd --help`: prints the help and stops the command (the parser returns false).
template <typename Options>
std::string help_of(bool (*parse)(int, char**, Options&), const std::string& cmd) {
  Options o;
  testing::internal::CaptureStdout();
  const bool ran = parse_into(parse, {cmd, "--help"}, o);
  const std::string help = testing::internal::GetCapturedStdout();
  EXPECT_FALSE(ran) << cmd << " --help must stop the command";
  // cxxopts wraps long help lines: fold each run of white space into one space.
  std::string flat;
  for (char ch : help) {
    if (ch != ' ' && ch != '\n')
      flat += ch;
    else if (!flat.empty() && flat.back() != ' ')
      flat += ' ';
  }
  return flat;
}

// The help of --attn is built from the registry: every backend, with its summary's head.
TEST(Options, AttnHelpListsTheRegistry) {
  const std::vector<std::string> helps = {help_of(parse_train_options, "train"),
                                          help_of(parse_sample_options, "sample"),
                                          help_of(parse_eval_options, "eval"),
                                          help_of(parse_profile_options, "profile"),
                                          help_of(parse_bench_attention_options, "bench-attention"),
                                          help_of(parse_bench_kernels_options, "bench-kernels")};
  for (const std::string& help : helps)
    for (const AttnBackendSpec& spec : attention_specs()) {
      const std::string summary = spec.summary;
      const std::string entry =
          std::string(spec.name) + " (" + summary.substr(0, summary.find(':')) + ")";
      EXPECT_NE(help.find(entry), std::string::npos) << entry << " missing from: " << help;
    }
  EXPECT_NE(helps[0].find("auto (GPU: the first of"), std::string::npos) << helps[0];
}

// --device, --batch and --seq-len: one validator each, the same message in every subcommand.
TEST(Options, SharedValidatorsSayTheSameEverywhere) {
  expect_refused(parse_train_options, {"train", "--bench", "--device", "tpu"},
                 "--device 'tpu' is unknown; use auto, cpu or cuda");
  expect_refused(parse_sample_options, {"sample", "--checkpoint", "m", "--device", "tpu"},
                 "--device 'tpu' is unknown; use auto, cpu or cuda");
  expect_refused(parse_eval_options,
                 {"eval", "--checkpoint", "m", "--data", "d", "--device", "tpu"},
                 "--device 'tpu' is unknown; use auto, cpu or cuda");
  expect_refused(parse_train_options, {"train", "--bench", "--batch", "0"},
                 "--batch must be at least 1 (got 0)");
  expect_refused(parse_eval_options, {"eval", "--checkpoint", "m", "--data", "d", "--batch", "0"},
                 "--batch must be at least 1 (got 0)");
  expect_refused(parse_bench_kernels_options, {"bench-kernels", "--batch", "0"},
                 "--batch must be at least 1 (got 0)");
  expect_refused(parse_train_options, {"train", "--bench", "--seq-len", "0"},
                 "--seq-len must be at least 1 (got 0)");
  expect_refused(parse_eval_options,
                 {"eval", "--checkpoint", "m", "--data", "d", "--seq-len", "-1"},
                 "--seq-len must be at least 0 (got -1); 0 = the model's maximum");
  // eval reads --seq-len 0 as the model's maximum
  parsed(parse_eval_options, {"eval", "--checkpoint", "m", "--data", "d", "--seq-len", "0"});
  // One forward pass of B*T tokens must be countable in an int, in train and eval alike.
  expect_refused(parse_train_options,
                 {"train", "--bench", "--batch", "65536", "--seq-len", "65536"},
                 "--batch 65536 x --seq-len 65536 = 4294967296 tokens per forward pass");
  expect_refused(
      parse_eval_options,
      {"eval", "--checkpoint", "m", "--data", "d", "--batch", "65536", "--seq-len", "65536"},
      "--batch 65536 x --seq-len 65536 = 4294967296 tokens per forward pass");
  expect_refused(parse_profile_options, {"profile", "--batch", "65536", "--seq-lens", "65536"},
                 "--batch 65536 x --seq-lens 65536");
}

// --tune-matmul: off unless given; timed choices differ between processes, so it cannot go with
// --deterministic's promise of bitwise-repeatable runs.
TEST(Options, TuneMatmul) {
  EXPECT_FALSE(parsed(parse_train_options, {"train", "--bench"}).tune_matmul);
  EXPECT_TRUE(parsed(parse_train_options, {"train", "--bench", "--tune-matmul"}).tune_matmul);
  EXPECT_TRUE(parsed(parse_bench_kernels_options, {"bench-kernels", "--tune-matmul"}).tune_matmul);
  expect_refused(parse_train_options, {"train", "--bench", "--tune-matmul", "--deterministic"},
                 "--tune-matmul with --deterministic: timed algorithm choices differ between "
                 "processes; drop one of them");
}

// A value of the wrong type, also inside a comma-separated list, names its flag; a stray
// argument or an unknown flag names itself, in every subcommand.
TEST(Options, BadValuesNameTheirFlag) {
  expect_refused(parse_train_options, {"train", "--bench", "--steps", "many"},
                 "train: 'many' is not a valid value for --steps");
  expect_refused(parse_sample_options, {"sample", "--checkpoint", "m", "--top-k=few"},
                 "sample: 'few' is not a valid value for --top-k");
  expect_refused(parse_profile_options, {"profile", "--seq-lens", "1024,abc"},
                 "profile: 'abc' is not a valid value for --seq-lens");
  expect_refused(parse_bench_attention_options, {"bench-attention", "--hs", "64,big"},
                 "bench-attention: 'big' is not a valid value for --hs");
  expect_refused(parse_bench_kernels_options, {"bench-kernels", "--batch", "x"},
                 "bench-kernels: 'x' is not a valid value for --batch");
  expect_refused(parse_bench_attention_options, {"bench-attention", "stray"},
                 "bench-attention: unexpected argument 'stray'");
  expect_refused(parse_bench_kernels_options, {"bench-kernels", "--frobnicate"}, "frobnicate");
  expect_refused(parse_export_options, {"export", "--checkpoint", "m", "--out", "o", "extra"},
                 "export: unexpected argument 'extra'");
}

TEST(Options, BenchAttention) {
  const BenchAttentionOptions o = parsed(parse_bench_attention_options, {"bench-attention"});
  const BenchAttentionOptions d;  // the defaults are the struct's
  EXPECT_EQ(o.backends, d.backends);
  EXPECT_EQ(o.head_sizes, d.head_sizes);
  EXPECT_EQ(o.seq_lens, d.seq_lens);
  EXPECT_EQ(o.causal, d.causal);
  EXPECT_EQ(o.tokens, d.tokens);
  EXPECT_EQ(o.iters, d.iters);
  EXPECT_FALSE(o.deterministic);
  EXPECT_EQ(o.csv_path, "");
  // clang-format off
  const BenchAttentionOptions g = parsed(parse_bench_attention_options,
      {"bench-attention", "--backends", "flash", "--hs", "128", "--seq-lens", "17,1000",
       "--causal", "1,0", "--tokens", "4096", "--heads", "8", "--kv-heads", "2", "--warmup", "0",
       "--iters", "3", "--budget-ms", "50", "--warmup-ms", "0", "--idle-ms", "2500",
       "--deterministic", "--csv", "out.csv"});
  // clang-format on
  EXPECT_EQ(g.backends, std::vector<std::string>{"flash"});
  EXPECT_EQ(g.head_sizes, std::vector<int>{128});
  EXPECT_EQ(g.seq_lens, (std::vector<int>{17, 1000}));
  EXPECT_EQ(g.causal, (std::vector<int>{1, 0}));
  EXPECT_EQ(g.tokens, 4096);
  EXPECT_EQ(g.heads, 8);
  EXPECT_EQ(g.kv_heads, 2);
  EXPECT_EQ(g.warmup, 0);
  EXPECT_EQ(g.iters, 3);
  EXPECT_FLOAT_EQ(g.budget_ms, 50);
  EXPECT_FLOAT_EQ(g.warmup_ms, 0);
  EXPECT_FLOAT_EQ(o.warmup_ms, 500);
  EXPECT_FLOAT_EQ(g.idle_ms, 2500);
  EXPECT_FLOAT_EQ(o.idle_ms, 0);
  EXPECT_TRUE(g.deterministic);
  EXPECT_EQ(g.csv_path, "out.csv");
  auto bad = [](std::vector<std::string> args, const std::string& needle) {
    args.insert(args.begin(), "bench-attention");
    expect_refused(parse_bench_attention_options, args, needle);
  };
  bad({"--hs", "0"}, "--hs: 0 is not valid (must be at least 1)");
  bad({"--seq-lens", "512,0"}, "--seq-lens: 0 is not valid");
  bad({"--causal", "2"}, "--causal takes 1 and/or 0, not 2");
  bad({"--tokens", "0"}, "--tokens must be at least 1");
  bad({"--heads", "-1"}, "--heads must be at least 0");
  bad({"--kv-heads", "-2"}, "--kv-heads must be at least 0");
  bad({"--warmup", "-1"}, "--warmup must be at least 0");
  bad({"--iters", "0"}, "--iters must be at least 1");
  bad({"--budget-ms", "0"}, "--budget-ms must be > 0");
  bad({"--warmup-ms", "-1"}, "--warmup-ms must be >= 0");
  bad({"--idle-ms", "-5"}, "--idle-ms must be >= 0");
  bad({"--cp", "0"}, "--cp must be at least 1");
  bad({"--cp", "2", "--deterministic"}, "--deterministic with --cp 2");
  EXPECT_EQ(o.cp, 1);
  EXPECT_EQ(parsed(parse_bench_attention_options, {"bench-attention", "--cp", "4"}).cp, 4);
  // Masks: causal by default; --mask document with --doc-len, --window with either.
  EXPECT_TRUE(o.mask.is_causal());
  EXPECT_EQ(o.doc_len, 0);
  const BenchAttentionOptions m = parsed(parse_bench_attention_options,
      {"bench-attention", "--mask", "document", "--doc-len", "2048", "--window", "1024"});
  EXPECT_EQ(m.mask.kind, MaskKind::kDocument);
  EXPECT_EQ(m.mask.window, 1024);
  EXPECT_EQ(m.doc_len, 2048);
  EXPECT_EQ(parsed(parse_bench_attention_options, {"bench-attention", "--window", "64"}).mask.window,
            64);
  bad({"--mask", "doc"}, "--mask 'doc' is unknown; use one of: causal, document");
  bad({"--window", "-1"}, "--window must be at least 0");
  bad({"--cp", "2", "--window", "8"}, "--cp 2 with --mask document or --window");
}

TEST(Options, BenchKernels) {
  const BenchKernelsOptions o = parsed(parse_bench_kernels_options, {"bench-kernels"});
  EXPECT_EQ(o.only, (std::vector<std::string>{"kernels", "rope", "decode", "step", "tensor"}));
  EXPECT_EQ(o.attn, "naive");
  EXPECT_EQ(o.batch, 32);
  const BenchKernelsOptions g =
      parsed(parse_bench_kernels_options,
             {"bench-kernels", "--only", "step,rope", "--attn", "flash", "--batch", "16"});
  EXPECT_EQ(g.only, (std::vector<std::string>{"step", "rope"}));
  EXPECT_EQ(g.attn, "flash");
  EXPECT_EQ(g.batch, 16);
  expect_refused(parse_bench_kernels_options, {"bench-kernels", "--only", "rope,gemm"},
                 "--only 'gemm' is unknown; use one or more of kernels,rope,decode,step,tensor");
}

}  // namespace

// --cp (context parallelism): the flag, its launch convention in --help, and each refusal as
// one line naming --cp (before any work: the zigzag split's --seq-len >= 2 x --cp too).
TEST(Options, ContextParallelFlag) {
  TempDir d;
  const std::string init = "file://" + d.path + "/id";
  auto world = [&](int w, int rank) {
    return std::vector<std::string>{"train", "--bench", "--world-size", std::to_string(w),
                                    "--rank", std::to_string(rank), "--dist-init", init,
                                    "--batch", "2", "--seq-len", "64"};
  };
  auto with = [](std::vector<std::string> a, std::vector<std::string> extra) {
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  EXPECT_EQ(parsed(parse_train_options, {"train", "--bench"}).cp, 1);
  // world 4 = dp 2 x cp 2: one micro-step takes B x T per dp group, each token once.
  const TrainOptions t = parsed(parse_train_options, with(world(4, 3), {"--cp", "2"}));
  EXPECT_EQ(t.cp, 2);
  EXPECT_EQ(t.total_batch, 2 * 64 * 2);
  // cp == world (dp 1) is fine, and so is gradient accumulation over dp.
  EXPECT_EQ(parsed(parse_train_options, with(world(2, 1), {"--cp", "2"})).total_batch, 2 * 64);
  EXPECT_EQ(parsed(parse_train_options,
                   with(world(4, 0), {"--cp", "2", "--total-batch", "768"})).total_batch, 768);
  // the refusals
  expect_refused(parse_train_options, with(world(2, 0), {"--cp", "0"}),
                 "--cp must be at least 1 (got 0)");
  expect_refused(parse_train_options, with(world(2, 0), {"--cp", "3"}),
                 "--cp 3 does not divide the world size 2");
  expect_refused(parse_train_options, {"train", "--bench", "--cp", "2"},
                 "--cp 2 does not divide the world size 1");
  expect_refused(parse_train_options, with(world(2, 0), {"--cp", "2", "--device", "cpu"}),
                 "--cp 2 splits each sequence over 2 GPUs (CUDA only); --device cpu has none");
  expect_refused(parse_train_options, with(world(2, 0), {"--cp", "2", "--seq-len", "3"}),
                 "--seq-len 3 is shorter than 2 * --cp = 4");
  expect_refused(parse_train_options, with(world(4, 0), {"--cp", "2", "--total-batch", "384"}),
                 "--total-batch 384 is not a multiple of --batch x --seq-len x dp (world size 4 / "
                 "--cp 2) = 2 x 64 x 2 = 256");
  expect_refused(parse_train_options, with(world(2, 0), {"--cp", "two"}),
                 "'two' is not a valid value for --cp");
  // --seq-len 4 is the shortest for --cp 2 (4 chunks of one token)
  EXPECT_EQ(parsed(parse_train_options, with(world(2, 0), {"--cp", "2", "--seq-len", "4"})).cp, 2);
  // --help names the launch convention
  const std::string help = help_text(parse_train_options, {"train", "--help"});
  EXPECT_NE(help.find("--cp arg"), std::string::npos) << help;
  EXPECT_NE(help.find("rank = dp_index * cp + cp_index"), std::string::npos) << help;
}

// profile --cp: plumbed into ProfileOptions (bench/profile.cpp passes it to ModelOptions), with
// the same limits as train's.
TEST(Options, ProfileContextParallelFlag) {
  EXPECT_EQ(parsed(parse_profile_options, {"profile", "--plan-only"}).cp, 1);
  EXPECT_EQ(parsed(parse_profile_options, {"profile", "--plan-only", "--cp", "2"}).cp, 2);
  expect_refused(parse_profile_options, {"profile", "--cp", "0"}, "--cp must be at least 1");
  expect_refused(parse_profile_options,
                 {"profile", "--plan-only", "--seq-lens", "1024,3", "--cp", "2"},
                 "--seq-lens: 3 is shorter than 2 * --cp = 4");
  // Measuring a cp point needs its N GPUs (a cp model has no communicators in one process).
  expect_refused(parse_profile_options, {"profile", "--cp", "2"},
                 "profile --cp 2 plans one GPU of a cp group and needs --plan-only");
  expect_refused(parse_profile_options,
                 {"profile", "--plan-only", "--cp", "2", "--mask", "document", "--doc-len", "64"},
                 "profile --cp 2 --mask ");
}

// --bench-warmup: untimed steps before --bench-steps timed ones (long-context benchmarks keep
// both small: scripts/bench_cp.sh).
TEST(Options, BenchWarmup) {
  EXPECT_EQ(parsed(parse_train_options, {"train", "--bench"}).bench_warmup, 3);
  expect_refused(parse_train_options, {"train", "--bench", "--bench-warmup", "-1"},
                 "--bench-warmup must be at least 0");
  TrainOptions o = parsed(parse_train_options,
                          {"train", "--bench", "--device", "cpu", "--model", "tiny", "--layers", "1",
                           "--channels", "32", "--heads", "2", "--vocab-size", "64", "--seq-len",
                           "8", "--batch", "1", "--bench-warmup", "1", "--bench-steps", "2",
                           "--quiet"});
  EXPECT_EQ(run_train(o).losses.size(), 3u);
  o.bench_warmup = 0;
  EXPECT_EQ(run_train(o).losses.size(), 2u);
}

// --mask and --window: declared once (cli::add_mask_flags), read the same by every subcommand.
// train, eval and sample leave a flag not given unset (the model's: MaskFlags); profile and
// bench-attention read a MaskSpec, with documents from --doc-len (and profile's --data).
TEST(Options, MaskFlags) {
  const TrainOptions none = parsed(parse_train_options, {"train", "--bench"});
  EXPECT_FALSE(none.mask.given());
  EXPECT_TRUE(none.mask.over(MaskSpec{MaskKind::kDocument, 64, -1}).kind == MaskKind::kDocument);
  const TrainOptions t = parsed(parse_train_options,
                                {"train", "--bench", "--mask", "document", "--window", "256"});
  EXPECT_TRUE(t.mask.kind == MaskKind::kDocument);
  EXPECT_EQ(t.mask.window.value_or(-1), 256);
  const TrainOptions w = parsed(parse_train_options, {"train", "--bench", "--window", "8"});
  EXPECT_FALSE(w.mask.kind.has_value());  // the window alone: the kind stays the model's
  EXPECT_EQ(w.mask.over(MaskSpec{MaskKind::kDocument, 0, -1}).window, 8);
  EXPECT_TRUE(w.mask.over(MaskSpec{MaskKind::kDocument, 0, -1}).kind == MaskKind::kDocument);
  EXPECT_EQ(parsed(parse_eval_options, {"eval", "--checkpoint", "m.bin", "--data", "d", "--mask",
                                        "causal"}).mask.kind.value_or(MaskKind::kDocument),
            MaskKind::kCausal);
  EXPECT_EQ(parsed(parse_sample_options, {"sample", "--checkpoint", "m.bin", "--window", "32"})
                .mask.window.value_or(-1), 32);
  const ProfileOptions p = parsed(parse_profile_options, {"profile", "--mask", "document",
                                                          "--doc-len", "2048", "--window", "4096"});
  EXPECT_TRUE(p.mask.kind == MaskKind::kDocument);
  EXPECT_EQ(p.mask.window, 4096);
  EXPECT_EQ(p.doc_len, 2048);
  const BenchAttentionOptions b = parsed(parse_bench_attention_options,
      {"bench-attention", "--mask", "document", "--doc-len", "1024"});
  EXPECT_TRUE(b.mask.kind == MaskKind::kDocument);
  EXPECT_EQ(b.doc_len, 1024);
  EXPECT_TRUE(parsed(parse_bench_attention_options, {"bench-attention"}).mask.is_causal());

  expect_refused(parse_train_options, {"train", "--bench", "--mask", "packed"},
                 "--mask 'packed' is unknown; use one of: causal, document");
  expect_refused(parse_eval_options, {"eval", "--checkpoint", "m.bin", "--data", "d", "--window",
                                      "-1"}, "--window must be at least 0 (got -1); 0 = no limit");
  expect_refused(parse_sample_options, {"sample", "--checkpoint", "m.bin", "--mask", "doc"},
                 "--mask 'doc' is unknown");
  expect_refused(parse_profile_options, {"profile", "--mask", "document"},
                 "--mask document needs documents: give --data DIR (its training shards') or "
                 "--doc-len N");
  expect_refused(parse_bench_attention_options, {"bench-attention", "--mask", "document"},
                 "--mask document needs documents: give --doc-len N");
  expect_refused(parse_bench_attention_options, {"bench-attention", "--doc-len", "512"},
                 "--doc-len gives documents to --mask document; with --mask causal it changes "
                 "nothing: drop it");
  expect_refused(parse_profile_options, {"profile", "--mask", "document", "--doc-len", "-3"},
                 "--doc-len must be at least 0");
  expect_refused(parse_profile_options, {"profile", "--mask", "document", "--doc-len", "8",
                                         "--data", "d"}, "--data and --doc-len both give documents");
}
