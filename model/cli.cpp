// cli.cpp — see cli.h.
#include "model/cli_table.h"

#include <climits>
#include <cstdint>
#include <iostream>

#include "kernels/attention/backends.h"

PosEncoding parse_pos(const std::string& value) {
  if (value == "learned") return PosEncoding::learned;
  if (value == "rope") return PosEncoding::rope;
  THROW_ERROR("--pos '%s' is unknown; use learned or rope", value.c_str());
}

const char* pos_name(PosEncoding pos) { return pos == PosEncoding::rope ? "rope" : "learned"; }

std::string parse_attn(const std::string& value, AttnAuto autos) {
  if (value == "auto" && autos == AttnAuto::allowed) return value;
  return attention_spec(value).name;  // unknown (auto too, where refused): throws listing them
}

MaskSpec MaskFlags::over(const MaskSpec& model) const {
  MaskSpec m = model;
  if (kind) m.kind = *kind;
  if (window) m.window = *window;
  return m;
}

namespace cli {
namespace {

// cxxopts names a bad value but not the flag that carried it: the flag on the command line
// whose value is `value` (--flag value, --flag=value, or one item of --flag a,b,c), else "".
std::string flag_carrying(const std::string& value, int argc, char** argv) {
  for (int i = 1; i < argc; i++) {
    const std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) continue;
    const size_t eq = arg.find('=');
    const std::string flag = eq == std::string::npos ? arg : arg.substr(0, eq);
    const std::string given = eq != std::string::npos ? arg.substr(eq + 1)
                              : i + 1 < argc        ? std::string(argv[i + 1])
                                                    : std::string();
    if (given == value || ("," + given + ",").find("," + value + ",") != std::string::npos)
      return flag;
  }
  return "";
}

}  // namespace

bool parse_command_line(cxxopts::Options& o, const char* cmd, int argc, char** argv,
                        cxxopts::ParseResult& r) {
  try {
    r = o.parse(argc, argv);
  } catch (const cxxopts::exceptions::incorrect_argument_type& e) {
    const std::string what = e.what();
    const size_t a = what.find(cxxopts::LQUOTE);
    const size_t b = a == std::string::npos ? a : what.find(cxxopts::RQUOTE, a + 1);
    if (b != std::string::npos) {
      const std::string value = what.substr(a + cxxopts::LQUOTE.size(), b - a - cxxopts::LQUOTE.size());
      const std::string flag = flag_carrying(value, argc, argv);
      if (!flag.empty())
        THROW_ERROR("%s: '%s' is not a valid value for %s; see `flashgpt %s --help`", cmd,
                    value.c_str(), flag.c_str(), cmd);
    }
    THROW_ERROR("%s: %s; see `flashgpt %s --help`", cmd, what.c_str(), cmd);
  } catch (const cxxopts::exceptions::exception& e) {
    THROW_ERROR("%s: %s; see `flashgpt %s --help`", cmd, e.what(), cmd);
  }
  if (r.count("help")) {
    std::cout << o.help() << std::endl;
    return false;
  }
  CHECK(r.unmatched().empty(), "%s: unexpected argument '%s'; see `flashgpt %s --help`", cmd,
        r.unmatched().front().c_str(), cmd);
  return true;
}

bool Table::parse(int argc, char** argv, cxxopts::ParseResult* result) {
  std::string group;
  for (const Flag& f : flags_) {
    for (const auto& [first, name] : sections_)
      if (first == f.name) group = name;
    f.declare(o_.add_options(group));
  }
  o_.add_options(group)("h,help", "this help");
  cxxopts::ParseResult r;
  if (!parse_command_line(o_, cmd_, argc, argv, r)) return false;
  for (const Flag& f : flags_) f.read(r);
  if (result) *result = r;
  return true;
}

void check_at_least(const char* flag, long long value, long long min, const char* note) {
  CHECK(value >= min, "%s must be at least %lld (got %lld)%s", flag, min, value, note);
}

void check_list_at_least(const char* flag, const std::vector<int>& values, int min) {
  CHECK(!values.empty(), "%s is empty; give one or more values", flag);
  for (int v : values) CHECK(v >= min, "%s: %d is not valid (must be at least %d)", flag, v, min);
}

std::vector<std::string> parse_attn_list(const char* flag, const std::vector<std::string>& names) {
  CHECK(!names.empty(), "%s is empty; give one or more of %s", flag, attention_names_list().c_str());
  std::vector<std::string> out;
  for (const std::string& n : names) out.push_back(parse_attn(n, AttnAuto::refused));
  return out;
}

std::string attn_help(AttnAuto autos) {
  std::string s;
  if (autos == AttnAuto::allowed)
    s = "auto (GPU: the first of " + attention_names_list() + " that supports the model; CPU: flash)";
  for (const AttnBackendSpec& spec : attention_specs()) {
    const std::string summary = spec.summary;
    s += (s.empty() ? "" : " | ") + std::string(spec.name) + " (" +
         summary.substr(0, summary.find(':')) + ")";
  }
  return s;
}

namespace {

const char* const kMaskHelp =
    "attention mask: causal (a query sees every earlier token of its window) | document (only the "
    "tokens of its own document; a document starts at each end-of-text token)";
const char* const kWindowHelp =
    "sliding window: a query sees at most its W most recent tokens, itself included; combines "
    "with --mask (0 = no limit)";

int checked_window(int w) {
  check_at_least("--window", w, 0, "; 0 = no limit");
  return w;
}

}  // namespace

void add_mask_flags(Table& t, MaskSpec& mask) {
  t.add_with<std::string>("mask", kMaskHelp, mask_kind_name(mask.kind),
                          [&mask](const std::string& v) { mask.kind = mask_kind_from_name(v); })
      .add_with<int>("window", kWindowHelp, std::to_string(mask.window),
                     [&mask](const int& w) { mask.window = checked_window(w); });
}

void add_mask_flags(Table& t, MaskFlags& flags, const std::string& model_default) {
  t.add_with<std::string>("mask", std::string(kMaskHelp) + "; default: " + model_default, "",
                          [&flags](const std::string& v) { flags.kind = mask_kind_from_name(v); })
      .add_with<int>("window", std::string(kWindowHelp) + "; default: " + model_default, "",
                     [&flags](const int& w) { flags.window = checked_window(w); });
}

void check_tokens_per_pass(int B, int T, const char* seq_flag, const char* hint) {
  CHECK((int64_t)B * T <= INT_MAX, "--batch %d x %s %d = %lld tokens per forward pass is more "
        "than %d; lower --batch%s", B, seq_flag, T, (long long)B * T, INT_MAX, hint);
}

}  // namespace cli
