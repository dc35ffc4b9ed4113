// include/kffi/details/json.h: the one JSON reader of kffi's C++ side, for metadata documents.
//
// Internal (kffi::details): libkffi's TVM-FFI bridge reads TVM metadata with it, and the torch
// glue (kffi::torch::RegisterOps, kffi.torch's op signatures) reads kffi export metadata. Header
// only, so the glue, built apart from libkffi, uses the same code. Nesting is bounded: metadata
// comes from library files.
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_DETAILS_JSON_H_
#define KFFI_DETAILS_JSON_H_

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kffi {
namespace details {

/// A JSON document as far as metadata needs: objects keep their key order.
struct Json {
  enum Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = kNull;
  bool boolean = false;
  double number = 0;
  bool integral = false;  // a number written without fraction or exponent that fits int64
  int64_t integer = 0;    // its value, when integral
  std::string str;
  std::vector<Json> items;                            // kArray
  std::vector<std::pair<std::string, Json>> members;  // kObject

  const Json* Get(const char* key) const {
    if (kind != kObject) return nullptr;
    for (const auto& m : members) {
      if (m.first == key) return &m.second;
    }
    return nullptr;
  }
  const std::string* GetString(const char* key) const {
    const Json* v = Get(key);
    return v != nullptr && v->kind == kString ? &v->str : nullptr;
  }
};

// Metadata comes from a library file, so the reader bounds its nesting instead of trusting it.
constexpr int kMaxJsonDepth = 64;

/// Parse() reads one document; false with error() set when the text is not JSON.
class JsonReader {
 public:
  explicit JsonReader(const std::string& text) : s_(text) {}

  bool Parse(Json* out) {
    if (!Value(out, 0)) return false;
    SkipSpace();
    return pos_ == s_.size() || Fail("unexpected text after the document");
  }
  const std::string& error() const { return error_; }

 private:
  bool Fail(const std::string& why) {
    if (error_.empty()) error_ = why + " at offset " + std::to_string(pos_);
    return false;
  }
  void SkipSpace() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\t' || s_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool Literal(const char* word) {
    size_t n = std::char_traits<char>::length(word);
    if (s_.compare(pos_, n, word) != 0) return Fail("unexpected text");
    pos_ += n;
    return true;
  }
  bool Value(Json* out, int depth) {
    if (depth > kMaxJsonDepth) return Fail("nesting deeper than " + std::to_string(kMaxJsonDepth));
    SkipSpace();
    if (pos_ >= s_.size()) return Fail("unexpected end");
    char c = s_[pos_];
    if (c == '{') return Object(out, depth);
    if (c == '[') return Array(out, depth);
    if (c == '"') {
      out->kind = Json::kString;
      return String(&out->str);
    }
    if (c == 't' || c == 'f') {
      out->kind = Json::kBool;
      out->boolean = c == 't';
      return Literal(c == 't' ? "true" : "false");
    }
    if (c == 'n') {
      out->kind = Json::kNull;
      return Literal("null");
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
      // RFC 8259's grammar first: strtod alone would also take "-inf", "0x1p3" or "01".
      const size_t len = NumberLength();
      if (len == 0) return Fail("bad number");
      const std::string text = s_.substr(pos_, len);
      out->kind = Json::kNumber;
      out->number = std::strtod(text.c_str(), nullptr);
      if (text.find_first_of(".eE") == std::string::npos) {
        errno = 0;
        char* int_end = nullptr;
        long long v = std::strtoll(text.c_str(), &int_end, 10);
        out->integral = errno != ERANGE && int_end == text.c_str() + len;
        out->integer = out->integral ? static_cast<int64_t>(v) : 0;
      }
      pos_ += len;
      return true;
    }
    return Fail("unexpected character");
  }
  bool Object(Json* out, int depth) {
    out->kind = Json::kObject;
    ++pos_;  // {
    SkipSpace();
    if (pos_ < s_.size() && s_[pos_] == '}') {
      ++pos_;
      return true;
    }
    while (true) {
      SkipSpace();
      std::string key;
      if (pos_ >= s_.size() || s_[pos_] != '"' || !String(&key)) return Fail("expected a key");
      SkipSpace();
      if (pos_ >= s_.size() || s_[pos_] != ':') return Fail("expected `:`");
      ++pos_;
      out->members.emplace_back(std::move(key), Json());
      if (!Value(&out->members.back().second, depth + 1)) return false;
      SkipSpace();
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < s_.size() && s_[pos_] == '}') {
        ++pos_;
        return true;
      }
      return Fail("expected `,` or `}`");
    }
  }
  bool Array(Json* out, int depth) {
    out->kind = Json::kArray;
    ++pos_;  // [
    SkipSpace();
    if (pos_ < s_.size() && s_[pos_] == ']') {
      ++pos_;
      return true;
    }
    while (true) {
      out->items.emplace_back();
      if (!Value(&out->items.back(), depth + 1)) return false;
      SkipSpace();
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < s_.size() && s_[pos_] == ']') {
        ++pos_;
        return true;
      }
      return Fail("expected `,` or `]`");
    }
  }
  static int HexDigit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  static void AppendUtf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      *out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      *out += static_cast<char>(0xC0 | (cp >> 6));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      *out += static_cast<char>(0xE0 | (cp >> 12));
      *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      *out += static_cast<char>(0xF0 | (cp >> 18));
      *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  bool Hex4(uint32_t* out) {
    if (s_.size() - pos_ < 4) return Fail("short \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      int d = HexDigit(s_[pos_ + i]);
      if (d < 0) return Fail("bad \\u escape");
      v = v * 16 + static_cast<uint32_t>(d);
    }
    pos_ += 4;
    *out = v;
    return true;
  }
  /// The length of the number at pos_ under -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?, or 0.
  size_t NumberLength() const {
    size_t i = pos_;
    auto digits = [&] {
      const size_t from = i;
      while (i < s_.size() && s_[i] >= '0' && s_[i] <= '9') ++i;
      return i - from;
    };
    if (i < s_.size() && s_[i] == '-') ++i;
    if (i < s_.size() && s_[i] == '0') {
      ++i;
    } else if (digits() == 0) {
      return 0;
    }
    if (i < s_.size() && s_[i] == '.') {
      ++i;
      if (digits() == 0) return 0;
    }
    if (i < s_.size() && (s_[i] == 'e' || s_[i] == 'E')) {
      ++i;
      if (i < s_.size() && (s_[i] == '+' || s_[i] == '-')) ++i;
      if (digits() == 0) return 0;
    }
    return i - pos_;
  }

  bool String(std::string* out) {
    ++pos_;  // opening quote
    while (pos_ < s_.size()) {
      char c = s_[pos_++];
      if (c == '"') return true;
      // Raw control characters are not JSON (a writer escapes them).
      if (static_cast<unsigned char>(c) < 0x20) return Fail("raw control character in a string");
      if (c != '\\') {
        *out += c;
        continue;
      }
      if (pos_ >= s_.size()) break;
      char e = s_[pos_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          *out += e;
          break;
        case 'b':
          *out += '\b';
          break;
        case 'f':
          *out += '\f';
          break;
        case 'n':
          *out += '\n';
          break;
        case 'r':
          *out += '\r';
          break;
        case 't':
          *out += '\t';
          break;
        case 'u': {
          uint32_t cp = 0;
          if (!Hex4(&cp)) return false;
          // A surrogate pair spells one code point outside the BMP.
          if (cp >= 0xD800 && cp < 0xDC00 && s_.compare(pos_, 2, "\\u") == 0) {
            pos_ += 2;
            uint32_t low = 0;
            if (!Hex4(&low)) return false;
            if (low < 0xDC00 || low >= 0xE000) return Fail("bad surrogate pair");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          AppendUtf8(cp, out);
          break;
        }
        default:
          return Fail("bad escape");
      }
    }
    return Fail("unterminated string");
  }

  const std::string& s_;
  size_t pos_ = 0;
  std::string error_;
};

}  // namespace details
}  // namespace kffi

#endif  // KFFI_DETAILS_JSON_H_
