// src/core/json_writer.h: the one JSON writer of kffi (libkffi's metadata and libkffi_tvm's), and
// the double formatting that messages and metadata share (never installed).
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_SRC_CORE_JSON_WRITER_H_
#define KFFI_SRC_CORE_JSON_WRITER_H_

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>

namespace kffi {
namespace details {

/// A double with the fewest digits that read back the same value, as Python's repr writes it
/// (1.0, not 1; 1e+300).
inline std::string FormatDouble(double v) {
  char buf[40];
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof(buf), "%.*g", prec, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string s(buf);
  if (s.find_first_of(".eni") == std::string::npos) s += ".0";
  return s;
}

/// A minimal JSON writer, the one of kffi: export and contract metadata (metadata.cc) and the
/// TVM-FFI bridge's converted metadata (tvm_bridge/metadata.cc). Commas come
/// by themselves; strings are escaped, with bytes >= 0x80 passed through (UTF-8 stays UTF-8).
class JsonWriter {
 public:
  JsonWriter& BeginObject() { return Open('{'); }
  JsonWriter& EndObject() { return Close('}'); }
  JsonWriter& BeginArray() { return Open('['); }
  JsonWriter& EndArray() { return Close(']'); }
  /// A key; its value comes next.
  JsonWriter& Key(std::string_view key) {
    String(key);
    out_ += ':';
    comma_ = false;
    return *this;
  }
  JsonWriter& String(std::string_view s) {
    Sep();
    out_ += '"';
    for (unsigned char c : s) {
      switch (c) {
        case '"':
          out_ += "\\\"";
          break;
        case '\\':
          out_ += "\\\\";
          break;
        case '\n':
          out_ += "\\n";
          break;
        case '\r':
          out_ += "\\r";
          break;
        case '\t':
          out_ += "\\t";
          break;
        default:
          if (c < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof(buf), "\\u%04x", c);
            out_ += buf;
          } else {
            out_ += static_cast<char>(c);
          }
      }
    }
    out_ += '"';
    return *this;
  }
  JsonWriter& Int(int64_t v) { return Raw(std::to_string(v)); }
  /// A finite double (FormatDouble: 1.0, not 1, so that readers see a float).
  JsonWriter& Double(double v) { return Raw(FormatDouble(v)); }
  JsonWriter& Bool(bool v) { return Raw(v ? "true" : "false"); }
  JsonWriter& Null() { return Raw("null"); }
  JsonWriter& Field(std::string_view key, std::string_view value) { return Key(key).String(value); }
  std::string Take() { return std::move(out_); }

 private:
  void Sep() {
    if (comma_) out_ += ',';
    comma_ = true;
  }
  JsonWriter& Raw(std::string_view text) {
    Sep();
    out_ += text;
    return *this;
  }
  JsonWriter& Open(char c) {
    Sep();
    out_ += c;
    comma_ = false;
    return *this;
  }
  JsonWriter& Close(char c) {
    out_ += c;
    comma_ = true;
    return *this;
  }

  std::string out_;
  bool comma_ = false;
};

}  // namespace details
}  // namespace kffi

#endif  // KFFI_SRC_CORE_JSON_WRITER_H_
