// test_results_gpu_tests — the gpu-tests claim's collector in scripts/results_table.py, on small
// compute-sanitizer logs written here: a clean run passes; racecheck hazards only inside cuBLAS's
// nvjet kernels pass, named as such; one hazard in any other kernel fails the row; memcheck
// errors fail it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "tests/cpu/test_helpers.h"

namespace {

// A racecheck log: the test count line, one hazard report per kernel pair, and the summary.
std::string racecheck_log(const std::string& reports, int hazards) {
  return "========= COMPUTE-SANITIZER\n" + reports + "2 passed, 0 failed, 0 skipped\n" +
         "========= RACECHECK SUMMARY: " + std::to_string(hazards) + " hazards displayed (" +
         std::to_string(hazards) + " errors, 0 warnings)\n";
}
std::string race(const std::string& first, const std::string& second) {
  return "========= Error: Race reported between Read access at " + first +
         "+0xa50\n=========     and Write access at " + second + "+0x3660 [240 hazards]\n";
}

TEST(ResultsTable, GpuTestsSanitizers) {
  if (access("scripts/results_table.py", R_OK) != 0) GTEST_SKIP() << "run from the repository root";
  TempDir d;
  const std::string nvjet = "nvjet_sm90_tss_64x96_64x8_1x2_h_bz_ptrBatch_NTT";
  std::ofstream(d / "clean.log") << racecheck_log("", 0);
  std::ofstream(d / "cublas.log") << racecheck_log(race(nvjet, nvjet) + race(nvjet, nvjet), 2);
  std::ofstream(d / "ours.log")
      << racecheck_log(race(nvjet, nvjet) +
                           race("void flash3::flash3_fwd_kernel<flash3::Fwd3Tile<128, true>>", nvjet),
                       2);
  std::ofstream(d / "memcheck.log") << "5 passed, 0 failed, 0 skipped\n"
                                    << "========= ERROR SUMMARY: 3 errors\n";
  ASSERT_EQ(run_results_table(d, "gpu-tests",
                              "clean=" + (d / "clean.log") + " cublas=" + (d / "cublas.log") +
                                  " ours=" + (d / "ours.log") + " memcheck=" + (d / "memcheck.log")),
            0)
      << read_text(d / "log");
  const std::string table = read_text(d / "table.md");
  for (const char* row :
       {"| clean | compute-sanitizer | PASS | RACECHECK SUMMARY: 0 hazards displayed",
        "| cublas | compute-sanitizer | PASS | RACECHECK SUMMARY: 2 hazards displayed (2 errors, 0 "
        "warnings); every hazard in cuBLAS's nvjet kernels, none in flashgpt's |",
        "| ours | compute-sanitizer | FAIL | RACECHECK SUMMARY: 2 hazards displayed (2 errors, 0 "
        "warnings) |",
        "| memcheck | compute-sanitizer | FAIL | ERROR SUMMARY: 3 errors |",
        "| ours | tests | PASS | 2 passed, 0 failed, 0 skipped |"})
    EXPECT_NE(table.find(row), std::string::npos) << row << "\n" << table;
}

}  // namespace
