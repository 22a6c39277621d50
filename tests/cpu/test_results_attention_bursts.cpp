// test_results_attention_bursts — the attention-bursts claim's collector in
// scripts/results_table.py, on small bench_attention.py CSVs and nvidia-smi samples written here:
// each protocol's TFLOP/s, flash3 over cuDNN per protocol, flash3's burst over its sustained rate,
// the SM clock and power under load with the idle samples left out (two runs with the same
// clocks counted as two), a row that ran out of memory
// left out, and a label that names no protocol refused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "tests/cpu/test_helpers.h"

namespace {

// One bench_attention.py CSV: flash3 and torch-cudnn at HS 128, 64 (8) heads, B 2, T 16K, and a
// point at T 32K that ran out of memory for cuDNN.
std::string bench_csv(double f3_fwd, double f3_bwd, double cu_fwd, double cu_bwd) {
  auto row = [](const char* src, const char* pass, double tf, const char* status = "ok",
                int T = 16384) {
    return std::string(src) + ",128,64,8,2," + std::to_string(T) + ",1," + pass + ",1.0000," +
           std::to_string(tf) + ",0," + status + "\n";
  };
  return "# command: python3 scripts/bench_attention.py\n# gpu: NVIDIA H200\n"
         "source,hs,heads,kv_heads,batch,seq_len,causal,pass,ms,tflops,extra_bytes,status\n" +
         row("flash3", "fwd", f3_fwd) + row("flash3", "bwd", f3_bwd) +
         row("torch-cudnn", "fwd", cu_fwd) + row("torch-cudnn", "bwd", cu_bwd) +
         row("torch-cudnn", "fwd", 0.0, "OOM", 32768);
}

}  // namespace

TEST(ResultsTable, AttentionBursts) {
  if (access("scripts/results_table.py", R_OK) != 0) GTEST_SKIP() << "run from the repository root";
  TempDir d;
  std::ofstream(d / "b.csv") << bench_csv(700, 600, 650, 580);
  std::ofstream(d / "s.csv") << bench_csv(640, 540, 600, 520);
  // burst: the idle samples (150 W, under half of the top 700 W) are left out: 1850 MHz, 690 W
  std::ofstream(d / "b.csv.clocks") << "1980, 150.1\n1900, 600\n1850, 690\n1800, 700\n1980, 90\n";
  std::ofstream(d / "s.csv.clocks") << "1750, 695\n1760, 690\n1755, 700\n1980, 90\n";
  // a second run of the same burst round (another file) with the same clocks: a run of its own
  std::ofstream(d / "b2.csv") << bench_csv(700, 600, 650, 580);
  std::ofstream(d / "b2.csv.clocks") << "1980, 150.1\n1900, 600\n1850, 690\n1800, 700\n";
  ASSERT_EQ(run_results_table(d, "attention-bursts",
                              "burst.1=" + (d / "b.csv") + " sustained.1=" + (d / "s.csv") +
                                  " burst.1=" + (d / "b2.csv")),
            0)
      << read_text(d / "log");
  const std::string table = read_text(d / "table.md");
  for (const char* row :
       {"| 128 | 64 (8) | 2 | 16K | fwd | 700.0 | 650.0 | **1.08** | 640.0 | 600.0 | **1.07** | "
        "1.09 |",
        "| 128 | 64 (8) | 2 | 16K | bwd | 600.0 | 580.0 | **1.03** | 540.0 | 520.0 | **1.04** | "
        "1.11 |",
        "| burst | 1850 | 690 | 2 |", "| sustained | 1755 | 695 | 1 |",
        "medians over 1 burst and 1 sustained rounds"})
    EXPECT_NE(table.find(row), std::string::npos) << row << "\n" << table;
  EXPECT_EQ(table.find("32K"), std::string::npos) << "the OOM point has no row\n" << table;
  TempDir e;
  std::ofstream(e / "b.csv") << bench_csv(700, 600, 650, 580);
  EXPECT_NE(run_results_table(e, "attention-bursts", "cool.1=" + (e / "b.csv")), 0);
  EXPECT_NE(read_text(e / "log").find("burst.N=FILE or sustained.N=FILE"), std::string::npos)
      << read_text(e / "log");
}
