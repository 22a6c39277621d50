// common.h — error handling shared by every part of flashgpt (host code only, no CUDA).
//
// CHECK(cond, fmt, ...) throws flashgpt::Error with a printf-style message when cond is false;
// THROW_ERROR(fmt, ...) throws it unconditionally. main() catches it, prints one line
// "flashgpt: error: <message>" and exits non-zero. Messages name the flag or file at fault and
// say what to do, e.g.
//   CHECK(T <= maxT, "--seq-len %d is larger than the model's maximum %d; lower --seq-len", T, maxT);
// A message that starts with "internal:" reports a bug in flashgpt, not bad input: no flag
// fixes it, so the error carries the place that found it, "internal: ... (at model/x.cpp:72)",
// for the bug report. (CUDA_CHECK and friends, kernels/cuda_common.cuh, always say file:line.)
// THROW_ERROR is not called FAIL: that is gtest's, and the tests include both.
#pragma once
#include <cstdarg>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace flashgpt {

struct Error : std::runtime_error {
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

inline std::string vstrformat(const char* fmt, va_list ap) {
  char buf[2048];
  vsnprintf(buf, sizeof(buf), fmt, ap);
  return std::string(buf);
}

inline std::string strformat(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string s = vstrformat(fmt, ap);
  va_end(ap);
  return s;
}

// The error CHECK and THROW_ERROR throw, raised at file:line.
inline Error make_error(const char* file, int line, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string what = vstrformat(fmt, ap);
  va_end(ap);
  if (what.rfind("internal:", 0) == 0) what += strformat(" (at %s:%d)", file, line);
  return Error(what);
}

}  // namespace flashgpt

#define CHECK(cond, ...)                                                        \
  do {                                                                          \
    if (!(cond)) throw ::flashgpt::make_error(__FILE__, __LINE__, __VA_ARGS__); \
  } while (0)

#define THROW_ERROR(...) throw ::flashgpt::make_error(__FILE__, __LINE__, __VA_ARGS__)
