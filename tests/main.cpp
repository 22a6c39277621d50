// Test main for both test binaries: runs GoogleTest, then prints the plain closing line
// "N passed, N failed, N skipped" that CI reads. Before each iteration (--gtest_repeat=N runs
// N) it sets and prints that iteration's seed (tests/test_common.h); after each test that made
// a toleranced check it prints the largest share of a tolerance the test used:
//   [ tol      ] CudaModel.RopeMatchesCpu   41.3% of tolerance
// (scripts/gpu_stress.sh reads these lines).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "tests/test_common.h"

namespace {

class SeedAndTolerancePrinter : public ::testing::EmptyTestEventListener {
  void OnTestIterationStart(const ::testing::UnitTest&, int iteration) override {
    test_seed::start_iteration(iteration);
  }
  void OnTestStart(const ::testing::TestInfo&) override { worst_tolerance_share() = -1; }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    const double share = worst_tolerance_share();
    if (share < 0) return;  // no toleranced check ran (skipped, or exact checks only)
    const std::string name = std::string(info.test_suite_name()) + "." + info.name();
    std::printf("[ tol      ] %s %6.1f%% of tolerance\n", name.c_str(), 100 * share);
    std::fflush(stdout);
  }
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::UnitTest::GetInstance()->listeners().Append(new SeedAndTolerancePrinter);
  int rc = RUN_ALL_TESTS();
  const ::testing::UnitTest& u = *::testing::UnitTest::GetInstance();
  int passed = u.successful_test_count(), failed = u.failed_test_count(),
      skipped = u.skipped_test_count();
  std::printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
  return rc;
}
