// test_ncu_source_summary — scripts/ncu_source_summary.py on a small `ncu --page source --csv`
// file written here: the samples by stall reason, the executions per opcode (predicates stripped)
// counted per unit with --per, each opcode's share of the samples, the instructions with the
// most samples and their reasons; one error line for a file that is not ncu's source page and
// for a --per opcode that never executed.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "tests/cpu/test_helpers.h"

namespace {

// 100 samples: the MUFU line 60 (wait 50, barrier 10), the branch 30 (barrier), the HGMMA 10
// (wait 6, barrier 4). 400 HGMMA executions at 4 a unit: 100 units.
void write_source_csv(const std::string& path) {
  std::ofstream f(path);
  f << "\"Kernel Name\",\"void flash3::flash3_fwd_kernel<64>()\",\n"
       "\"Address\",\"Source\",\"Warp Stall Sampling (All Samples)\",\"Warp Stall Sampling "
       "(Not-issued Samples)\",\"# Samples\",\"Instructions Executed\",\"stall_wait\","
       "\"stall_barrier\",\"stall_wait (Not Issued)\"\n"
       "\"0x10\",\"HGMMA.64x128x16.F32.BF16 R24, gdesc[UR20], RZ, !UPT\",\"10\",\"5\",\"10\","
       "\"400\",\"6\",\"4\",\"3\"\n"
       "\"0x20\",\"MUFU.EX2 R1, R2\",\"60\",\"40\",\"60\",\"6,400\",\"50\",\"10\",\"30\"\n"
       "\"0x30\",\"@!P0  BRA 0x10\",\"30\",\"30\",\"30\",\"1,500\",\"0\",\"30\",\"0\"\n"
       "\"0x40\",\"FADD R1, R2, R3\",\"0\",\"0\",\"0\",\"6,400\",\"0\",\"0\",\"0\"\n";
}

int run(const TempDir& d, const std::string& args) {
  const std::string cmd =
      "python3 scripts/ncu_source_summary.py " + args + " > " + (d / "out") + " 2>&1";
  return WEXITSTATUS(std::system(cmd.c_str()));
}

TEST(NcuSourceSummary, CountsPerUnitAndSamplesByReason) {
  if (access("scripts/ncu_source_summary.py", R_OK) != 0)
    GTEST_SKIP() << "run from the repository root";
  TempDir d;
  write_source_csv(d / "src.csv");
  ASSERT_EQ(run(d, d / "src.csv" + " --per HGMMA.64x128x16.F32.BF16:4 --top 2"), 0)
      << read_text(d / "out");
  const std::string out = read_text(d / "out");
  for (const char* want :
       {"100 samples, 14700 instructions executed per HGMMA.64x128x16.F32.BF16 / 4 (100): 147.0",
        "samples by reason: wait 56.0%, barrier 44.0%",
        "MUFU.EX2                                         64.0      60.0%",
        "FADD                                             64.0       0.0%",
        "BRA                                              15.0      30.0%",
        "HGMMA.64x128x16.F32.BF16                          4.0      10.0%",
        "60.00%  MUFU.EX2 R1, R2", "wait 83% barrier 17%", "barrier 100%"})
    EXPECT_NE(out.find(want), std::string::npos) << want << "\n" << out;
  EXPECT_EQ(out.find("FADD R1"), std::string::npos) << "--top 2 lists two instructions\n" << out;

  EXPECT_NE(run(d, d / "src.csv" + " --per FOO:4"), 0);
  EXPECT_NE(read_text(d / "out").find("no opcode 'FOO' was executed"), std::string::npos)
      << read_text(d / "out");
  std::ofstream(d / "other.csv") << "\"ID\",\"Process ID\"\n1,2\n";
  EXPECT_NE(run(d, d / "other.csv"), 0);
  EXPECT_NE(read_text(d / "out").find("has no \"Address\",\"Source\" header"), std::string::npos)
      << read_text(d / "out");
}

}  // namespace
