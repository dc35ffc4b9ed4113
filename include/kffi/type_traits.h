// include/kffi/type_traits.h: how each C++ type converts to and from a KFFIAny value.
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_TYPE_TRAITS_H_
#define KFFI_TYPE_TRAITS_H_

#include <kffi/details/dtype_of.h>
#include <kffi/object.h>
#include <kffi/string.h>

#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>

namespace kffi {

/// Conversion rules of a C++ type T. An enabled specialisation provides:
///   CopyToAnyView(const T&, KFFIAny*)      a borrowed view (no reference taken)
///   MoveToAny(T, KFFIAny*)                 an owned value
///   CheckAnyStrict(const KFFIAny*)         the value is stored exactly as T stores it
///   CopyFromAnyViewAfterCheck(const KFFIAny*)  read after CheckAnyStrict
///   TryCastFromAnyView(const KFFIAny*)     read with the allowed conversions, or nullopt
///   TypeStr()                              the name shown in signatures and messages
template <typename T, typename = void>
struct TypeTraits {
  static constexpr bool convert_enabled = false;
};

/// TypeTraits of T with references and cv-qualifiers removed.
template <typename T>
using TypeTraitsNoCR = TypeTraits<std::remove_cv_t<std::remove_reference_t<T>>>;

namespace details {

/// The name of a value's type as messages show it: int, float, str, Tensor, ...
inline std::string AnyTypeStr(const KFFIAny* v) {
  switch (v->type_index) {
    case kKFFINone:
      return "None";
    case kKFFIInt:
      return "int";
    case kKFFIBool:
      return "bool";
    case kKFFIFloat:
      return "float";
    case kKFFIOpaquePtr:
      return "void*";
    case kKFFIDataType:
      return "DataType";
    case kKFFIDevice:
      return "Device";
    case kKFFIDLTensorPtr:
      return "DLTensor*";
    case kKFFIRawStr:
    case kKFFISmallStr:
    case kKFFIStr:
      return "str";
    case kKFFIByteArrayPtr:
    case kKFFISmallBytes:
    case kKFFIBytes:
      return "bytes";
    case kKFFIObjectRValueRef:
      return "ObjectRValueRef";
    default:
      break;
  }
  std::string key = TypeIndexToKey(v->type_index);
  if (key.compare(0, 4, "ffi.") == 0) key.erase(0, 4);
  return key;
}

/// The name a type key shows in signatures ("ffi.Tensor" -> "Tensor").
inline std::string TypeKeyToStr(const char* key) {
  std::string s(key);
  if (s.compare(0, 4, "ffi.") == 0) s.erase(0, 4);
  return s;
}

/// Parameter types that take a tensor: their TypeTraits have ArgTensor(v), the DLTensor of an
/// argument (or NULL when it holds none). The device guard of typed calls reads them.
template <typename Traits, typename = void>
struct HasArgTensor : std::false_type {};
template <typename Traits>
struct HasArgTensor<Traits, std::void_t<decltype(Traits::ArgTensor(nullptr))>> : std::true_type {};

/// What a converter says it received when a value does not fit; defaults to the type name.
template <typename T, typename = void>
struct HasMismatchInfo : std::false_type {};
template <typename T>
struct HasMismatchInfo<T, std::void_t<decltype(T::GetMismatchTypeInfo(nullptr))>> : std::true_type {
};
template <typename T>
inline std::string MismatchTypeInfo(const KFFIAny* v) {
  if constexpr (HasMismatchInfo<TypeTraitsNoCR<T>>::value) {
    return TypeTraitsNoCR<T>::GetMismatchTypeInfo(v);
  } else {
    return AnyTypeStr(v);
  }
}

/// Types whose TypeTraits are written by hand rather than taken from the ObjectRef rule.
template <typename T, typename = void>
struct HasCustomTraits : std::false_type {};
template <typename T>
struct HasCustomTraits<T, std::void_t<decltype(T::_type_custom_traits)>> : std::true_type {};

/// Formats a dtype ("float32") through the runtime.
inline std::string DataTypeToString(DLDataType dtype) {
  KFFIAny out;
  SetNone(&out);
  if (KFFIDataTypeToString(&dtype, &out) != 0) ThrowRaisedError(-1);
  String s(String::FromOwnedAny(out));
  return std::string(s.view());
}
/// Parses a dtype string; a bad one throws ValueError.
inline DLDataType StringToDataType(std::string_view s) {
  KFFIByteArray in = ToByteArray(s.data(), s.size());
  DLDataType out;
  if (KFFIDataTypeFromString(&in, &out) != 0) ThrowRaisedError(-1);
  return out;
}
/// The name of a device type: "cpu", "cuda", ...
inline const char* DeviceTypeName(int32_t device_type) {
  switch (device_type) {
    case kDLCPU:
      return "cpu";
    case kDLCUDA:
      return "cuda";
    case kDLCUDAHost:
      return "cuda_host";
    case kDLCUDAManaged:
      return "cuda_managed";
    case kDLOpenCL:
      return "opencl";
    case kDLVulkan:
      return "vulkan";
    case kDLMetal:
      return "metal";
    case kDLROCM:
      return "rocm";
    case kDLROCMHost:
      return "rocm_host";
    case kDLOneAPI:
      return "oneapi";
    case kDLWebGPU:
      return "webgpu";
    case kDLHexagon:
      return "hexagon";
    case kDLExtDev:
      return "ext_dev";
    case kDLMAIA:
      return "maia";
    case kDLTrn:
      return "trn";
    default:
      return "unknown_device";
  }
}
/// "cpu", "cuda:0".
inline std::string DeviceToString(DLDevice d) {
  if (d.device_type == kDLCPU) return "cpu";
  return std::string(DeviceTypeName(d.device_type)) + ":" + std::to_string(d.device_id);
}

}  // namespace details

}  // namespace kffi

/// DLPack values print readably in error messages (found by argument-dependent lookup).
inline std::string KFFIToErrorString(const DLDataType& d) {
  return ::kffi::details::DataTypeToString(d);
}
inline std::string KFFIToErrorString(const DLDevice& d) {
  return ::kffi::details::DeviceToString(d);
}

namespace kffi {

// ---- integers -------------------------------------------------------------------------------
template <typename Int>
struct TypeTraits<Int, std::enable_if_t<std::is_integral_v<Int> && !std::is_same_v<Int, bool> &&
                                        !std::is_same_v<Int, char>>> {
  static constexpr bool convert_enabled = true;
  static constexpr int32_t field_static_type_index = kKFFIInt;
  static bool InRange(int64_t v) {
    if constexpr (std::is_same_v<Int, int64_t> || std::is_same_v<Int, long long> ||  // NOLINT
                  std::is_same_v<Int, long>) {                                       // NOLINT
      return true;
    } else if constexpr (std::is_unsigned_v<Int> && sizeof(Int) >= sizeof(int64_t)) {
      return v >= 0;
    } else {
      return v >= static_cast<int64_t>(std::numeric_limits<Int>::min()) &&
             v <= static_cast<int64_t>(std::numeric_limits<Int>::max());
    }
  }
  KFFI_INLINE static void CopyToAnyView(const Int& v, KFFIAny* r) {
    details::SetPOD(r, kKFFIInt);
    r->v_int64 = static_cast<int64_t>(v);
  }
  KFFI_INLINE static void MoveToAny(Int v, KFFIAny* r) { CopyToAnyView(v, r); }
  KFFI_INLINE static bool CheckAnyStrict(const KFFIAny* s) {
    return s->type_index == kKFFIInt && InRange(s->v_int64);
  }
  KFFI_INLINE static Int CopyFromAnyViewAfterCheck(const KFFIAny* s) {
    return static_cast<Int>(s->v_int64);
  }
  static std::optional<Int> TryCastFromAnyView(const KFFIAny* s) {
    if ((s->type_index == kKFFIInt || s->type_index == kKFFIBool) && InRange(s->v_int64)) {
      return static_cast<Int>(s->v_int64);
    }
    return std::nullopt;
  }
  // Literals and snprintf rather than std::to_string and concatenation: these are compiled into
  // every export's translation unit, for its signature and its error path.
  static std::string TypeStr() {
    constexpr bool kSigned = std::is_signed_v<Int>;
    switch (sizeof(Int)) {
      case 1:
        return kSigned ? "int8" : "uint8";
      case 2:
        return kSigned ? "int16" : "uint16";
      case 4:
        return kSigned ? "int32" : "uint32";
      default:
        return kSigned ? "int" : "uint64";
    }
  }
  static std::string GetMismatchTypeInfo(const KFFIAny* s) {
    if (s->type_index == kKFFIInt && !InRange(s->v_int64)) {
      char text[96];
      std::snprintf(text, sizeof(text), "int (%lld is out of range for %s)",
                    static_cast<long long>(s->v_int64), TypeStr().c_str());
      return text;
    }
    return details::AnyTypeStr(s);
  }
};

// ---- bool -----------------------------------------------------------------------------------
template <>
struct TypeTraits<bool> {
  static constexpr bool convert_enabled = true;
  static constexpr int32_t field_static_type_index = kKFFIBool;
  KFFI_INLINE static void CopyToAnyView(const bool& v, KFFIAny* r) {
    details::SetPOD(r, kKFFIBool);
    r->v_int64 = v ? 1 : 0;
  }
  KFFI_INLINE static void MoveToAny(bool v, KFFIAny* r) { CopyToAnyView(v, r); }
  KFFI_INLINE static bool CheckAnyStrict(const KFFIAny* s) { return s->type_index == kKFFIBool; }
  KFFI_INLINE static bool CopyFromAnyViewAfterCheck(const KFFIAny* s) { return s->v_int64 != 0; }
  static std::optional<bool> TryCastFromAnyView(const KFFIAny* s) {
    if (s->type_index == kKFFIBool || s->type_index == kKFFIInt) return s->v_int64 != 0;
    return std::nullopt;
  }
  static std::string TypeStr() { return "bool"; }
};

// ---- floating point -------------------------------------------------------------------------
template <typename Float>
struct TypeTraits<Float, std::enable_if_t<std::is_floating_point_v<Float>>> {
  static constexpr bool convert_enabled = true;
  static constexpr int32_t field_static_type_index = kKFFIFloat;
  KFFI_INLINE static void CopyToAnyView(const Float& v, KFFIAny* r) {
    details::SetPOD(r, kKFFIFloat);
    r->v_float64 = static_cast<double>(v);
  }
  KFFI_INLINE static void MoveToAny(Float v, KFFIAny* r) { CopyToAnyView(v, r); }
  KFFI_INLINE static bool CheckAnyStrict(const KFFIAny* s) { return s->type_index == kKFFIFloat; }
  KFFI_INLINE static Float CopyFromAnyViewAfterCheck(const KFFIAny* s) {
    return static_cast<Float>(s->v_float64);
  }
  static std::optional<Float> TryCastFromAnyView(const KFFIAny* s) {
    if (s->type_index == kKFFIFloat) return static_cast<Float>(s->v_float64);
    if (s->type_index == kKFFIInt || s->type_index == kKFFIBool) {
      return static_cast<Float>(s->v_int64);
    }
    return std::nullopt;
  }
  static std::string TypeStr() { return std::is_same_v<Float, float> ? "float32" : "float"; }
};

// ---- None and pointers ----------------------------------------------------------------------
template <>
struct TypeTraits<std::nullptr_t> {
  static constexpr bool convert_enabled = true;
  static constexpr int32_t field_static_type_index = kKFFINone;
  static void CopyToAnyView(const std::nullptr_t&, KFFIAny* r) { details::SetNone(r); }
  static void MoveToAny(std::nullptr_t, KFFIAny* r) { details::SetNone(r); }
  static bool CheckAnyStrict(const KFFIAny* s) { return s->type_index == kKFFINone; }
  static std::nullptr_t CopyFromAnyViewAfterCheck(const KFFIAny*) { return nullptr; }
  static std::optional<std::nullptr_t> TryCastFromAnyView(const KFFIAny* s) {
    if (s->type_index == kKFFINone) return nullptr;
    return std::nullopt;
  }
  static std::string TypeStr() { return "None"; }
};

template <>
struct TypeTraits<void*> {
  static constexpr bool convert_enabled = true;
  static constexpr int32_t field_static_type_index = kKFFIOpaquePtr;
  static void CopyToAnyView(void* const& v, KFFIAny* r) {
    if (v == nullptr) {
      details::SetNone(r);
      return;
    }
    details::SetPOD(r, kKFFIOpaquePtr);
    r->v_int64 = 0;
    r->v_ptr = v;
  }
  static void MoveToAny(void* v, KFFIAny* r) { CopyToAnyView(v, r); }
  static bool CheckAnyStrict(const KFFIAny* s) { return s->type_index == kKFFIOpaquePtr; }
  static void* CopyFromAnyViewAfterCheck(const KFFIAny* s) { return s->v_ptr; }
  static std::optional<void*> TryCastFromAnyView(const KFFIAny* s) {
    if (s->type_index == kKFFIOpaquePtr) return s->v_ptr;
    if (s->type_index == kKFFINone) return static_cast<void*>(nullptr);
    return std::nullopt;
  }
  static std::string TypeStr() { return "void*"; }
};

// ---- DLPack values --------------------------------------------------------------------------
template <>
struct TypeTraits<DLDataType> {
  static constexpr bool convert_enabled = true;
  static constexpr int32_t field_static_type_index = kKFFIDataType;
  static void CopyToAnyView(const DLDataType& v, KFFIAny* r) {
    details::SetPOD(r, kKFFIDataType);
    r->v_int64 = 0;
    r->v_dtype = v;
  }
  static void MoveToAny(DLDataType v, KFFIAny* r) { CopyToAnyView(v, r); }
  static bool CheckAnyStrict(const KFFIAny* s) { return s->type_index == kKFFIDataType; }
  static DLDataType CopyFromAnyViewAfterCheck(const KFFIAny* s) { return s->v_dtype; }
  static std::optional<DLDataType> TryCastFromAnyView(const KFFIAny* s) {
    if (s->type_index == kKFFIDataType) return s->v_dtype;
    if (s->type_index == kKFFISmallStr || s->type_index == kKFFIStr ||
        s->type_index == kKFFIRawStr) {
      std::string_view text;
      if (s->type_index == kKFFISmallStr) {
        text = std::string_view(s->v_bytes, s->small_str_len);
      } else if (s->type_index == kKFFIRawStr) {
        text = std::string_view(s->v_c_str);
      } else {
        auto* cell = static_cast<const KFFIByteArray*>(KFFIObjectGetCellPtr(s->v_obj));
        text = std::string_view(cell->data, cell->size);
      }
      return details::StringToDataType(text);  // a bad string is a ValueError naming it
    }
    return std::nullopt;
  }
  static std::string TypeStr() { return "dtype"; }
};

template <>
struct TypeTraits<DLDevice> {
  static constexpr bool convert_enabled = true;
  static constexpr int32_t field_static_type_index = kKFFIDevice;
  static void CopyToAnyView(const DLDevice& v, KFFIAny* r) {
    details::SetPOD(r, kKFFIDevice);
    r->v_device = v;
  }
  static void MoveToAny(DLDevice v, KFFIAny* r) { CopyToAnyView(v, r); }
  static bool CheckAnyStrict(const KFFIAny* s) { return s->type_index == kKFFIDevice; }
  static DLDevice CopyFromAnyViewAfterCheck(const KFFIAny* s) { return s->v_device; }
  static std::optional<DLDevice> TryCastFromAnyView(const KFFIAny* s) {
    if (s->type_index == kKFFIDevice) return s->v_device;
    return std::nullopt;
  }
  static std::string TypeStr() { return "Device"; }
};

// ---- strings --------------------------------------------------------------------------------
namespace details {
/// Reads any str-like value (SmallStr, Str, RawStr) without copying; false if not a str.
inline bool ReadStrView(const KFFIAny* s, std::string_view* out) {
  switch (s->type_index) {
    case kKFFISmallStr:
      *out = std::string_view(s->v_bytes, s->small_str_len);
      return true;
    case kKFFIRawStr:
      *out = std::string_view(s->v_c_str);
      return true;
    case kKFFIStr: {
      auto* cell = static_cast<const KFFIByteArray*>(KFFIObjectGetCellPtr(s->v_obj));
      *out = std::string_view(cell->data, cell->size);
      return true;
    }
    default:
      return false;
  }
}
/// Reads any bytes-like value (SmallBytes, Bytes, ByteArrayPtr); false if not bytes.
inline bool ReadBytesView(const KFFIAny* s, std::string_view* out) {
  switch (s->type_index) {
    case kKFFISmallBytes:
      *out = std::string_view(s->v_bytes, s->small_str_len);
      return true;
    case kKFFIByteArrayPtr: {
      auto* ba = static_cast<const KFFIByteArray*>(s->v_ptr);
      *out = std::string_view(ba->data, ba->size);
      return true;
    }
    case kKFFIBytes: {
      auto* cell = static_cast<const KFFIByteArray*>(KFFIObjectGetCellPtr(s->v_obj));
      *out = std::string_view(cell->data, cell->size);
      return true;
    }
    default:
      return false;
  }
}
}  // namespace details

template <>
struct TypeTraits<String> {
  static constexpr bool convert_enabled = true;
  static void CopyToAnyView(const String& v, KFFIAny* r) { *r = v.raw(); }
  static void MoveToAny(String v, KFFIAny* r) { *r = v.ReleaseToAny(); }
  static bool CheckAnyStrict(const KFFIAny* s) {
    return s->type_index == kKFFISmallStr || s->type_index == kKFFIStr;
  }
  static String CopyFromAnyViewAfterCheck(const KFFIAny* s) {
    if (s->type_index == kKFFIStr) {
      details::ObjectUnsafe::IncRef(static_cast<Object*>(static_cast<void*>(s->v_obj)));
    }
    return String(String::FromOwnedAny(*s));
  }
  static std::optional<String> TryCastFromAnyView(const KFFIAny* s) {
    if (CheckAnyStrict(s)) return CopyFromAnyViewAfterCheck(s);
    std::string_view v;
    if (details::ReadStrView(s, &v)) return String(v);
    return std::nullopt;
  }
  static std::string TypeStr() { return "str"; }
};

template <>
struct TypeTraits<Bytes> {
  static constexpr bool convert_enabled = true;
  static void CopyToAnyView(const Bytes& v, KFFIAny* r) { *r = v.raw(); }
  static void MoveToAny(Bytes v, KFFIAny* r) { *r = v.ReleaseToAny(); }
  static bool CheckAnyStrict(const KFFIAny* s) {
    return s->type_index == kKFFISmallBytes || s->type_index == kKFFIBytes;
  }
  static Bytes CopyFromAnyViewAfterCheck(const KFFIAny* s) {
    if (s->type_index == kKFFIBytes) {
      details::ObjectUnsafe::IncRef(static_cast<Object*>(static_cast<void*>(s->v_obj)));
    }
    return Bytes(Bytes::FromOwnedAny(*s));
  }
  static std::optional<Bytes> TryCastFromAnyView(const KFFIAny* s) {
    if (CheckAnyStrict(s)) return CopyFromAnyViewAfterCheck(s);
    std::string_view v;
    if (details::ReadBytesView(s, &v)) return Bytes(v.data(), v.size());
    return std::nullopt;
  }
  static std::string TypeStr() { return "bytes"; }
};

template <>
struct TypeTraits<std::string> {
  static constexpr bool convert_enabled = true;
  /// A borrowed view: valid while the std::string lives and is not modified.
  static void CopyToAnyView(const std::string& v, KFFIAny* r) {
    details::SetPOD(r, kKFFIRawStr);
    r->v_c_str = v.c_str();
  }
  static void MoveToAny(std::string v, KFFIAny* r) { TypeTraits<String>::MoveToAny(String(v), r); }
  static bool CheckAnyStrict(const KFFIAny* s) {
    return s->type_index == kKFFISmallStr || s->type_index == kKFFIStr ||
           s->type_index == kKFFIRawStr;
  }
  static std::string CopyFromAnyViewAfterCheck(const KFFIAny* s) {
    std::string_view v;
    details::ReadStrView(s, &v);
    return std::string(v);
  }
  static std::optional<std::string> TryCastFromAnyView(const KFFIAny* s) {
    std::string_view v;
    if (details::ReadStrView(s, &v)) return std::string(v);
    return std::nullopt;
  }
  static std::string TypeStr() { return "str"; }
};

template <>
struct TypeTraits<const char*> {
  static constexpr bool convert_enabled = true;
  static void CopyToAnyView(const char* const& v, KFFIAny* r) {
    if (v == nullptr) {  // a null C string is None, never a dangling str
      details::SetNone(r);
      return;
    }
    details::SetPOD(r, kKFFIRawStr);
    r->v_c_str = v;
  }
  static void MoveToAny(const char* v, KFFIAny* r) {
    if (v == nullptr) {
      details::SetNone(r);
      return;
    }
    TypeTraits<String>::MoveToAny(String(v), r);
  }
  static std::string TypeStr() { return "str"; }
};

// ---- object references ----------------------------------------------------------------------
template <typename TRef>
struct TypeTraits<TRef, std::enable_if_t<std::is_base_of_v<ObjectRef, TRef> &&
                                         !details::HasCustomTraits<TRef>::value>> {
  using Container = typename TRef::ContainerType;
  static constexpr bool convert_enabled = true;
  static void CopyToAnyView(const TRef& v, KFFIAny* r) {
    const Object* obj = details::ObjectRefData(v).get();
    if (obj == nullptr) {
      details::SetNone(r);
      return;
    }
    details::SetPOD(r, obj->type_index());
    r->v_obj = details::ObjectUnsafe::Header(obj);
  }
  static void MoveToAny(TRef v, KFFIAny* r) {
    CopyToAnyView(v, r);
    if (r->type_index != kKFFINone) {
      details::ObjectUnsafe::IncRef(static_cast<Object*>(static_cast<void*>(r->v_obj)));
    }
  }
  static bool CheckAnyStrict(const KFFIAny* s) {
    if (s->type_index >= kKFFIStaticObjectBegin) {
      return static_cast<const Object*>(static_cast<const void*>(s->v_obj))
          ->IsInstance<Container>();
    }
    return TRef::_type_is_nullable && s->type_index == kKFFINone;
  }
  static TRef CopyFromAnyViewAfterCheck(const KFFIAny* s) {
    if (s->type_index == kKFFINone) return TRef(details::UnsafeInit{});
    return TRef(details::ObjectUnsafe::FromBorrowedHandle<Container>(s->v_obj));
  }
  static std::optional<TRef> TryCastFromAnyView(const KFFIAny* s) {
    if (CheckAnyStrict(s)) return CopyFromAnyViewAfterCheck(s);
    return std::nullopt;
  }
  static std::string TypeStr() { return details::TypeKeyToStr(Container::_type_key); }
};

template <typename T>
struct TypeTraits<ObjectPtr<T>> {
  static constexpr bool convert_enabled = true;
  static void CopyToAnyView(const ObjectPtr<T>& v, KFFIAny* r) {
    if (!v) {
      details::SetNone(r);
      return;
    }
    details::SetPOD(r, v->type_index());
    r->v_obj = details::ObjectUnsafe::Header(v.get());
  }
  static void MoveToAny(ObjectPtr<T> v, KFFIAny* r) {
    if (!v) {
      details::SetNone(r);
      return;
    }
    details::SetPOD(r, v->type_index());
    r->v_obj = static_cast<KFFIObject*>(details::ObjectUnsafe::MoveToHandle(std::move(v)));
  }
  static bool CheckAnyStrict(const KFFIAny* s) {
    return s->type_index >= kKFFIStaticObjectBegin &&
           static_cast<const Object*>(static_cast<const void*>(s->v_obj))->IsInstance<T>();
  }
  static ObjectPtr<T> CopyFromAnyViewAfterCheck(const KFFIAny* s) {
    return details::ObjectUnsafe::FromBorrowedHandle<T>(s->v_obj);
  }
  static std::optional<ObjectPtr<T>> TryCastFromAnyView(const KFFIAny* s) {
    if (CheckAnyStrict(s)) return CopyFromAnyViewAfterCheck(s);
    if (s->type_index == kKFFINone) return ObjectPtr<T>();
    return std::nullopt;
  }
  static std::string TypeStr() { return details::TypeKeyToStr(T::_type_key); }
};

}  // namespace kffi

#endif  // KFFI_TYPE_TRAITS_H_
