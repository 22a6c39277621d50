// The error macros (kernels/common.h): CHECK and THROW_ERROR throw flashgpt::Error with the
// message as written; a message starting "internal:" (a bug in flashgpt, not bad input) also
// names the file and line that raised it.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/common.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "tests/cpu/test_helpers.h"

namespace {

TEST(Errors, UserErrorsAreTheMessageAlone) {
  const int batch = 0;
  EXPECT_EQ(expect_error([&] { CHECK(batch >= 1, "--batch must be at least 1 (got %d)", batch); },
                         "--batch"),
            "--batch must be at least 1 (got 0)");
  EXPECT_EQ(expect_error([] { THROW_ERROR("--format '%s' is unknown", "onnx"); }, "--format"),
            "--format 'onnx' is unknown");
}

TEST(Errors, InternalErrorsSayWhere) {
  const int line = __LINE__ + 1;
  const std::string msg = expect_error([] { THROW_ERROR("internal: %d buffers", 3); }, "internal: 3 buffers");
  EXPECT_EQ(msg, "internal: 3 buffers (at tests/cpu/test_errors.cpp:" + std::to_string(line) + ")");
  // One raised inside the library: a model file saved with the wrong number of parameters.
  TempDir dir;
  const GPTConfig c = gpt_preset("tiny", 300, 32);
  expect_error([&] { save_model_file(dir / "m.bin", c, std::vector<float>(7)); },
               "internal: 7 parameters for a model of ");
  expect_error([&] { save_model_file(dir / "m.bin", c, std::vector<float>(7)); },
               "(at model/checkpoint.cpp:");
}

}  // namespace
