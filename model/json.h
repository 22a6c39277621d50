// json — the little JSON that the Hugging Face files (config.json, the safetensors header) and
// `flashgpt eval --json` need: a strict parser (RFC 8259: objects, arrays, strings with
// escapes, numbers, true/false/null; nothing after the value) and string quoting.
// Numbers are doubles: exact for the integers met here (tensor byte offsets < 2^53).
#pragma once
#include <string>
#include <utility>
#include <vector>

struct Json {
  enum Kind { Null, Bool, Number, String, Array, Object };
  Kind kind = Null;
  bool boolean = false;
  double number = 0;
  std::string str;
  std::vector<Json> items;                            // Array
  std::vector<std::pair<std::string, Json>> members;  // Object, in file order
  const Json* find(const std::string& key) const;     // Object member or nullptr
};

// Throws flashgpt::Error "<what>: <problem> at byte N".
Json parse_json(const std::string& text, const std::string& what);
// "s" with the escapes JSON needs.
std::string json_quote(const std::string& s);
