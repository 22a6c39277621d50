// test_results_document_masks — the document-masks claim's training rows in
// scripts/results_table.py, on small logs written here: a run's T, mask, mean document and work
// left from its opening lines, tokens/s and the peak from its `done:` line, attention's share
// from the bench-attention log after it; and a run that fails before its opening lines, which
// still gets its own row (T and mask from run.sh's `point:` line) marked failed with its last
// line, with no numbers in it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "tests/cpu/test_helpers.h"

TEST(ResultsTable, DocumentMasksTraining) {
  if (access("scripts/results_table.py", R_OK) != 0) GTEST_SKIP() << "run from the repository root";
  TempDir d;
  {
    std::ofstream t(d / "train.log");
    t << "point: T 131072, --mask document\n" << train_log_opening(131072, "document mask")
      << "documents: 685 documents in 1917955 tokens; tokens per document: mean 2799.9, p50 "
         "2320, p90 5366, max 6829; the document mask leaves 3.0% of causal attention's work at "
         "T 131072\n"
         "step     8/8 | loss 6.4835 | lr 6.00e-05 | norm 1.6771 | 290.4 ms | 451363 tok/s | "
         "ETA 0m00s\n"
         "done: 8 steps, 464132 tokens/s, peak memory 10.74 GiB\n";
    // 12 layers x 10.304 ms over 131072 / 464132 s a step (282.4 ms): 43.8%
    std::ofstream s(d / "share.log");
    s << "backend    HS   NH  NKV    B       T cau |    fwd ms    TF/s |    bwd ms    TF/s |    "
         "f+b ms    TF/s | extra MiB  status\n"
         "flash3     64   12   12    1  131072   1 |     2.417   403.6 |     7.225   337.6 |    "
         "10.304   331.4 |     396.0  ok: the mask leaves 3.7% of the causal triangle\n";
    std::ofstream f(d / "failed.log");
    f << "point: T 1048576, --mask document\n"
         "flashgpt: error: --train-pattern: shard train_000000.bin has 840042 tokens, 0 windows\n";
  }
  ASSERT_EQ(run_results_table(d, "document-masks",
                              "train=" + (d / "train.log") + " share=" + (d / "share.log") +
                                  " train=" + (d / "failed.log")),
            0)
      << read_text(d / "log");
  const std::string table = read_text(d / "table.md");
  for (const char* row :
       {"| 128K | document | 2799.9 | 3.0% | 282 | **464,132** | 44% | 10.74 | ok |",
        "| 1M | document | - | - | - | **-** |  |  | failed: flashgpt: error: --train-pattern: "
        "shard train_000000.bin has 840042 tokens, 0 windows |"})
    EXPECT_NE(table.find(row), std::string::npos) << row << "\n" << table;
}
