// test_results_attention_ceilings — the attention-ceilings claim's collector and renderer in
// scripts/results_table.py, on a small `bench-kernels --only tensor` log and an ncu CSV written
// here: each rate row read (warpgroups, rate, per SM and clock, share of peak; MUFU's in Gop/s
// with no warpgroup count, the packed form's too), the median over two rounds, the kernel's pass
// and HS from its name, its duration in base units turned into us, its TFLOP/s by DESIGN.md's
// count at ncu's clock, its eligible warps, shared-memory pipe and stall reasons in their own
// table, and one error line for a file with neither.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "tests/cpu/test_helpers.h"

namespace {

void write_tensor_log(const std::string& path, const char* tflops) {
  std::ofstream f(path);
  f << "bench-kernels on Fake GPU (100 SMs), bf16\n"
       "tensor: wgmma back to back (no loads, no softmax), per SM and clock against the dense "
       "bf16 peak of 4096; MUFU.EX2 against 16:\n"
       "  product                                              WGs   TFLOP/s FLOP/clk/SM of peak\n"
       "  S = Q K^T, HS 64 (m64n128k16 SS x 4)                   2     " << tflops
    << "        4096  100.0%\n"
       "  MUFU.EX2 (ex2.approx.ftz.f32)                          -    3000.0       16.00  100.0%"
       "   (Gop/s; exponentials per SM and clock against 16)\n"
       "  MUFU.EX2 bf16x2 (ex2.approx.ftz.bf16x2)                -    2900.0       15.50   96.9%"
       "   (Gop/s; exponentials per SM and clock against 16)\n";
}

// One forward kernel at HS 64: 1,000,000 ns at 1.5e9 cycles per second.
void write_ncu_csv(const std::string& path) {
  std::ofstream f(path);
  f << "bench-attention on Fake GPU\n"
       "\"ID\",\"Process ID\",\"Process Name\",\"Host Name\",\"Kernel Name\",\"Context\",\"Stream\","
       "\"Block Size\",\"Grid Size\",\"Device\",\"CC\",\"Section Name\",\"Metric Name\",\"Metric Unit\","
       "\"Metric Value\"\n";
  auto row = [&](const char* metric, const char* unit, const char* value) {
    f << "\"0\",\"1\",\"flashgpt\",\"127.0.0.1\",\"void flash3::flash3_fwd_kernel<flash3::Fwd3Tile<64, "
         "1>, 0, 0>(CUtensorMap_st, Fwd3Args)\",\"1\",\"7\",\"(512, 1, 1)\",\"(100, 1, 1)\",\"0\","
         "\"9.0\",\"Command line profiler metrics\",\""
      << metric << "\",\"" << unit << "\",\"" << value << "\"\n";
  };
  row("gpu__time_duration.sum", "nsecond", "1,000,000");
  row("sm__cycles_elapsed.avg.per_second", "cycle/second", "1500000000");
  row("sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active", "%", "61.5");
  row("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active", "%", "58.25");
  row("smsp__issue_active.avg.pct_of_peak_sustained_active", "%", "55.5");
  row("smsp__warps_eligible.avg.per_cycle_active", "warp", "1.06");
  row("l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed", "%", "39.0");
  const char* stalls[][2] = {{"wait", "1.51"},         {"long_scoreboard", "0.47"},
                             {"barrier", "0.31"},      {"dispatch_stall", "0.80"},
                             {"mio_throttle", "0.39"}, {"short_scoreboard", "0.17"},
                             {"gmma", "0.08"},         {"not_selected", "0.90"}};
  for (const auto& st : stalls)
    row(("smsp__average_warps_issue_stalled_" + std::string(st[0]) + "_per_issue_active.ratio").c_str(),
        "", st[1]);
}

TEST(ResultsTable, AttentionCeilings) {
  if (access("scripts/results_table.py", R_OK) != 0) GTEST_SKIP() << "run from the repository root";
  TempDir d;
  write_tensor_log(d / "t1.log", "800.0");
  write_tensor_log(d / "t2.log", "900.0");
  write_ncu_csv(d / "ncu.csv");
  ASSERT_EQ(run_results_table(d, "attention-ceilings", "tensor=" + (d / "t1.log") + " tensor=" +
                                                           (d / "t2.log") + " ncu=" + (d / "ncu.csv")),
            0)
      << read_text(d / "log");
  const std::string table = read_text(d / "table.md");
  // 2 B NH T^2 HS = 2 x 12 x 16384^2 x 64 FLOP in 1 ms: 412.3 TFLOP/s; the peak at 1.5 GHz on
  // 100 SMs: 614.4 TFLOP/s
  for (const char* row :
       {"| S = Q K^T, HS 64 (m64n128k16 SS x 4) | 2 | 850.0 TFLOP/s | 4096 | 100.0% |",
        "| MUFU.EX2 (ex2.approx.ftz.f32) | - | 3000.0 Gop/s | 16.00 | 100.0% |",
        "medians of 2 rounds",
        "| flash3 forward | 64 | 1000.0 | 1.50 | 412.3 | 67.1% | 58.2% | 61.5% | 55.5% |",
        "| MUFU.EX2 bf16x2 (ex2.approx.ftz.bf16x2) | - | 2900.0 Gop/s | 15.50 | 96.9% |",
        "| flash3 forward | 64 | 1.06 | 39.0% | 1.51 | 0.47 | 0.31 | 0.80 | 0.39 | 0.17 | 0.08 | 0.90 |"})
    EXPECT_NE(table.find(row), std::string::npos) << row << "\n" << table;

  std::ofstream(d / "other.log") << "nothing here\n";
  EXPECT_NE(run_results_table(d, "attention-ceilings", "tensor=" + (d / "other.log")), 0);
  EXPECT_NE(read_text(d / "log").find("no rate lines in"), std::string::npos) << read_text(d / "log");
}

}  // namespace
