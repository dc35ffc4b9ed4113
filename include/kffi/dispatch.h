// include/kffi/dispatch.h: dtype dispatch: call a generic lambda with the C++ type of a runtime
// dtype.
//
//   kffi::DispatchDtype<float, kffi::half, kffi::bfloat16>(x, "x", [&](auto tag) {
//     using T = typename decltype(tag)::type;  // float, kffi::half or kffi::bfloat16
//     ScaleLoop(y.data<T>(), x.data<T>(), x.numel(), factor);
//   });
//
// A dtype outside the list is a TypeError in kffi's one format of argument errors:
//   x.dtype: expected float32|float16|bfloat16, got int32
// The list can come from a contract instead, so that one declaration governs both the check and
// the instantiations (they cannot drift apart):
//   constexpr char kScaleContract[] = "y: Tensor([n], float32|float16, mut), "
//                                     "x: Tensor([n], float32|float16), factor: float";
//   ... kffi::DispatchDtype<kffi::ContractDtypes(kScaleContract, "x")>(x, "x", body) ...
//   KFFI_EXPORT_CONTRACT(scale, Scale, kScaleContract);
// ContractDtypes reads the parameter's dtype list at compile time; a parameter the contract does
// not have, one that is not a tensor, `*` (any dtype) or a dtype without a C++ type here is a
// compile error (a call to a function named after the problem: ContractDtypesError_...).
//
// The C++ types: bool, int8_t..int64_t, uint8_t..uint64_t, float, double and kffi::half,
// bfloat16, float8_e4m3fn, float8_e5m2 (kffi/half.h); kffi::dtypes::of<T> is T's DLDataType.
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_DISPATCH_H_
#define KFFI_DISPATCH_H_

#include <kffi/dtype.h>
#include <kffi/half.h>
#include <kffi/tensor_checks.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

namespace kffi {

/// What DispatchDtype passes to the body: a tag whose member alias `type` is the dtype's C++
/// type (in a generic lambda, `typename decltype(tag)` followed by that member).
template <typename T>
struct TypeTag {
  using type = T;
};

namespace details {

template <typename... Ts>
struct TypeList {};

/// The dispatchable C++ types, in this order, with the dtype names of ContractDtypes.
using DispatchTable = TypeList<bool, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t,
                               uint64_t, half, float, double, bfloat16, float8_e4m3fn, float8_e5m2>;
inline constexpr const char* kDispatchNames[] = {
    "bool",   "int8",    "int16",   "int32",   "int64",    "uint8",         "uint16",     "uint32",
    "uint64", "float16", "float32", "float64", "bfloat16", "float8_e4m3fn", "float8_e5m2"};
inline constexpr size_t kNumDispatchTypes = sizeof(kDispatchNames) / sizeof(kDispatchNames[0]);

template <size_t I, typename L>
struct TypeAt;
template <typename T, typename... Rest>
struct TypeAt<0, TypeList<T, Rest...>> {
  using type = T;
};
template <size_t I, typename T, typename... Rest>
struct TypeAt<I, TypeList<T, Rest...>> : TypeAt<I - 1, TypeList<Rest...>> {};

/// TypeError "<name>.dtype: expected <allowed, |-joined>, got <dtype>" (cold; one copy for all
/// instantiations).
[[noreturn]] KFFI_NOINLINE inline void ThrowDispatchError(const char* name, DLDataType got,
                                                          const DLDataType* allowed, size_t n) {
  ThrowCheckError("TypeError", name, ".dtype", JoinDataTypes(allowed, n), DataTypeToString(got));
}

/// Code, bits and lanes all equal (compilers merge the three compares into one).
KFFI_INLINE bool SameDataType(DLDataType a, DLDataType b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

template <typename... Ts>
inline constexpr DLDataType kDataTypesOf[sizeof...(Ts)] = {dtypes::of<Ts>...};

template <typename T, typename... Rest, typename F>
KFFI_INLINE decltype(auto) DispatchOver(DLDataType dtype, const char* name, F& body,
                                        const DLDataType* all, size_t n) {
  if (SameDataType(dtype, dtypes::of<T>)) return body(TypeTag<T>{});
  if constexpr (sizeof...(Rest) == 0) {
    ThrowDispatchError(name, dtype, all, n);
  } else {
    return DispatchOver<Rest...>(dtype, name, body, all, n);
  }
}

template <typename... Ts, typename F>
KFFI_INLINE decltype(auto) DispatchList(TypeList<Ts...>, DLDataType dtype, const char* name,
                                        F& body) {
  static_assert(sizeof...(Ts) > 0, "DispatchDtype needs at least one type");
  return DispatchOver<Ts...>(dtype, name, body, kDataTypesOf<Ts...>, sizeof...(Ts));
}

// ---- the dtype list of a contract parameter, at compile time ---------------------------------
// The encoding: up to kMaxContractDtypes entries of 5 bits, each the DispatchTable index + 1, in
// the contract's order; 0 ends the list.
inline constexpr int kMaxContractDtypes = 12;

// Called (never defined) where ContractDtypes finds a problem: a compile error that names it.
void ContractDtypesError_NoSuchParameter();
void ContractDtypesError_NotATensorParameter();
void ContractDtypesError_AnyDtypeCannotBeDispatched();
void ContractDtypesError_DtypeHasNoCppType();
void ContractDtypesError_TooManyDtypes();
void ContractDtypesError_Malformed();

constexpr bool IsContractSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
constexpr bool IsContractNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}
constexpr size_t SkipContractSpace(const char* s, size_t i) {
  while (IsContractSpace(s[i])) ++i;
  return i;
}
constexpr size_t ContractNameEnd(const char* s, size_t i) {
  while (IsContractNameChar(s[i])) ++i;
  return i;
}
/// Whether s[begin, end) spells word.
constexpr bool ContractWordIs(const char* s, size_t begin, size_t end, const char* word) {
  size_t k = 0;
  for (; begin + k < end; ++k) {
    if (word[k] != s[begin + k]) return false;
  }
  return word[k] == '\0';
}

/// The encoded dtype list of the Tensor type at s[i] (inside Optional[...] too).
constexpr uint64_t ContractTensorDtypes(const char* s, size_t i) {
  i = SkipContractSpace(s, i);
  size_t end = ContractNameEnd(s, i);
  while (ContractWordIs(s, i, end, "Optional")) {
    i = SkipContractSpace(s, end);
    if (s[i] != '[') ContractDtypesError_Malformed();
    i = SkipContractSpace(s, i + 1);
    end = ContractNameEnd(s, i);
  }
  if (!ContractWordIs(s, i, end, "Tensor")) ContractDtypesError_NotATensorParameter();
  i = SkipContractSpace(s, end);
  if (s[i] != '(') ContractDtypesError_Malformed();
  i = SkipContractSpace(s, i + 1);
  if (s[i] != '[') ContractDtypesError_Malformed();
  while (s[i] != ']') {
    if (s[i] == '\0') ContractDtypesError_Malformed();
    ++i;
  }
  i = SkipContractSpace(s, i + 1);
  if (s[i] != ',') ContractDtypesError_Malformed();
  i = SkipContractSpace(s, i + 1);
  if (s[i] == '*') ContractDtypesError_AnyDtypeCannotBeDispatched();
  uint64_t out = 0;
  int count = 0;
  for (;;) {
    end = ContractNameEnd(s, i);
    size_t index = kNumDispatchTypes;
    for (size_t k = 0; k < kNumDispatchTypes; ++k) {
      if (ContractWordIs(s, i, end, kDispatchNames[k])) index = k;
    }
    if (index == kNumDispatchTypes) ContractDtypesError_DtypeHasNoCppType();
    if (count == kMaxContractDtypes) ContractDtypesError_TooManyDtypes();
    out |= static_cast<uint64_t>(index + 1) << (5 * count);
    ++count;
    i = SkipContractSpace(s, end);
    if (s[i] != '|') break;
    i = SkipContractSpace(s, i + 1);
  }
  return out;
}

template <uint64_t kList>
constexpr size_t ContractDtypeCount() {
  size_t n = 0;
  while (n < kMaxContractDtypes && ((kList >> (5 * n)) & 31) != 0) ++n;
  return n;
}

template <uint64_t kList, size_t... I>
TypeList<typename TypeAt<((kList >> (5 * I)) & 31) - 1, DispatchTable>::type...> ContractTypeList(
    std::index_sequence<I...>);

/// The C++ types of an encoded list (ContractDtypes), in order.
template <uint64_t kList>
using ContractTypes =
    decltype(ContractTypeList<kList>(std::make_index_sequence<ContractDtypeCount<kList>()>()));

}  // namespace details

/// The dtype list of parameter `param` of a contract text, at compile time, for
/// DispatchDtype<ContractDtypes(text, "x")>: text must be a constant (a string literal's
/// constexpr char array, which KFFI_EXPORT_CONTRACT takes too). The parameter must be a tensor
/// (Optional[Tensor(...)] too) listing at most 12 dtypes that have C++ types (see the top).
constexpr uint64_t ContractDtypes(const char* text, const char* param) {
  size_t i = 0;
  for (;;) {
    i = details::SkipContractSpace(text, i);
    const size_t name_end = details::ContractNameEnd(text, i);
    if (name_end == i) details::ContractDtypesError_NoSuchParameter();  // "->", ";" or the end
    const bool match = details::ContractWordIs(text, i, name_end, param);
    i = details::SkipContractSpace(text, name_end);
    if (text[i] != ':') details::ContractDtypesError_Malformed();
    if (match) return details::ContractTensorDtypes(text, i + 1);
    // Skip this parameter's type: to the next comma outside brackets and a record's braces
    // (`cfg: demo.T{x: float64[0, 1], n: int64}`: its field names are no parameters).
    int depth = 0;
    for (++i; text[i] != '\0'; ++i) {
      const char c = text[i];
      if (c == '(' || c == '[' || c == '{') ++depth;
      if (c == ')' || c == ']' || c == '}') --depth;
      if (depth == 0 && (c == ',' || c == ';' || (c == '-' && text[i + 1] == '>'))) break;
    }
    if (text[i] != ',') details::ContractDtypesError_NoSuchParameter();
    ++i;
  }
}

/// Calls body(TypeTag<T>{}) for the T of Ts whose dtype is `dtype` and returns what it returns
/// (every instantiation must return the same type); a dtype not among them is a TypeError
/// naming `name`.dtype, the list and the dtype. The compares run in the order of Ts.
template <typename... Ts, typename F>
KFFI_INLINE decltype(auto) DispatchDtype(DLDataType dtype, const char* name, F&& body) {
  return details::DispatchList(details::TypeList<Ts...>{}, dtype, name, body);
}
/// DispatchDtype on x's dtype.
template <typename... Ts, typename F>
KFFI_INLINE decltype(auto) DispatchDtype(ConstTensorView x, const char* name, F&& body) {
  return details::DispatchList(details::TypeList<Ts...>{}, x.dtype(), name, body);
}
/// DispatchDtype over a contract parameter's dtypes: DispatchDtype<ContractDtypes(text, "x")>.
template <uint64_t kList, typename F>
KFFI_INLINE decltype(auto) DispatchDtype(DLDataType dtype, const char* name, F&& body) {
  return details::DispatchList(details::ContractTypes<kList>{}, dtype, name, body);
}
/// DispatchDtype on x's dtype over a contract parameter's dtypes.
template <uint64_t kList, typename F>
KFFI_INLINE decltype(auto) DispatchDtype(ConstTensorView x, const char* name, F&& body) {
  return details::DispatchList(details::ContractTypes<kList>{}, x.dtype(), name, body);
}

}  // namespace kffi

#endif  // KFFI_DISPATCH_H_
