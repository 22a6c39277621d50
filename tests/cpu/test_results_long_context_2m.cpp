// test_results_long_context_2m — the long-context-2m claim's collector in
// scripts/results_table.py, on small `flashgpt train` logs written here: each run's mask,
// T and cp from its own lines, the loss of its first and last step, ms/step and tokens/s as the
// median of the steps after the first (the only step when there is one), the measured peak and
// the plan's total, a run with no `done:` line reported as failed with its last line, and a run
// that failed before its opening lines named by run.sh's `point:` line (T and cp).
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "tests/cpu/test_helpers.h"

namespace {

// A cp 2 log's opening lines (the model, the device line with the mask and batch x T, the cp
// line, the plan's total), then `steps` step lines with the given losses and times.
std::string train_log(const char* mask, const std::string& steps, bool done) {
  std::string s =
      train_log_opening(2097152, mask) +
      "context parallel: cp=2 dp=1 (rank 0: cp index 0, chunks 0 and 3)\n"
      "memory plan:\n"
      "  parameters               168.75 MiB\n"
      "  total                    101.75 GiB\n" + steps;
  if (done) s += "done: 3 steps, 0 tokens/s, peak memory 102.61 GiB\n";
  return s;
}

TEST(ResultsTable, LongContext2m) {
  if (access("scripts/results_table.py", R_OK) != 0) GTEST_SKIP() << "run from the repository root";
  TempDir d;
  {
    std::ofstream f(d / "doc.log");
    f << train_log("document mask",
                   "step     1/3 | loss 8.3400 | lr 3.00e-04 | norm 2.6 | 9000.0 ms | 233016 tok/s | ETA 0m06s\n"
                   "step     2/3 | loss 7.9000 | lr 6.00e-04 | norm 2.1 | 3000.0 ms | 699050 tok/s | ETA 0m03s\n"
                   "step     3/3 | loss 7.1000 | lr 6.00e-04 | norm 1.9 | 3200.0 ms | 655359 tok/s | ETA 0m00s\n",
                   true);
    std::ofstream c(d / "causal.log");
    c << train_log("causal mask",
                   "step     1/1 | loss 8.3500 | lr 3.00e-04 | norm 2.6 | 340000.0 ms | 6168 tok/s | ETA 0m00s\n",
                   true);
    std::ofstream x(d / "oom.log");
    x << train_log("causal mask", "", false) << "error: cudaMalloc of 40.00 GiB failed\n";
    // failed before its opening lines: run.sh's point line names T and cp
    std::ofstream e(d / "early.log");
    e << "point: T 2097152, --mask document, --cp 2\n"
         "flashgpt: error: --train-pattern: no shard matches\n";
  }
  ASSERT_EQ(run_results_table(d, "long-context-2m",
                              "documents=" + (d / "doc.log") + " causal=" + (d / "causal.log") +
                                  " oom=" + (d / "oom.log") + " early=" + (d / "early.log")),
            0)
      << read_text(d / "log");
  const std::string table = read_text(d / "table.md");
  // documents: the median of steps 2 and 3 (3000, 3200 ms; 699050, 655359 tok/s)
  for (const char* row :
       {"| documents | 2M | 2 | 3 | 8.3400 -> 7.1000 | 3,100 | **677,204** | 102.61 | 101.75 | ok |",
        "| causal | 2M | 2 | 1 | 8.3500 -> 8.3500 | 340,000 | **6,168** | 102.61 | 101.75 | ok |",
        "| oom | 2M | 2 | 0 | - | - | **-** | - | 101.75 | failed: error: cudaMalloc of 40.00 GiB failed |",
        "| early | 2M | 2 | 0 | - | - | **-** | - | - | failed: flashgpt: error: --train-pattern: no "
        "shard matches |",
        "| documents | 2 | 7.9000 | 3,000 | 699,050 |"})
    EXPECT_NE(table.find(row), std::string::npos) << row << "\n" << table;
}

}  // namespace
