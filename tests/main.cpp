// Test main for both test binaries: runs GoogleTest, then prints the plain closing line
// "N passed, N failed, N skipped" that CI reads.
#include <gtest/gtest.h>

#include <cstdio>

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  int rc = RUN_ALL_TESTS();
  const ::testing::UnitTest& u = *::testing::UnitTest::GetInstance();
  int passed = u.successful_test_count(), failed = u.failed_test_count(),
      skipped = u.skipped_test_count();
  std::printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
  return rc;
}
