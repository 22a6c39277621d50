// test_helpers.h — small utilities shared by the CPU tests: temporary directories, argv
// building, and "this call throws flashgpt::Error whose message mentions X".
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/common.h"

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/flashgpt_test_XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { std::system(("rm -rf '" + path + "'").c_str()); }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
};

struct Argv {
  std::vector<std::string> args;
  std::vector<char*> ptrs;
  explicit Argv(std::vector<std::string> a) : args(std::move(a)) {
    for (std::string& s : args) ptrs.push_back(&s[0]);
    ptrs.push_back(nullptr);
  }
  int argc() const { return (int)args.size(); }
  char** argv() { return ptrs.data(); }
};

// Runs fn, expects flashgpt::Error whose message contains `needle`; returns the message.
template <typename Fn>
std::string expect_error(Fn fn, const std::string& needle) {
  try {
    fn();
  } catch (const flashgpt::Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(needle), std::string::npos) << "message: " << msg << "\nexpected: " << needle;
    return msg;
  }
  ADD_FAILURE() << "no flashgpt::Error thrown (expected one mentioning '" << needle << "')";
  return "";
}
