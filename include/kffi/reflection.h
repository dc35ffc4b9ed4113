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

#include <cstdio>
#include <deque>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

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

/// KFFITypeReflection.creator of a default-constructible T.
template <typename T>
int CreateDefaultObject(KFFIObjectHandle* out) {
  KFFI_SAFE_CALL_BEGIN();
  *out = nullptr;
  *out = ObjectUnsafe::MoveToHandle(make_object<T>());
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
  /// Instances compare (== and hash) by their fields' values instead of by identity.
  ObjectDef& structural_eq() {
    flags_ |= kKFFITypeFlagStructuralEq;
    return *this;
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
    static_assert(TypeTraits<F>::convert_enabled, "kffi cannot convert this field's type");
    // The offset from the object's start, read off storage that is never constructed.
    alignas(T) unsigned char probe[sizeof(T)];
    T* obj = reinterpret_cast<T*>(probe);
    const char* base = reinterpret_cast<const char*>(static_cast<Object*>(obj));
    const char* at = reinterpret_cast<const char*>(&(static_cast<C*>(obj)->*member));
    strings_.emplace_back(name);
    const std::string& n = strings_.back();
    strings_.push_back(TypeTraits<F>::TypeStr());
    const std::string& type_str = strings_.back();
    KFFIFieldInfo f{};
    f.name = KFFIByteArray{n.data(), n.size()};
    f.offset = static_cast<int64_t>(at - base);
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

#define KFFI_OBJECT_DEF_CAT2_(a, b) a##b
#define KFFI_OBJECT_DEF_CAT_(a, b) KFFI_OBJECT_DEF_CAT2_(a, b)
/// Registers the fields and methods of object type T at load (see kffi::ObjectDef); chain the
/// declarations and end with a semicolon, at namespace scope.
#define KFFI_OBJECT_DEF(T)                                                                \
  [[maybe_unused]] static const ::kffi::details::ObjectDefRegistrar KFFI_OBJECT_DEF_CAT_( \
      kffi_object_def_registrar_, __COUNTER__) = ::kffi::ObjectDef<T>()

}  // namespace kffi

#endif  // KFFI_REFLECTION_H_
