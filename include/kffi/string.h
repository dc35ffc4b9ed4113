// include/kffi/string.h: String and Bytes, immutable, with up to 7 bytes stored inline.
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_STRING_H_
#define KFFI_STRING_H_

#include <kffi/object.h>

#include <string>
#include <string_view>

namespace kffi {

/// The object behind a String longer than 7 bytes (made by the runtime; read here).
class StrObj : public Object, public KFFIByteArray {
 public:
  KFFI_DECLARE_STATIC_OBJECT_INFO("ffi.Str", StrObj, Object, kKFFIStr, true)
};

/// The object behind Bytes longer than 7 bytes.
class BytesObj : public Object, public KFFIByteArray {
 public:
  KFFI_DECLARE_STATIC_OBJECT_INFO("ffi.Bytes", BytesObj, Object, kKFFIBytes, true)
};

namespace details {

/// Storage shared by String and Bytes: a value that is either small (inline bytes) or an owned
/// object whose cell is a byte array. Layout-identical to KFFIAny, so conversion is a copy.
template <int32_t kSmallIndex, int32_t kObjectIndex>
class ByteStorage {
 public:
  ByteStorage() noexcept { InitEmpty(); }
  ByteStorage(const char* data, size_t size) { Init(data, size); }
  ByteStorage(const ByteStorage& other) noexcept : data_(other.data_) { Retain(); }
  ByteStorage(ByteStorage&& other) noexcept : data_(other.data_) { other.InitEmpty(); }
  ByteStorage& operator=(const ByteStorage& other) noexcept {
    ByteStorage tmp(other);
    std::swap(data_, tmp.data_);
    return *this;
  }
  ByteStorage& operator=(ByteStorage&& other) noexcept {
    std::swap(data_, other.data_);
    return *this;
  }
  ~ByteStorage() { Release(); }

  /// Pointer to the bytes; always followed by a NUL byte.
  const char* data() const noexcept {
    return data_.type_index == kSmallIndex ? data_.v_bytes : Cell()->data;
  }
  size_t size() const noexcept {
    return data_.type_index == kSmallIndex ? data_.small_str_len : Cell()->size;
  }
  bool empty() const noexcept { return size() == 0; }
  std::string_view view() const noexcept { return std::string_view(data(), size()); }
  /// The raw value (borrowed).
  const KFFIAny& raw() const noexcept { return data_; }

  /// Gives up the owned value (the caller now holds its reference); leaves this empty.
  KFFIAny ReleaseToAny() noexcept {
    KFFIAny out = data_;
    InitEmpty();
    return out;
  }

  /// Adopts an owned value that holds this kind of bytes (small or object).
  static ByteStorage FromOwnedAny(const KFFIAny& v) noexcept {
    ByteStorage out;
    out.data_ = v;
    return out;
  }

 protected:
  void Init(const char* data, size_t size) {
    if (size <= 7) {
      SetSmallBytes(&data_, kSmallIndex, data, size);
      return;
    }
    KFFIByteArray in = ToByteArray(data, size);
    int rc = kObjectIndex == kKFFIStr ? KFFIStringFromByteArray(&in, &data_)
                                      : KFFIBytesFromByteArray(&in, &data_);
    if (rc != 0) ThrowRaisedError(rc);
  }
  void InitEmpty() noexcept { SetSmallBytes(&data_, kSmallIndex, nullptr, 0); }
  const KFFIByteArray* Cell() const noexcept {
    return reinterpret_cast<const KFFIByteArray*>(KFFIObjectGetCellPtr(data_.v_obj));
  }
  void Retain() noexcept {
    if (data_.type_index >= kKFFIStaticObjectBegin) {
      ObjectUnsafe::IncRef(static_cast<Object*>(static_cast<void*>(data_.v_obj)));
    }
  }
  void Release() noexcept {
    if (data_.type_index >= kKFFIStaticObjectBegin) {
      ObjectUnsafe::DecRef(static_cast<Object*>(static_cast<void*>(data_.v_obj)));
    }
  }

  KFFIAny data_;
};

}  // namespace details

/// An immutable UTF-8 string. Strings of up to 7 bytes need no allocation.
class String : public details::ByteStorage<kKFFISmallStr, kKFFIStr> {
  using Base = details::ByteStorage<kKFFISmallStr, kKFFIStr>;

 public:
  String() noexcept = default;
  String(const char* s) : Base(s, std::strlen(s)) {}          // NOLINT
  String(const char* s, size_t n) : Base(s, n) {}             // NOLINT
  String(const std::string& s) : Base(s.data(), s.size()) {}  // NOLINT
  String(std::string_view s) : Base(s.data(), s.size()) {}    // NOLINT
  explicit String(Base&& b) noexcept : Base(std::move(b)) {}

  /// NUL-terminated contents.
  const char* c_str() const noexcept { return data(); }
  size_t length() const noexcept { return size(); }
  operator std::string() const { return std::string(data(), size()); }  // NOLINT
  operator std::string_view() const noexcept { return view(); }         // NOLINT
  int compare(std::string_view other) const noexcept { return view().compare(other); }
  char at(size_t i) const;
};

/// An immutable byte string. Up to 7 bytes need no allocation.
class Bytes : public details::ByteStorage<kKFFISmallBytes, kKFFIBytes> {
  using Base = details::ByteStorage<kKFFISmallBytes, kKFFIBytes>;

 public:
  Bytes() noexcept = default;
  Bytes(const char* s, size_t n) : Base(s, n) {}
  Bytes(const std::string& s) : Base(s.data(), s.size()) {}  // NOLINT
  explicit Bytes(Base&& b) noexcept : Base(std::move(b)) {}
  operator std::string() const { return std::string(data(), size()); }  // NOLINT
};

inline char String::at(size_t i) const {
  if (i >= size()) {
    KFFI_THROW(IndexError) << "String index " << i << " out of range for length " << size();
  }
  return data()[i];
}

#define KFFI_DEFINE_BYTES_COMPARE(Type)                                                            \
  inline bool operator==(const Type& a, const Type& b) { return a.view() == b.view(); }            \
  inline bool operator!=(const Type& a, const Type& b) { return !(a == b); }                       \
  inline bool operator<(const Type& a, const Type& b) { return a.view().compare(b.view()) < 0; }   \
  inline bool operator==(const Type& a, std::string_view b) { return a.view() == b; }              \
  inline bool operator!=(const Type& a, std::string_view b) { return !(a == b); }                  \
  inline bool operator==(std::string_view a, const Type& b) { return b == a; }                     \
  inline bool operator==(const Type& a, const char* b) { return a.view() == std::string_view(b); } \
  inline bool operator!=(const Type& a, const char* b) { return !(a == b); }                       \
  inline bool operator!=(std::string_view a, const Type& b) { return !(b == a); }                  \
  inline bool operator==(const char* a, const Type& b) { return b == a; }                          \
  inline bool operator!=(const char* a, const Type& b) { return !(b == a); }                       \
  inline bool operator==(const Type& a, const std::string& b) {                                    \
    return a.view() == std::string_view(b);                                                        \
  }                                                                                                \
  inline bool operator!=(const Type& a, const std::string& b) { return !(a == b); }                \
  inline bool operator==(const std::string& a, const Type& b) { return b == a; }                   \
  inline bool operator!=(const std::string& a, const Type& b) { return !(b == a); }
KFFI_DEFINE_BYTES_COMPARE(String)
KFFI_DEFINE_BYTES_COMPARE(Bytes)
#undef KFFI_DEFINE_BYTES_COMPARE

inline String operator+(const String& a, std::string_view b) {
  std::string s(a.view());
  s.append(b.data(), b.size());
  return String(s);
}

/// For error messages.
inline std::string KFFIToErrorString(const String& s) { return std::string(s.view()); }

}  // namespace kffi

// std::hash<kffi::String> hashes the bytes (left out of the Doxygen reference, which has no std
// scope to put it in).
/// \cond
template <>
struct std::hash<kffi::String> {
  size_t operator()(const kffi::String& s) const noexcept {
    return std::hash<std::string_view>()(s.view());
  }
};
/// \endcond

#endif  // KFFI_STRING_H_
