// src/core/string.cc: str/bytes values (small inline or Str/Bytes objects) and dtype <-> string.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/c_api.h>

#include <cstring>
#include <new>
#include <string>
#include <string_view>

#include "core/runtime_internal.h"

namespace {

using kffi::details::ThrowCApiError;

// Str and Bytes are one allocation: header, KFFIStrCell, then the bytes and a NUL. Nothing to
// destroy, so Strong does nothing and Weak frees.
void StringObjectDeleter(void* self, int flags) {
  if (flags & kKFFIObjectDeleterFlagWeak) ::operator delete(self);
}

KFFIObject* NewStringObject(const char* data, size_t size, int32_t type_index) {
  constexpr size_t kHead = sizeof(KFFIObject) + sizeof(KFFIStrCell);
  size_t bytes_total = 0;
  if (!kffi::details::AllocBytes(kHead + 1, size, 1, &bytes_total)) {
    kffi::details::ThrowAllocSizeError(size, 1);
  }
  char* mem = static_cast<char*>(::operator new(bytes_total));
  char* bytes = mem + kHead;
  if (size != 0) std::memcpy(bytes, data, size);
  bytes[size] = '\0';
  KFFIObject* obj = new (mem) KFFIObject;
  kffi::details::InitObjectHeader(obj, type_index, &StringObjectDeleter);
  KFFIStrCell* cell = new (mem + sizeof(KFFIObject)) KFFIStrCell;
  cell->data = bytes;
  cell->size = size;
  return obj;
}

// ---------------------------------------------------------------------------------------------
// Data types. Canonical spellings follow DLPack/TVM names; ToString(FromString(s)) == s for
// each canonical s, and every dtype has a spelling that parses back.
// ---------------------------------------------------------------------------------------------

// Names with a fixed code and bit width.
struct FixedName {
  const char* name;
  uint8_t code;
  uint8_t bits;
};
constexpr FixedName kFixedNames[] = {
    {"bool", kDLBool, 8},
    {"handle", kDLOpaqueHandle, 64},
    {"float8_e3m4", kDLFloat8_e3m4, 8},
    {"float8_e4m3", kDLFloat8_e4m3, 8},
    {"float8_e4m3b11fnuz", kDLFloat8_e4m3b11fnuz, 8},
    {"float8_e4m3fn", kDLFloat8_e4m3fn, 8},
    {"float8_e4m3fnuz", kDLFloat8_e4m3fnuz, 8},
    {"float8_e5m2", kDLFloat8_e5m2, 8},
    {"float8_e5m2fnuz", kDLFloat8_e5m2fnuz, 8},
    {"float8_e8m0fnu", kDLFloat8_e8m0fnu, 8},
    {"float6_e2m3fn", kDLFloat6_e2m3fn, 6},
    {"float6_e3m2fn", kDLFloat6_e3m2fn, 6},
    {"float4_e2m1fn", kDLFloat4_e2m1fn, 4},
};

// Names spelled prefix + bits ("int32", "complex64", "handle32").
struct BitsPrefix {
  const char* prefix;
  uint8_t code;
};
constexpr BitsPrefix kBitsPrefixes[] = {
    {"int", kDLInt},       {"uint", kDLUInt},       {"float", kDLFloat},
    {"bfloat", kDLBfloat}, {"complex", kDLComplex}, {"handle", kDLOpaqueHandle},
};

// Lanes are read as int16 (as TVM does): 1..32767 fixed, 32768..65535 a scalable vector of
// (65536 - lanes) times vscale.
constexpr uint32_t kMaxFixedLanes = 32767;
constexpr uint32_t kMaxScalableLanes = 32768;

// Parses a decimal in [lo, hi] with no sign, no leading zero and nothing around it.
bool ParseDecimal(std::string_view s, uint32_t lo, uint32_t hi, uint32_t* out) {
  if (s.empty() || s.size() > 6 || (s.size() > 1 && s[0] == '0')) return false;
  uint32_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint32_t>(c - '0');
  }
  if (v < lo || v > hi) return false;
  *out = v;
  return true;
}

bool ConsumePrefix(std::string_view* s, std::string_view prefix) {
  if (s->substr(0, prefix.size()) != prefix) return false;
  s->remove_prefix(prefix.size());
  return true;
}

// The fallback spelling `dtype(code=C, bits=B, lanes=L)`, so that unknown codes round trip.
bool ParseGeneric(std::string_view s, DLDataType* out) {
  uint32_t code, bits, lanes;
  auto field = [&s](std::string_view prefix, std::string_view end, uint32_t hi, uint32_t* v) {
    if (!ConsumePrefix(&s, prefix)) return false;
    size_t pos = s.find(end);
    if (pos == std::string_view::npos || !ParseDecimal(s.substr(0, pos), 0, hi, v)) return false;
    s.remove_prefix(pos);
    return ConsumePrefix(&s, end);
  };
  if (!field("dtype(code=", ", ", 255, &code) || !field("bits=", ", ", 255, &bits) ||
      !field("lanes=", ")", 65535, &lanes) || !s.empty()) {
    return false;
  }
  out->code = static_cast<uint8_t>(code);
  out->bits = static_cast<uint8_t>(bits);
  out->lanes = static_cast<uint16_t>(lanes);
  return true;
}

// Short spellings that TVM-FFI producers write ("i32", "bf16", "fp8_e4m3"): each prefix stands
// for a canonical one, tried only after the name failed as written.
struct PrefixAlias {
  std::string_view alias;
  std::string_view canonical;
};
constexpr PrefixAlias kPrefixAliases[] = {
    {"fp8_", "float8_"}, {"f8_", "float8_"}, {"fp6_", "float6_"}, {"f6_", "float6_"},
    {"fp4_", "float4_"}, {"f4_", "float4_"}, {"bf", "bfloat"},    {"i", "int"},
    {"u", "uint"},       {"f", "float"},
};

// A canonical base name alone: fixed names, then prefix + bits.
bool ParseCanonicalScalar(std::string_view s, uint16_t lanes, DLDataType* out) {
  for (const FixedName& f : kFixedNames) {
    if (s == f.name) {
      *out = DLDataType{f.code, f.bits, lanes};
      return true;
    }
  }
  for (const BitsPrefix& p : kBitsPrefixes) {
    std::string_view rest = s;
    uint32_t bits;
    if (ConsumePrefix(&rest, p.prefix) && ParseDecimal(rest, 1, 255, &bits)) {
      *out = DLDataType{p.code, static_cast<uint8_t>(bits), lanes};
      return true;
    }
  }
  return false;
}

// A base name alone, canonical or spelled with an alias prefix.
bool ParseScalarType(std::string_view s, uint16_t lanes, DLDataType* out) {
  if (ParseCanonicalScalar(s, lanes, out)) return true;
  for (const PrefixAlias& a : kPrefixAliases) {
    if (s.substr(0, a.alias.size()) != a.alias) continue;
    std::string canonical(a.canonical);
    canonical.append(s.substr(a.alias.size()));
    if (ParseCanonicalScalar(canonical, lanes, out)) return true;
  }
  return false;
}

bool ParseDataType(std::string_view s, DLDataType* out) {
  if (s == "void") {
    *out = DLDataType{kDLOpaqueHandle, 0, 0};
    return true;
  }
  if (s.substr(0, 6) == "dtype(") return ParseGeneric(s, out);
  if (ParseScalarType(s, 1, out)) return true;
  // A scalable vector, "int32xvscalex4": lanes holds minus the multiple of vscale (DLPack's lanes
  // read as int16, negative).
  constexpr std::string_view kScalable = "xvscalex";
  size_t v = s.rfind(kScalable);
  uint32_t lanes;
  if (v != std::string_view::npos &&
      ParseDecimal(s.substr(v + kScalable.size()), 1, kMaxScalableLanes, &lanes)) {
    return ParseScalarType(s.substr(0, v), static_cast<uint16_t>(65536 - lanes), out);
  }
  // "complex64" holds an 'x' of its own, so the lanes suffix is tried only after the whole
  // string failed as a scalar name, and split at the last 'x'.
  size_t x = s.rfind('x');
  if (x == std::string_view::npos || !ParseDecimal(s.substr(x + 1), 1, kMaxFixedLanes, &lanes)) {
    return false;
  }
  std::string_view base = s.substr(0, x);
  // "float4_e2m1fn_x2": some producers put an underscore before the lanes.
  if (base.size() > 1 && base.back() == '_') base.remove_suffix(1);
  return ParseScalarType(base, static_cast<uint16_t>(lanes), out);
}

}  // namespace

namespace kffi {
namespace details {

std::string FormatDataType(const DLDataType& t) {
  if (t.code == kDLOpaqueHandle && t.bits == 0 && t.lanes == 0) return "void";
  std::string base;
  if (t.lanes != 0) {
    for (const FixedName& f : kFixedNames) {
      if (t.code == f.code && t.bits == f.bits) {
        base = f.name;
        break;
      }
    }
    if (base.empty() && t.bits != 0) {
      for (const BitsPrefix& p : kBitsPrefixes) {
        if (t.code == p.code) {
          base = p.prefix + std::to_string(t.bits);
          break;
        }
      }
    }
  }
  if (base.empty()) {
    // Unknown code or a width the names cannot express: still printable (and parseable).
    return "dtype(code=" + std::to_string(t.code) + ", bits=" + std::to_string(t.bits) +
           ", lanes=" + std::to_string(t.lanes) + ")";
  }
  if (t.lanes > kMaxFixedLanes) {
    base += "xvscalex" + std::to_string(65536 - t.lanes);
  } else if (t.lanes > 1) {
    base += "x" + std::to_string(t.lanes);
  }
  return base;
}

void MakeStringAny(const char* data, size_t size, bool is_bytes, KFFIAny* out) {
  if (size <= 7) {
    // The unused bytes stay zero: values compare bytewise, and stay NUL-ended. Built aside, as
    // data may point into *out.
    KFFIAny v;
    SetSmallBytes(&v, is_bytes ? kKFFISmallBytes : kKFFISmallStr, data, size);
    *out = v;
    return;
  }
  SetObject(out, NewStringObject(data, size, is_bytes ? kKFFIBytes : kKFFIStr));
}

}  // namespace details
}  // namespace kffi

int KFFIStringFromByteArray(const KFFIByteArray* input, KFFIAny* out) {
  KFFI_CAPI_BEGIN();
  std::string_view s = kffi::details::ByteArrayArg(input, "KFFIStringFromByteArray: input");
  kffi::details::CheckOutArg(out, "KFFIStringFromByteArray: out");
  kffi::details::MakeStringAny(s.data(), s.size(), /*is_bytes=*/false, out);
  KFFI_CAPI_END();
}

int KFFIBytesFromByteArray(const KFFIByteArray* input, KFFIAny* out) {
  KFFI_CAPI_BEGIN();
  std::string_view s = kffi::details::ByteArrayArg(input, "KFFIBytesFromByteArray: input");
  kffi::details::CheckOutArg(out, "KFFIBytesFromByteArray: out");
  kffi::details::MakeStringAny(s.data(), s.size(), /*is_bytes=*/true, out);
  KFFI_CAPI_END();
}

int KFFIDataTypeFromString(const KFFIByteArray* str, DLDataType* out) {
  KFFI_CAPI_BEGIN();
  std::string_view s = kffi::details::ByteArrayArg(str, "KFFIDataTypeFromString: str");
  kffi::details::CheckOutArg(out, "KFFIDataTypeFromString: out");
  if (!ParseDataType(s, out)) {
    ThrowCApiError("ValueError", "Cannot parse data type from string `" + std::string(s) + "`");
  }
  KFFI_CAPI_END();
}

int KFFIDataTypeToString(const DLDataType* dtype, KFFIAny* out) {
  KFFI_CAPI_BEGIN();
  kffi::details::CheckOutArg(dtype, "KFFIDataTypeToString: dtype");
  kffi::details::CheckOutArg(out, "KFFIDataTypeToString: out");
  std::string s = kffi::details::FormatDataType(*dtype);
  kffi::details::MakeStringAny(s.data(), s.size(), /*is_bytes=*/false, out);
  KFFI_CAPI_END();
}
