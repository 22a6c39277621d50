// test_step_breakdown — scripts/step_breakdown.py (ncu's per-kernel durations of a training step,
// grouped per category) and its claim in scripts/results_table.py, on a small ncu CSV written
// here: the steps read from the program's output, the set-up kernel left out, the categories'
// per-step times and shares, the bench line's step and MFU, and one error line for a file that
// is not ncu's CSV.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <string>

#include "tests/cpu/test_helpers.h"

namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Two steps (the program's output says "step k/2"); per step: GEMM 2 launches x 1 ms, attention
// 0.5 ms, classifier 0.25, dbias 0.1 (a value with ncu's thousands separator), reductions 0.05,
// other 0.05: 2.95 ms. The master-weight copy runs once: set-up.
void write_ncu_csv(const std::string& path) {
  std::ofstream f(path);
  f << "==PROF== Connected to process 1 (build/flashgpt)\n"
       "step     1/2 | loss 10.97 | 5249.6 ms\n"
       "step     2/2 | loss 10.97 | 4638.1 ms\n"
       "\"ID\",\"Process ID\",\"Process Name\",\"Host Name\",\"Kernel Name\",\"Context\",\"Stream\","
       "\"Block Size\",\"Grid Size\",\"Device\",\"CC\",\"Section Name\",\"Metric Name\",\"Metric Unit\","
       "\"Metric Value\"\n";
  int id = 0;
  auto row = [&](const std::string& kernel, const std::string& ns) {
    f << "\"" << id++ << "\",\"1\",\"flashgpt\",\"127.0.0.1\",\"" << kernel
      << "\",\"1\",\"13\",\"(256, 1, 1)\",\"(1, 1, 1)\",\"0\",\"9.0\",\"Command line profiler "
         "metrics\",\"gpu__time_duration.sum\",\"ns\",\""
      << ns << "\"\n";
  };
  row("<unnamed>::copy_float_to_floatX_kernel(__nv_bfloat16 *, const float *, unsigned long)",
      "390,000");
  for (int step = 0; step < 2; step++) {
    row("void <unnamed>::encoder_forward_kernel<1>(__nv_bfloat16 *, const int *, int)", "50,000");
    row("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "1,000,000");
    row("void flash3::flash3_fwd_kernel<flash3::Fwd3Tile<64, 1>, 0, 0>(CUtensorMap_st)", "500,000");
    row("nvjet_sm90_tss_192x192_64x3_2x1_v_bx_coopB_splitK_NTN", "1,000,000");
    row("void <unnamed>::classifier_kernel<8>(float *, __nv_bfloat16 *, const int *)", "250,000");
    row("void <unnamed>::bias_partials_kernel<8>(float *, const __nv_bfloat16 *, int, int)",
        "100,000");
    row("void reduce_partials_kernel<0>(float *, float *, const float *, int, int, int)", "50,000");
  }
}

TEST(StepBreakdown, GroupsKernelsPerStep) {
  if (access("scripts/step_breakdown.py", R_OK) != 0) GTEST_SKIP() << "run from the repository root";
  TempDir d;
  write_ncu_csv(d / "ncu.csv");
  {
    std::ofstream b(d / "step.log");
    b << "bench: Fake GPU d12 attn=flash3 B=32 T=1024 world=1 cp=1 dp=1 | median 57.70 ms/step | "
         "567880 tokens/s (567880 per GPU) | MFU 46.1% | peak memory 12.54 GiB\n";
  }
  int rc = std::system(("python3 scripts/step_breakdown.py " + (d / "ncu.csv") + " --bench-log " +
                        (d / "step.log") + " > " + (d / "out") + " 2>&1").c_str());
  const std::string out = read_all(d / "out");
  ASSERT_EQ(WEXITSTATUS(rc), 0) << out;
  EXPECT_NE(out.find("real step (train --bench, no ncu): 57.70 ms, 567880 tokens/s, MFU 46.1%"),
            std::string::npos) << out;
  EXPECT_NE(out.find("GPU time per step under ncu: 2.95 ms in 7 launches"), std::string::npos) << out;
  // 2 / 2.95 = 67.8%, 0.5 / 2.95 = 16.9%, 0.25 / 2.95 = 8.5%, 0.1 / 2.95 = 3.4%, 0.05: 1.7%.
  for (const char* line : {"| GEMM | 2.00 | 67.8% | 2 |", "| attention | 0.50 | 16.9% | 1 |",
                           "| classifier | 0.25 | 8.5% | 1 |", "| dbias | 0.10 | 3.4% | 1 |",
                           "| reductions | 0.05 | 1.7% | 1 |", "| other | 0.05 | 1.7% | 1 |"})
    EXPECT_NE(out.find(line), std::string::npos) << line << "\n" << out;
  EXPECT_NE(out.find("| nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT | GEMM | 1.000 | 33.9% | 1 |"),
            std::string::npos) << out;
  EXPECT_NE(out.find("left out as set-up (fewer launches than steps): "
                     "<unnamed>::copy_float_to_floatX_kernel (0.195 ms)"), std::string::npos) << out;

  // The claim's collector and renderer give the same tables.
  ASSERT_EQ(run_results_table(d, "step-breakdown",
                              "ncu=" + (d / "ncu.csv") + " bench=" + (d / "step.log")),
            0)
      << read_all(d / "log");
  const std::string table = read_all(d / "table.md");
  EXPECT_NE(table.find(out), std::string::npos) << table << "\n---\n" << out;

  // Not ncu's CSV: one line naming the file, non-zero exit.
  rc = std::system(("python3 scripts/step_breakdown.py " + (d / "step.log") + " > " + (d / "err") +
                    " 2>&1").c_str());
  EXPECT_NE(WEXITSTATUS(rc), 0);
  const std::string err = read_all(d / "err");
  EXPECT_NE(err.find("no ncu CSV header in '" + (d / "step.log") + "'"), std::string::npos) << err;
}

}  // namespace
