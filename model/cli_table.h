// cli_table — reading a subcommand's command line with cxxopts (the parsers in
// train/options.cpp and bench/options.cpp): each flag declared once with the field it fills,
// and a bad value named by its flag. The values and validators they share: cli.h.
#pragma once
#include <cxxopts.hpp>
#include <functional>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/common.h"
#include "model/cli.h"

namespace cli {

// Parses argv (argv[0]: the subcommand `cmd`) into r. An unknown flag, a value of the wrong
// type or a stray argument throws one line naming it. False when --help was asked for: the
// help is printed and the command stops.
bool parse_command_line(cxxopts::Options& o, const char* cmd, int argc, char** argv,
                        cxxopts::ParseResult& r);

// The value of --flag as a T; a failed conversion throws naming the flag.
template <typename T>
T get(const cxxopts::ParseResult& r, const char* flag) {
  try {
    return r[flag].as<T>();
  } catch (const cxxopts::exceptions::exception& e) {
    THROW_ERROR("--%s: %s", flag, e.what());
  }
}

template <typename T>
std::string join(const std::vector<T>& v) {  // a list's default value: "a,b,c"
  std::string s;
  for (const T& x : v) {
    std::ostringstream item;
    item << x;
    s += (s.empty() ? "" : ",") + item.str();
  }
  return s;
}

// A subcommand's option table whose options fill the fields they are declared with: each flag
// is named once, with its help and its field; the field's value before parsing is the default
// --help shows and what it keeps when the flag is not given. A string field that is empty, or
// a switch, shows no default.
//   cli::Table t(opt, "sample", "flashgpt sample: ...");
//   t.add("tokens", "tokens to generate", opt.tokens).on("no-kv-cache", "...", opt.kv_cache, false);
//   t.section("tokens", "generation");  // --help lists --tokens and what follows it under it
//   if (!t.parse(argc, argv)) return false;  // --help
class Table {
 public:
  // The table of subcommand `cmd` filling `opt`, which starts from its defaults.
  template <typename Options>
  Table(Options& opt, const char* cmd, const std::string& about) : cmd_(cmd), o_(cmd, about) {
    opt = Options{};
  }
  // --name VALUE sets field.
  template <typename T>
  Table& add(const std::string& name, const std::string& help, T& field) {
    const std::string shown = default_text(field);
    flags_.push_back({name, [=](cxxopts::OptionAdder&& adder) {
                        auto value = cxxopts::value<T>();
                        if (!shown.empty()) value->default_value(shown);
                        adder(name, help, value);
                      },
                      [name, &field](const cxxopts::ParseResult& r) {
                        if (r.count(name)) field = get<T>(r, name.c_str());
                      }});
    return *this;
  }
  // --name VALUE read as a T and handed to `set`, which converts and checks it; `shown`: the
  // default --help shows ("": none).
  template <typename T>
  Table& add_with(const std::string& name, const std::string& help, const std::string& shown,
                  std::function<void(const T&)> set) {
    flags_.push_back({name, [=](cxxopts::OptionAdder&& adder) {
                        auto value = cxxopts::value<T>();
                        if (!shown.empty()) value->default_value(shown);
                        adder(name, help, value);
                      },
                      [name, set](const cxxopts::ParseResult& r) {
                        if (r.count(name)) set(get<T>(r, name.c_str()));
                      }});
    return *this;
  }
  // --name (a switch) sets field to `when_given`.
  Table& on(const std::string& name, const std::string& help, bool& field, bool when_given = true) {
    flags_.push_back({name, [=](cxxopts::OptionAdder&& adder) { adder(name, help); },
                      [name, &field, when_given](const cxxopts::ParseResult& r) {
                        if (r.count(name)) field = when_given;
                      }});
    return *this;
  }
  // In --help, the flags from --first on (in the order added) are listed under `group`.
  Table& section(const std::string& first, const std::string& group) {
    sections_.push_back({first, group});
    return *this;
  }
  cxxopts::Options& cxx() { return o_; }  // positional arguments and the like
  // Parses argv (parse_command_line: false when --help was printed) and fills the fields.
  bool parse(int argc, char** argv, cxxopts::ParseResult* result = nullptr);

 private:
  template <typename T>
  static std::string default_text(const T& v) {
    if constexpr (std::is_same_v<T, std::string>) {
      return v;
    } else if constexpr (std::is_same_v<T, bool>) {
      return v ? "true" : "false";
    } else if constexpr (std::is_arithmetic_v<T>) {
      std::ostringstream s;
      s << v;
      return s.str();
    } else {
      return join(v);
    }
  }
  struct Flag {
    std::string name;
    std::function<void(cxxopts::OptionAdder&&)> declare;  // into cxxopts, in its help group
    std::function<void(const cxxopts::ParseResult&)> read;
  };
  const char* cmd_;
  cxxopts::Options o_;
  std::vector<Flag> flags_;
  std::vector<std::pair<std::string, std::string>> sections_;  // first flag, help group
};

// --mask causal|document and --window W (kernels/attention/mask.h), checked as they are read
// (an unknown kind or a negative window throws naming the flag): into `mask` (profile,
// bench-attention), or into `flags`, where a flag left out stays unset and is the model's
// (train, eval, sample; `model_default` says so in --help).
void add_mask_flags(Table& t, MaskSpec& mask);
void add_mask_flags(Table& t, MaskFlags& flags, const std::string& model_default);

}  // namespace cli
