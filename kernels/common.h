// common.h — error handling shared by every part of flashgpt (host code only, no CUDA).
//
// CHECK(cond, fmt, ...) throws flashgpt::Error with a printf-style message. main() catches it,
// prints one line "flashgpt: error: <message>" and exits non-zero. Messages name the flag or
// file at fault and say what to do, e.g.
//   CHECK(T <= maxT, "--seq-len %d is larger than the model's maximum %d; lower --seq-len", T, maxT);
#pragma once
#include <cstdarg>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace flashgpt {

struct Error : std::runtime_error {
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

inline std::string strformat(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char buf[2048];
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  return std::string(buf);
}

}  // namespace flashgpt

#define CHECK(cond, ...)                                                   \
  do {                                                                     \
    if (!(cond)) throw ::flashgpt::Error(::flashgpt::strformat(__VA_ARGS__)); \
  } while (0)

#define THROW_ERROR(...) throw ::flashgpt::Error(::flashgpt::strformat(__VA_ARGS__))
