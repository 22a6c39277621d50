// test_results_masked_context_parallel — the masked-context-parallel claim's collector in
// scripts/results_table.py, on small logs written here: one GPU's tokens/s from its `done:` line,
// and a cp 2 run that fails before its opening lines, which still lands on its own row (mask,
// window, T and cp from run.sh's `point:` line) with no tokens/s and no efficiency.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "tests/cpu/test_helpers.h"

TEST(ResultsTable, MaskedContextParallelFailedPoint) {
  if (access("scripts/results_table.py", R_OK) != 0) GTEST_SKIP() << "run from the repository root";
  TempDir d;
  {
    std::ofstream one(d / "one.log");
    one << "point: T 1048576, --mask document, --window 0, --cp 1\n"
        << train_log_opening(1048576, "document mask")
        << "done: 5 steps, 450000 tokens/s, peak memory 74.54 GiB\n";
    std::ofstream two(d / "two.log");
    two << "point: T 1048576, --mask document, --window 0, --cp 2\n"
           "flashgpt: error: --train-pattern: shard train_000000.bin has 840042 tokens\n";
  }
  ASSERT_EQ(run_results_table(d, "masked-context-parallel",
                              "straight=" + (d / "one.log") + " straight=" + (d / "two.log")),
            0)
      << read_text(d / "log");
  const std::string table = read_text(d / "table.md");
  const char* row = "| documents | 1M | 2 | 450,000 | **-** | - | - | - | - | - |";
  EXPECT_NE(table.find(row), std::string::npos) << row << "\n" << table;
  const std::string csv = read_text(d / "data.csv");
  EXPECT_NE(csv.find("straight,document,0,1048576,2,"), std::string::npos) << csv;
}
