// test_mask — the GPU's document starts (kernels/attention/mask.cuh) against the CPU's
// document_starts (mask.h), exactly:
//   DocumentStartsGpu.MatchesCpu  ragged T (1, 2, 17, 1023, 1024, 1025, 5000, 131073: fewer
//                                 rows than threads, one per thread, several, a ragged last
//                                 one), B = 1..3; random documents (an EOT at each position with
//                                 probability 1/2, 1/50, 1/5000), no EOT, every token an EOT,
//                                 an EOT at row 0 only, at the last row only; the output
//                                 poisoned first
// Run (GPU machine): build/test_gpu --gtest_filter='DocumentStartsGpu*'
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention/mask.cuh"
#include "tests/gpu/gpu_test.h"

namespace {

class DocumentStartsGpu : public GpuTest {};

constexpr int kEot = 7;

// The tokens of one case: `kind` names where the EOTs are.
std::vector<int> case_tokens(int B, int T, const std::string& kind, double rate,
                             std::mt19937_64& rng) {
  std::uniform_int_distribution<int> text(8, 99);  // never kEot
  std::bernoulli_distribution eot(rate);
  std::vector<int> t((size_t)B * T);
  for (int b = 0; b < B; b++)
    for (int i = 0; i < T; i++) {
      int& x = t[(size_t)b * T + i];
      x = text(rng);
      if (kind == "random" && eot(rng)) x = kEot;
      if (kind == "all") x = kEot;
      if (kind == "first" && i == 0) x = kEot;
      if (kind == "last" && i == T - 1) x = kEot;
    }
  return t;
}

}  // namespace

TEST_F(DocumentStartsGpu, MatchesCpu) {
  SEED_TRACE();
  std::mt19937_64 rng = test_rng();
  int cases = 0;
  for (int T : {1, 2, 17, 1023, 1024, 1025, 5000, 131073})
    for (int B : {1, 3})
      for (const std::string kind : {"random", "none", "all", "first", "last"})
        for (double rate : kind == "random" ? std::vector<double>{0.5, 0.02, 0.0002}
                                            : std::vector<double>{0})
        {
          SCOPED_TRACE(flashgpt::strformat("B=%d T=%d EOT: %s %g", B, T, kind.c_str(), rate));
          const std::vector<int> tokens = case_tokens(B, T, kind, rate, rng);
          DeviceBuffer<int> d_tokens(tokens.size()), d_starts(tokens.size());
          d_tokens.upload(tokens);
          d_starts.poison();
          document_starts_gpu(d_starts.ptr, d_tokens.ptr, B, T, kEot, 0);
          const std::vector<int> got = d_starts.download();
          const std::vector<int> want = document_starts(tokens.data(), B, T, kEot);
          size_t bad = 0;
          while (bad < got.size() && got[bad] == want[bad]) bad++;
          EXPECT_EQ(bad, got.size()) << "first difference at row " << bad % T << " of sequence "
                                     << bad / T << ": " << got[bad] << " instead of " << want[bad];
          cases++;
        }
  std::printf("document_starts_gpu: %d cases equal to document_starts\n", cases);
}
