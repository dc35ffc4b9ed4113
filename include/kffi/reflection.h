// include/kffi/reflection.h: KFFI_OBJECT_DEF: declare an object type's fields and methods.
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_REFLECTION_H_
#define KFFI_REFLECTION_H_

#include <kffi/any.h>
#include <kffi/function.h>
#include <kffi/object.h>
#include <kffi/string.h>
#include <kffi/tensor.h>
#include <kffi/type_traits.h>

#include <cstddef>
#include <cstdio>
#include <deque>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

// Marks memory kept for reuse as unusable to AddressSanitizer (no-ops in other builds).
#if defined(__SANITIZE_ADDRESS__)
#define KFFI_ASAN_BUILD 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KFFI_ASAN_BUILD 1
#endif
#endif
#ifdef KFFI_ASAN_BUILD
#include <sanitizer/asan_interface.h>
#define KFFI_POISON_MEMORY(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define KFFI_UNPOISON_MEMORY(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define KFFI_POISON_MEMORY(p, n) ((void)(p), (void)(n))
#define KFFI_UNPOISON_MEMORY(p, n) ((void)(p), (void)(n))
#endif

namespace kffi {
namespace details {

template <typename P>
struct ObjectPtrElement;
template <typename U>
struct ObjectPtrElement<ObjectPtr<U>> {
  using type = U;
};

/// The type index a field of C++ type F reports (KFFIFieldInfo.type_index): kKFFIAny when F can
/// hold values of several types.
template <typename F>
int32_t FieldTypeIndex() {
  if constexpr (std::is_same_v<F, bool>) {
    return kKFFIBool;
  } else if constexpr (std::is_integral_v<F>) {
    return kKFFIInt;
  } else if constexpr (std::is_floating_point_v<F>) {
    return kKFFIFloat;
  } else if constexpr (std::is_same_v<F, String> || std::is_same_v<F, std::string>) {
    return kKFFIStr;
  } else if constexpr (std::is_same_v<F, DLDataType>) {
    return kKFFIDataType;
  } else if constexpr (std::is_same_v<F, DLDevice>) {
    return kKFFIDevice;
  } else if constexpr (std::is_base_of_v<ObjectRef, F>) {
    return F::ContainerType::RuntimeTypeIndex();
  } else if constexpr (IsObjectPtr<F>::value) {
    return ObjectPtrElement<F>::type::RuntimeTypeIndex();
  } else {
    return kKFFIAny;
  }
}

/// KFFIFieldGetter of a field of C++ type F: an owned copy of the value.
template <typename F>
int FieldGetter(void* field, KFFIAny* out) {
  KFFI_SAFE_CALL_BEGIN();
  TypeTraits<F>::MoveToAny(F(*static_cast<const F*>(field)), out);
  KFFI_SAFE_CALL_END();
}

/// KFFIFieldSetter of a field of C++ type F: the value converted as an argument of type F would
/// be, else a TypeError "expected <F>, got <value's type>".
template <typename F>
int FieldSetter(void* field, const KFFIAny* value) {
  KFFI_SAFE_CALL_BEGIN();
  std::optional<F> v = TypeTraits<F>::TryCastFromAnyView(value);
  if (!v.has_value()) {
    throw Error("TypeError", "expected " + TypeTraits<F>::TypeStr() + ", got " + AnyTypeStr(value));
  }
  *static_cast<F*>(field) = std::move(*v);
  KFFI_SAFE_CALL_END();
}

/// The memory of one T that the creator (CreateDefaultObject<T>) keeps per thread. A record
/// argument (a dataclass passed where the function takes T) makes one object per call that the
/// call's end usually frees: the next one takes that block instead of a trip through the
/// allocator. Only objects the creator made come back here (their deleter says so).
template <typename T>
struct CreatorBlock {
  // Plain thread_local data, never destroyed, so a deleter running while the thread's
  // thread_local objects are destroyed may still read it (and finds `closed`).
  struct State {
    void* block;
    bool hooked;  // ThreadEnd is made
    bool closed;  // ThreadEnd ran: blocks are freed from now on
  };
  // Frees the kept block when the thread ends; made on the thread's first Keep.
  struct ThreadEnd {
    ~ThreadEnd() {
      State& s = Local();
      s.closed = true;
      if (s.block != nullptr) {
        KFFI_UNPOISON_MEMORY(s.block, sizeof(T));
        ObjectAllocator<T>::Free(s.block);
        s.block = nullptr;
      }
    }
  };
  static State& Local() {
    static thread_local State state{nullptr, false, false};
    return state;
  }
  static void* Take() {
    State& s = Local();
    void* block = s.block;
    if (block == nullptr) return ObjectAllocator<T>::Allocate();
    s.block = nullptr;
    KFFI_UNPOISON_MEMORY(block, sizeof(T));
    return block;
  }
  static void Keep(void* block) {
    State& s = Local();
    if (s.block != nullptr || s.closed) {
      ObjectAllocator<T>::Free(block);
      return;
    }
    if (!s.hooked) {
      s.hooked = true;
      static thread_local ThreadEnd thread_end;
      (void)&thread_end;
    }
    KFFI_POISON_MEMORY(block, sizeof(T));  // a use after free stays visible to ASan
    s.block = block;
  }
  static void Deleter(void* self, int flags) {
    T* obj = static_cast<T*>(static_cast<Object*>(self));
    if (flags & kKFFIObjectDeleterFlagStrong) obj->~T();
    if (flags & kKFFIObjectDeleterFlagWeak) Keep(static_cast<void*>(obj));
  }
};

/// KFFITypeReflection.creator of a default-constructible T (make_object's steps, on a
/// CreatorBlock).
template <typename T>
int CreateDefaultObject(KFFIObjectHandle* out) {
  KFFI_SAFE_CALL_BEGIN();
  *out = nullptr;
  void* mem = CreatorBlock<T>::Take();
  T* obj;
  try {
    obj = new (mem) T();
  } catch (...) {
    ObjectAllocator<T>::Free(mem);
    throw;
  }
  InitObjectHeader(ObjectUnsafe::Header(obj), T::RuntimeTypeIndex(), &CreatorBlock<T>::Deleter);
  *out = static_cast<Object*>(obj);
  KFFI_SAFE_CALL_END();
}

/// Reports a failed registration: to the module loader when a library is loading (the load fails
/// with it), else on stderr (a program that links the type in has no one else to tell).
inline void ReportObjectDefError(const Error& e) {
  std::string kind = e.kind();
  std::string message = e.message();
  KFFIByteArray k{kind.data(), kind.size()};
  KFFIByteArray m{message.data(), message.size()};
  int32_t taken = 0;
  if (KFFIModuleReportLoadError(&k, &m, &taken) != 0 || taken == 0) {
    std::fprintf(stderr, "kffi: %s: %s\n", kind.c_str(), message.c_str());
  }
}

template <typename T>
struct MethodTraits;
template <typename C, typename R, typename... Args>
struct MethodTraits<R (C::*)(Args...) const> {
  template <typename T>
  static Function Make(R (C::*m)(Args...) const, const std::string& name) {
    return Function::FromTyped(
        [m](ObjectPtr<T> self, Args... args) -> R {
          if (!self) throw Error("TypeError", "method called on None");
          return (static_cast<const C&>(*self).*m)(std::forward<Args>(args)...);
        },
        name);
  }
};
template <typename C, typename R, typename... Args>
struct MethodTraits<R (C::*)(Args...)> {
  template <typename T>
  static Function Make(R (C::*m)(Args...), const std::string& name) {
    return Function::FromTyped(
        [m](ObjectPtr<T> self, Args... args) -> R {
          if (!self) throw Error("TypeError", "method called on None");
          return (static_cast<C&>(*self).*m)(std::forward<Args>(args)...);
        },
        name);
  }
};

}  // namespace details

namespace details {
/// The object a struct S declared with KFFI_RECORD travels in: the object header, then S. Its
/// type key is the declaration's; its fields are S's declared members.
template <typename S>
class RecordObj : public Object {
 public:
  KFFI_DECLARE_FINAL_OBJECT_INFO(KFFIRecordKey(static_cast<const S*>(nullptr)), RecordObj, Object)
  RecordObj() : value() {}
  explicit RecordObj(S v) : value(std::move(v)) {}
  S value;
};
}  // namespace details

/// Declares the fields and methods of object type T (a subclass of kffi::Object with
/// KFFI_DECLARE_OBJECT_INFO); KFFI_OBJECT_DEF registers them when the library loads:
///
///   KFFI_OBJECT_DEF(PointObj)
///       .field_ro("x", &PointObj::x)
///       .field_rw("label", &PointObj::label)
///       .method("norm", &PointObj::Norm)
///       .structural_eq();
///
/// Field types: integers, bool, floating point, String, std::string, DLDataType, DLDevice,
/// Tensor, Any and object references (ObjectRef subclasses, `ObjectPtr<U>`).
template <typename T>
class ObjectDef {
 public:
  static_assert(std::is_base_of_v<Object, T>, "KFFI_OBJECT_DEF needs a kffi::Object subclass");

  /// A field Python can read but not assign.
  template <typename C, typename F>
  ObjectDef& field_ro(const char* name, F C::*member) {
    return AddField(name, member, false);
  }
  /// A field Python can read and assign (values convert as arguments of type F do).
  template <typename C, typename F>
  ObjectDef& field_rw(const char* name, F C::*member) {
    return AddField(name, member, true);
  }
  /// A method: a member function of T (const or not), or any callable whose first parameter is
  /// ObjectPtr<T> (the object).
  template <typename M>
  ObjectDef& method(const char* name, M m) {
    if constexpr (std::is_member_function_pointer_v<M>) {
      methods_.push_back(details::MethodTraits<M>::template Make<T>(m, name));
    } else {
      methods_.push_back(Function::FromTyped(std::move(m), name));
    }
    method_names_.emplace_back(name);
    return *this;
  }
  /// Leaves the field declared last out of structural == and hash (a counter, a cache):
  /// `.field_rw("hits", &T::hits).compare_off()`.
  ObjectDef& compare_off() {
    if (!fields_.empty()) fields_.back().flags |= kKFFIFieldFlagCompareOff;
    return *this;
  }
  /// Instances compare (== and hash) by their fields' values instead of by identity.
  ObjectDef& structural_eq() {
    flags_ |= kKFFITypeFlagStructuralEq;
    return *this;
  }

  /// A read-write field of the struct S a KFFI_RECORD box (`details::RecordObj<S>`) holds. The
  /// box is marked kKFFITypeFlagPlainRecord: functions take copies of S, never the box.
  template <typename S, typename F>
  ObjectDef& record_field(const char* name, F S::*member) {
    static_assert(std::is_same_v<T, details::RecordObj<S>>, "record_field is KFFI_RECORD's");
    flags_ |= kKFFITypeFlagPlainRecord;
    alignas(T) unsigned char probe[sizeof(T)];
    T* obj = reinterpret_cast<T*>(probe);
    const char* base = reinterpret_cast<const char*>(static_cast<Object*>(obj));
    const char* at = reinterpret_cast<const char*>(&(obj->value.*member));
    return AddFieldAt<F>(name, at - base, true);
  }

  /// Registers the declarations (KFFITypeRegisterReflection); throws kffi::Error when refused.
  void Register() {
    std::vector<KFFIMethodInfo> methods;
    for (size_t i = 0; i < methods_.size(); ++i) {
      methods.push_back(
          KFFIMethodInfo{KFFIByteArray{method_names_[i].data(), method_names_[i].size()},
                         details::ObjectUnsafe::GetHandle(details::ObjectRefData(methods_[i]))});
    }
    KFFITypeReflection info{};
    info.type_index = T::RuntimeTypeIndex();
    info.flags = flags_;
    info.object_size = static_cast<int64_t>(sizeof(T));
    info.num_fields = static_cast<int32_t>(fields_.size());
    info.num_methods = static_cast<int32_t>(methods.size());
    info.fields = fields_.data();
    info.methods = methods.data();
    if constexpr (std::is_default_constructible_v<T>) {
      info.creator = &details::CreateDefaultObject<T>;
    }
    if (KFFITypeRegisterReflection(&info) != 0) details::ThrowRaisedError(-1);
  }

 private:
  template <typename C, typename F>
  ObjectDef& AddField(const char* name, F C::*member, bool writable) {
    static_assert(std::is_base_of_v<C, T>, "the field must be a member of T or of a base of T");
    // The offset from the object's start, read off storage that is never constructed.
    alignas(T) unsigned char probe[sizeof(T)];
    T* obj = reinterpret_cast<T*>(probe);
    const char* base = reinterpret_cast<const char*>(static_cast<Object*>(obj));
    const char* at = reinterpret_cast<const char*>(&(static_cast<C*>(obj)->*member));
    return AddFieldAt<F>(name, at - base, writable);
  }
  template <typename F>
  ObjectDef& AddFieldAt(const char* name, ptrdiff_t offset, bool writable) {
    static_assert(TypeTraits<F>::convert_enabled, "kffi cannot convert this field's type");
    strings_.emplace_back(name);
    const std::string& n = strings_.back();
    strings_.push_back(TypeTraits<F>::TypeStr());
    const std::string& type_str = strings_.back();
    KFFIFieldInfo f{};
    f.name = KFFIByteArray{n.data(), n.size()};
    f.offset = static_cast<int64_t>(offset);
    f.size = static_cast<int64_t>(sizeof(F));
    f.type_index = details::FieldTypeIndex<F>();
    f.flags = writable ? kKFFIFieldFlagWritable : 0;
    f.type_str = KFFIByteArray{type_str.data(), type_str.size()};
    f.getter = &details::FieldGetter<F>;
    f.setter = writable ? &details::FieldSetter<F> : nullptr;
    fields_.push_back(f);
    return *this;
  }

  int32_t flags_ = 0;
  std::deque<std::string> strings_;  // a deque: growing it never moves a string
  std::vector<KFFIFieldInfo> fields_;
  std::vector<Function> methods_;
  std::vector<std::string> method_names_;
};

namespace details {
/// Runs an ObjectDef's registration while a library's static initialisers run.
struct ObjectDefRegistrar {
  template <typename T>
  ObjectDefRegistrar(ObjectDef<T>& def) {  // NOLINT(google-explicit-constructor)
    try {
      def.Register();
    } catch (const Error& e) {
      ReportObjectDefError(e);
    } catch (const std::exception& e) {
      ReportObjectDefError(Error("InternalError", e.what()));
    }
  }
};
}  // namespace details

/// Conversions of a struct S declared with KFFI_RECORD: it travels as a `RecordObj<S>` (made when
/// a C++ value is passed or returned; a Python dataclass or NamedTuple with S's field names
/// converts to one), and a parameter of type S gets a copy of the value.
template <typename S>
struct TypeTraits<S, std::enable_if_t<details::IsRecord<S>::value>> {
  using Obj = details::RecordObj<S>;
  static constexpr bool convert_enabled = true;
  static void MoveToAny(S v, KFFIAny* r) {
    TypeTraits<ObjectPtr<Obj>>::MoveToAny(make_object<Obj>(std::move(v)), r);
  }
  static bool CheckAnyStrict(const KFFIAny* s) {
    return TypeTraits<ObjectPtr<Obj>>::CheckAnyStrict(s);
  }
  static S CopyFromAnyViewAfterCheck(const KFFIAny* s) {
    return static_cast<const Obj*>(static_cast<const Object*>(static_cast<const void*>(s->v_obj)))
        ->value;
  }
  static std::optional<S> TryCastFromAnyView(const KFFIAny* s) {
    if (CheckAnyStrict(s)) return CopyFromAnyViewAfterCheck(s);
    return std::nullopt;
  }
  static std::string TypeStr() { return details::TypeKeyToStr(Obj::_type_key); }
};

namespace details {
/// Registers the fields of a KFFI_RECORD struct S while the library loads.
template <typename S>
struct RecordRegistrar {
  static_assert(std::is_default_constructible_v<S> && std::is_copy_constructible_v<S>,
                "a KFFI_RECORD struct must be default- and copy-constructible");
  RecordRegistrar() {
    ObjectDef<RecordObj<S>> def;
    KFFIRecordFields(static_cast<const S*>(nullptr), def);  // the macro's, by ADL
    [[maybe_unused]] ObjectDefRegistrar registrar(def);
  }
};
}  // namespace details

#define KFFI_OBJECT_DEF_CAT2_(a, b) a##b
#define KFFI_OBJECT_DEF_CAT_(a, b) KFFI_OBJECT_DEF_CAT2_(a, b)
/// Registers the fields and methods of object type T at load (see kffi::ObjectDef); chain the
/// declarations and end with a semicolon, at namespace scope.
#define KFFI_OBJECT_DEF(T)                                                                \
  [[maybe_unused]] static const ::kffi::details::ObjectDefRegistrar KFFI_OBJECT_DEF_CAT_( \
      kffi_object_def_registrar_, __COUNTER__) = ::kffi::ObjectDef<T>()

// KFFI_RECORD's field list, one record_field per name (up to 16 fields).
#define KFFI_RECORD_F_1(S, a) def.record_field(#a, &S::a);
#define KFFI_RECORD_F_2(S, a, ...) KFFI_RECORD_F_1(S, a) KFFI_RECORD_F_1(S, __VA_ARGS__)
#define KFFI_RECORD_F_3(S, a, ...) KFFI_RECORD_F_1(S, a) KFFI_RECORD_F_2(S, __VA_ARGS__)
#define KFFI_RECORD_F_4(S, a, ...) KFFI_RECORD_F_1(S, a) KFFI_RECORD_F_3(S, __VA_ARGS__)
#define KFFI_RECORD_F_5(S, a, ...) KFFI_RECORD_F_1(S, a) KFFI_RECORD_F_4(S, __VA_ARGS__)
#define KFFI_RECORD_F_6(S, a, ...) KFFI_RECORD_F_1(S, a) KFFI_RECORD_F_5(S, __VA_ARGS__)
#define KFFI_RECORD_F_7(S, a, ...) KFFI_RECORD_F_1(S, a) KFFI_RECORD_F_6(S, __VA_ARGS__)
#define KFFI_RECORD_F_8(S, a, ...) KFFI_RECORD_F_1(S, a) KFFI_RECORD_F_7(S, __VA_ARGS__)
#define KFFI_RECORD_F_9(S, a, ...) KFFI_RECORD_F_1(S, a) KFFI_RECORD_F_8(S, __VA_ARGS__)
#define KFFI_RECORD_F_10(S, a, ...) KFFI_RECORD_F_1(S, a) KFFI_RECORD_F_9(S, __VA_ARGS__)
#define KFFI_RECORD_F_11(S, a, ...) KFFI_RECORD_F_1(S, a) KFFI_RECORD_F_10(S, __VA_ARGS__)
#define KFFI_RECORD_F_12(S, a, ...) KFFI_RECORD_F_1(S, a) KFFI_RECORD_F_11(S, __VA_ARGS__)
#define KFFI_RECORD_F_13(S, a, ...) KFFI_RECORD_F_1(S, a) KFFI_RECORD_F_12(S, __VA_ARGS__)
#define KFFI_RECORD_F_14(S, a, ...) KFFI_RECORD_F_1(S, a) KFFI_RECORD_F_13(S, __VA_ARGS__)
#define KFFI_RECORD_F_15(S, a, ...) KFFI_RECORD_F_1(S, a) KFFI_RECORD_F_14(S, __VA_ARGS__)
#define KFFI_RECORD_F_16(S, a, ...) KFFI_RECORD_F_1(S, a) KFFI_RECORD_F_15(S, __VA_ARGS__)
#define KFFI_RECORD_NARG_I_(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, _14, _15, _16, \
                            N, ...)                                                                \
  N
#define KFFI_RECORD_NARG_(...) \
  KFFI_RECORD_NARG_I_(__VA_ARGS__, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)

/// Declares a plain C++ struct S to kffi as a record with type key TypeKey and the listed
/// members as its fields (up to 16; each of a type kffi converts, e.g. int64_t, double, bool,
/// std::string): exported functions take and return S by value, Python passes a dataclass or
/// NamedTuple with those field names (or a kffi object of the type), and S needs no kffi base
/// class. Use it once, right after S, in S's namespace:
///
///   struct Config { double alpha; int64_t n; };
///   KFFI_RECORD(Config, "demo.Config", alpha, n);
#define KFFI_RECORD(S, TypeKey, ...)                                                      \
  [[maybe_unused]] constexpr const char* KFFIRecordKey(const S*) { return TypeKey; }      \
  [[maybe_unused]] inline void KFFIRecordFields(                                          \
      const S*, ::kffi::ObjectDef<::kffi::details::RecordObj<S>>& def) {                  \
    KFFI_OBJECT_DEF_CAT_(KFFI_RECORD_F_, KFFI_RECORD_NARG_(__VA_ARGS__))(S, __VA_ARGS__)  \
  }                                                                                       \
  [[maybe_unused]] static const ::kffi::details::RecordRegistrar<S> KFFI_OBJECT_DEF_CAT_( \
      kffi_record_registrar_, __COUNTER__)

}  // namespace kffi

#endif  // KFFI_REFLECTION_H_
