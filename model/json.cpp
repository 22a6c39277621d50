// json.cpp — see json.h. A recursive-descent parser over the bytes.
#include "model/json.h"

#include <cstdlib>

#include "kernels/common.h"

namespace {

struct Parser {
  const std::string& s;
  const std::string& what;
  size_t i = 0;
  int depth = 0;

  [[noreturn]] void fail(const char* problem) const {
    THROW_ERROR("%s: %s at byte %zu", what.c_str(), problem, i);
  }
  void ws() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) i++;
  }
  bool eat(char c) {
    ws();
    if (i < s.size() && s[i] == c) {
      i++;
      return true;
    }
    return false;
  }
  void expect(char c, const char* problem) {
    if (!eat(c)) fail(problem);
  }
  void literal(const char* word) {
    for (const char* p = word; *p; p++, i++)
      if (i >= s.size() || s[i] != *p) fail("invalid literal");
  }
  static void utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += (char)cp;
    } else if (cp < 0x800) {
      out += (char)(0xC0 | cp >> 6);
      out += (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += (char)(0xE0 | cp >> 12);
      out += (char)(0x80 | (cp >> 6 & 0x3F));
      out += (char)(0x80 | (cp & 0x3F));
    } else {
      out += (char)(0xF0 | cp >> 18);
      out += (char)(0x80 | (cp >> 12 & 0x3F));
      out += (char)(0x80 | (cp >> 6 & 0x3F));
      out += (char)(0x80 | (cp & 0x3F));
    }
  }
  unsigned hex4() {
    if (i + 4 > s.size()) fail("truncated \\u escape");
    unsigned v = 0;
    for (int k = 0; k < 4; k++, i++) {
      const char c = s[i];
      v = v * 16 + (c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10 : (fail("bad \\u escape"), 0));
    }
    return v;
  }
  std::string string() {
    ws();
    if (i >= s.size() || s[i] != '"') fail("expected a string");
    i++;
    std::string out;
    while (true) {
      if (i >= s.size()) fail("unterminated string");
      const unsigned char c = s[i++];
      if (c == '"') return out;
      if (c < 0x20) fail("control character in a string");
      if (c != '\\') {
        out += (char)c;
        continue;
      }
      if (i >= s.size()) fail("unterminated string");
      const char e = s[i++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00) {  // a surrogate pair
            if (i + 2 > s.size() || s[i] != '\\' || s[i + 1] != 'u') fail("lone surrogate");
            i += 2;
            const unsigned lo = hex4();
            if (lo < 0xDC00 || lo >= 0xE000) fail("bad surrogate pair");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          utf8(out, cp);
          break;
        }
        default: fail("bad escape");
      }
    }
  }
  Json value() {
    if (++depth > 64) fail("nesting too deep");
    ws();
    if (i >= s.size()) fail("unexpected end");
    Json v;
    const char c = s[i];
    if (c == '{') {
      i++;
      v.kind = Json::Object;
      if (!eat('}')) {
        do {
          std::string key = string();
          expect(':', "expected ':'");
          v.members.emplace_back(std::move(key), value());
        } while (eat(','));
        expect('}', "expected ',' or '}'");
      }
    } else if (c == '[') {
      i++;
      v.kind = Json::Array;
      if (!eat(']')) {
        do v.items.push_back(value());
        while (eat(','));
        expect(']', "expected ',' or ']'");
      }
    } else if (c == '"') {
      v.kind = Json::String;
      v.str = string();
    } else if (c == 't') {
      literal("true");
      v.kind = Json::Bool;
      v.boolean = true;
    } else if (c == 'f') {
      literal("false");
      v.kind = Json::Bool;
    } else if (c == 'n') {
      literal("null");
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      const size_t start = i;
      if (s[i] == '-') i++;
      auto digits = [&] {
        const size_t d = i;
        while (i < s.size() && s[i] >= '0' && s[i] <= '9') i++;
        if (i == d) fail("bad number");
      };
      digits();
      if (i < s.size() && s[i] == '.') i++, digits();
      if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < s.size() && (s[i] == '+' || s[i] == '-')) i++;
        digits();
      }
      v.kind = Json::Number;
      v.number = std::strtod(s.substr(start, i - start).c_str(), nullptr);
    } else {
      fail("unexpected character");
    }
    depth--;
    return v;
  }
};

}  // namespace

const Json* Json::find(const std::string& key) const {
  for (const auto& m : members)
    if (m.first == key) return &m.second;
  return nullptr;
}

Json parse_json(const std::string& text, const std::string& what) {
  Parser p{text, what};
  Json v = p.value();
  p.ws();
  if (p.i != text.size()) p.fail("text after the JSON value");
  return v;
}

std::string json_quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"') out += "\\\"";
    else if (c == '\\') out += "\\\\";
    else if (c < 0x20) out += flashgpt::strformat("\\u%04x", c);
    else out += (char)c;
  }
  return out + "\"";
}
