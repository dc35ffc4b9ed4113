// python/kffi/torch/_pytext.cc: Python's spellings in C++ (see _pytext.h).
// SPDX-License-Identifier: Apache-2.0
#include "_pytext.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace kffi {
namespace torchglue {

using details::Json;

namespace {

constexpr const char* kPythonKeywords[] = {
    "False", "None",     "True",  "and",    "as",   "assert", "async",  "await",    "break",
    "class", "continue", "def",   "del",    "elif", "else",   "except", "finally",  "for",
    "from",  "global",   "if",    "import", "in",   "is",     "lambda", "nonlocal", "not",
    "or",    "pass",     "raise", "return", "try",  "while",  "with",   "yield"};

}  // namespace

bool IsIdentifier(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  }
  for (const char* k : kPythonKeywords) {
    if (s == k) return false;
  }
  return true;
}

/// A double as Python's repr writes it: the shortest digits that read back the same value, fixed
/// notation for exponents in [-4, 16), else d.ddde+XX.
std::string PyFloat(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // [-]d[.ddd]e[+-]XX
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  int exp = std::stoi(sci.substr(e + 1));
  if (exp >= -4 && exp < 16) {
    std::string out;
    if (exp < 0) {
      out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else if (static_cast<size_t>(exp) + 1 >= digits.size()) {
      out = digits + std::string(static_cast<size_t>(exp) + 1 - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, static_cast<size_t>(exp) + 1) + "." +
            digits.substr(static_cast<size_t>(exp) + 1);
    }
    return sign + out;
  }
  std::string mant = digits.substr(0, 1);
  if (digits.size() > 1) mant += "." + digits.substr(1);
  char ebuf[16];
  std::snprintf(ebuf, sizeof(ebuf), "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  return sign + mant + ebuf;
}

/// A JSON value as Python's repr writes what json.loads makes of it.
std::string PyReprJson(const Json& v, int depth) {
  switch (v.kind) {
    case Json::kNull:
      return "None";
    case Json::kBool:
      return v.boolean ? "True" : "False";
    case Json::kNumber:
      return v.integral ? std::to_string(v.integer) : PyFloat(v.number);
    case Json::kString:
      return PyRepr(v.str);
    case Json::kArray: {
      if (depth > details::kMaxJsonDepth) return "[...]";
      std::string out = "[";
      for (size_t i = 0; i < v.items.size(); ++i) {
        out += (i ? ", " : "") + PyReprJson(v.items[i], depth + 1);
      }
      return out + "]";
    }
    default: {
      if (depth > details::kMaxJsonDepth) return "{...}";
      std::string out = "{";
      for (size_t i = 0; i < v.members.size(); ++i) {
        out += (i ? ", " : "") + PyRepr(v.members[i].first) + ": " +
               PyReprJson(v.members[i].second, depth + 1);
      }
      return out + "}";
    }
  }
}

std::string PyList(const std::vector<std::string>& names) {
  std::string out = "[";
  for (size_t i = 0; i < names.size(); ++i) out += (i ? ", " : "") + PyRepr(names[i]);
  return out + "]";
}

std::string Join(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? sep : "") + items[i];
  return out;
}

/// A string as json.dumps writes it (ASCII only: other code points as \uXXXX).
std::string JsonDumps(const std::string& s) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    uint32_t cp = c;
    size_t len = 1;
    if (c >= 0xF0 && i + 3 < s.size()) {
      cp = ((c & 0x07u) << 18) | ((s[i + 1] & 0x3Fu) << 12) | ((s[i + 2] & 0x3Fu) << 6) |
           (s[i + 3] & 0x3Fu);
      len = 4;
    } else if (c >= 0xE0 && i + 2 < s.size()) {
      cp = ((c & 0x0Fu) << 12) | ((s[i + 1] & 0x3Fu) << 6) | (s[i + 2] & 0x3Fu);
      len = 3;
    } else if (c >= 0xC0 && i + 1 < s.size()) {
      cp = ((c & 0x1Fu) << 6) | (s[i + 1] & 0x3Fu);
      len = 2;
    }
    i += len;
    char buf[16];
    if (cp == '"') {
      out += "\\\"";
    } else if (cp == '\\') {
      out += "\\\\";
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp == '\b') {
      out += "\\b";
    } else if (cp == '\f') {
      out += "\\f";
    } else if (cp < 0x20 || (cp >= 0x7F && cp < 0x10000)) {
      std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
      out += buf;
    } else if (cp >= 0x10000) {
      cp -= 0x10000;
      std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
      out += buf;
    } else {
      out += static_cast<char>(cp);
    }
  }
  return out + "\"";
}

std::string PyRepr(const std::string& s) {
  const bool dq = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = dq ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    char buf[8];
    if (c == '\\') {
      out += "\\\\";
    } else if (c == static_cast<unsigned char>(q)) {
      out += std::string("\\") + q;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + q;
}

}  // namespace torchglue
}  // namespace kffi
