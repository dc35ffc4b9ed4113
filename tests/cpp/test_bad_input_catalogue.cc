// tests/cpp/test_bad_input_catalogue.cc: a catalogue of bad inputs to the C ABI and the C++ API.
// Each case raises one error kind with a message that names the argument (a parameter of the C
// function, the argument of a typed call, the tensor of a check, the path of a load) and, where
// the message has them, what was expected and what was received; afterwards the process works.
// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>
#include <kffi/kffi.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <new>
#include <stdexcept>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include "contract/contract_test_util.h"

namespace {

using kffi::Any;
using kffi::AnyView;
using kffi::Function;
using kffi_test::FakeTensor;
using kffi_test::kF32;

/// Turns a C ABI failure into the raised error (so every case can be written as a throw); a call
/// that succeeds leaves nothing to catch.
void Check(int rc) {
  if (rc != 0) kffi::details::ThrowRaisedError(rc);
}

KFFIByteArray Bytes(const char* s) { return KFFIByteArray{s, std::char_traits<char>::length(s)}; }

/// A Str object (owned by the caller of the case, released at process exit).
KFFIObjectHandle StrObject(const char* s) {
  static std::vector<kffi::String>* keep = new std::vector<kffi::String>();
  keep->emplace_back(std::string(s) + " (long enough to be an object)");
  KFFIAny v;
  kffi::TypeTraits<kffi::String>::CopyToAnyView(keep->back(), &v);
  return v.v_obj;
}

/// Imports a float32 DLPack tensor with the given layout; the deleter frees what it made.
struct Layout {
  int32_t ndim;
  std::vector<int64_t> shape;  // room for ndim entries (or empty for a NULL shape)
  std::vector<int64_t> strides;
  DLDataType dtype = kF32;
  uint64_t byte_offset = 0;
  size_t data_offset = 0;
};

struct Imported {
  DLManagedTensorVersioned mt;
  Layout layout;
};

void ImportLayout(const Layout& layout, int32_t align = 0, int32_t contiguous = 0,
                  uint32_t major = DLPACK_MAJOR_VERSION) {
  auto* p = new Imported();
  p->layout = layout;
  p->mt.version = DLPackVersion{major, 0};
  p->mt.manager_ctx = p;
  p->mt.deleter = [](DLManagedTensorVersioned* self) {
    delete static_cast<Imported*>(self->manager_ctx);
  };
  p->mt.flags = 0;
  DLTensor& t = p->mt.dl_tensor;
  t.data = kffi_test::FakeData() + layout.data_offset;
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = layout.ndim;
  t.dtype = layout.dtype;
  t.shape = p->layout.shape.empty() ? nullptr : p->layout.shape.data();
  t.strides = p->layout.strides.empty() ? nullptr : p->layout.strides.data();
  t.byte_offset = layout.byte_offset;
  KFFIObjectHandle h = nullptr;
  Check(KFFITensorFromDLPackVersioned(&p->mt, align, contiguous, &h));
  KFFIObjectDecRef(h);
}

/// Owns a borrowed DLTensor* value (the runtime validates it as a DLPack import).
void OwnBorrowed(FakeTensor t) {
  KFFIAny view;
  kffi::details::SetPOD(&view, kKFFIDLTensorPtr);
  view.v_ptr = &t.t;
  KFFIAny out;
  Check(KFFIAnyViewToOwnedAny(&view, &out));
  KFFIObjectDecRef(out.v_obj);
}

Function Typed() {
  return Function::FromTyped([](int64_t, std::string) { return int64_t{1}; }, "typed");
}

kffi::Module ContractLib() { return kffi::Module::Load(KFFI_TEST_CONTRACTLIB); }

std::string TempPath(const char* name) {
  return ::testing::TempDir() + "kffi_catalogue_" + std::to_string(getpid()) + "_" + name;
}

struct Case {
  const char* name;
  std::function<void()> action;
  const char* kind;
  std::vector<std::string> fragments;  // each must appear in the message
};

// clang-format off
std::vector<Case> MakeCases() {
  const int64_t kBig = int64_t{1} << 62;
  return {
    // ---- the C ABI: every pointer argument is checked and named ---------------------------
    {"FunctionCallNullFunc", [] { KFFIAny r; Check(KFFIFunctionCall(nullptr, nullptr, 0, &r)); },
     "ValueError", {"KFFIFunctionCall: func is NULL"}},
    {"FunctionCallNotAFunction",
     [] { KFFIAny r; Check(KFFIFunctionCall(StrObject("s"), nullptr, 0, &r)); },
     "TypeError", {"KFFIFunctionCall", "expected a `ffi.Function`, got `ffi.Str`"}},
    {"FunctionCallNegativeCount", [] {
       KFFIAny r;
       Check(KFFIFunctionCall(kffi::details::ObjectUnsafe::GetHandle(
                                  kffi::details::ObjectRefData(Typed())), nullptr, -1, &r));
     }, "ValueError", {"KFFIFunctionCall: -1 arguments", "expected num_args >= 0"}},
    {"FunctionCallNullArgs", [] {
       KFFIAny r;
       Check(KFFIFunctionCall(kffi::details::ObjectUnsafe::GetHandle(
                                  kffi::details::ObjectRefData(Typed())), nullptr, 2, &r));
     }, "ValueError", {"KFFIFunctionCall: 2 arguments at NULL"}},
    {"FunctionCallNullResult", [] {
       Check(KFFIFunctionCall(kffi::details::ObjectUnsafe::GetHandle(
                                  kffi::details::ObjectRefData(Typed())), nullptr, 0, nullptr));
     }, "ValueError", {"KFFIFunctionCall: result must not be NULL"}},
    {"FunctionCreateNullSafeCall",
     [] { KFFIObjectHandle h; Check(KFFIFunctionCreate(nullptr, nullptr, nullptr, &h)); },
     "ValueError", {"KFFIFunctionCreate: safe_call is NULL"}},
    {"FunctionCreateNullOut", [] {
       Check(KFFIFunctionCreate(nullptr, [](void*, const KFFIAny*, int32_t, KFFIAny*) { return 0; },
                                nullptr, nullptr));
     }, "ValueError", {"KFFIFunctionCreate: out must not be NULL"}},
    {"SetGlobalNullName", [] {
       Check(KFFIFunctionSetGlobal(nullptr, kffi::details::ObjectUnsafe::GetHandle(
                                                kffi::details::ObjectRefData(Typed())), 0));
     }, "ValueError", {"KFFIFunctionSetGlobal: name must not be NULL"}},
    {"SetGlobalNotAFunction", [] {
       KFFIByteArray n = Bytes("catalogue.not_a_function");
       Check(KFFIFunctionSetGlobal(&n, StrObject("x"), 0));
     }, "TypeError", {"KFFIFunctionSetGlobal", "expected a `ffi.Function`, got `ffi.Str`"}},
    {"SetGlobalTwice", [] {
       Function::SetGlobal("catalogue.twice", Typed(), /*allow_override=*/true);
       KFFIByteArray n = Bytes("catalogue.twice");
       Check(KFFIFunctionSetGlobal(&n, kffi::details::ObjectUnsafe::GetHandle(
                                           kffi::details::ObjectRefData(Typed())), 0));
     }, "KeyError", {"Global function `catalogue.twice` is already registered"}},
    {"GetGlobalNullDataNonzeroSize", [] {
       KFFIByteArray n{nullptr, 3};
       KFFIObjectHandle h;
       Check(KFFIFunctionGetGlobal(&n, &h));
     }, "ValueError", {"KFFIFunctionGetGlobal: name has NULL data and a nonzero size"}},
    {"GetGlobalNullOut", [] { KFFIByteArray n = Bytes("x"); Check(KFFIFunctionGetGlobal(&n, nullptr)); },
     "ValueError", {"KFFIFunctionGetGlobal: out must not be NULL"}},
    {"RemoveGlobalNullName", [] { int removed; Check(KFFIFunctionRemoveGlobal(nullptr, &removed)); },
     "ValueError", {"KFFIFunctionRemoveGlobal: name must not be NULL"}},
    {"ListGlobalNamesNullVisit", [] { Check(KFFIFunctionListGlobalNames(nullptr, nullptr)); },
     "ValueError", {"KFFIFunctionListGlobalNames: visit is NULL"}},
    {"RequiredGlobalMissing", [] { Function::GetGlobalRequired("catalogue.no_such_function"); },
     "KeyError", {"catalogue.no_such_function"}},
    {"AnyViewToOwnedNullOut", [] { KFFIAny v; kffi::details::SetNone(&v); Check(KFFIAnyViewToOwnedAny(&v, nullptr)); },
     "ValueError", {"KFFIAnyViewToOwnedAny: out must not be NULL"}},
    {"AnyViewToOwnedNullView", [] { KFFIAny out; Check(KFFIAnyViewToOwnedAny(nullptr, &out)); },
     "ValueError", {"KFFIAnyViewToOwnedAny: any_view must not be NULL"}},
    {"AnyViewToOwnedNullRawStr", [] {
       KFFIAny v; kffi::details::SetPOD(&v, kKFFIRawStr); v.v_c_str = nullptr;
       KFFIAny out; Check(KFFIAnyViewToOwnedAny(&v, &out));
     }, "ValueError", {"Cannot convert a NULL const char* into an owned str"}},
    {"AnyViewToOwnedNullByteArray", [] {
       KFFIAny v; kffi::details::SetPOD(&v, kKFFIByteArrayPtr); v.v_ptr = nullptr;
       KFFIAny out; Check(KFFIAnyViewToOwnedAny(&v, &out));
     }, "ValueError", {"KFFIAnyViewToOwnedAny: the ByteArray* value must not be NULL"}},
    {"AnyViewToOwnedUnknownIndex", [] {
       KFFIAny v; kffi::details::SetPOD(&v, 20); v.v_int64 = 1;
       KFFIAny out; Check(KFFIAnyViewToOwnedAny(&v, &out));
     }, "TypeError", {"unknown type index 20"}},
    {"AnyViewToOwnedNegativeIndex", [] {
       KFFIAny v; kffi::details::SetPOD(&v, -1); v.v_int64 = 0;
       KFFIAny out; Check(KFFIAnyViewToOwnedAny(&v, &out));
     }, "TypeError", {"unknown type index -1"}},
    {"AnyViewToOwnedNullDLTensor", [] {
       KFFIAny v; kffi::details::SetPOD(&v, kKFFIDLTensorPtr); v.v_ptr = nullptr;
       KFFIAny out; Check(KFFIAnyViewToOwnedAny(&v, &out));
     }, "ValueError", {"Cannot own a NULL DLTensor*"}},
    {"AnyViewToOwnedNegativeSize", [] { OwnBorrowed(FakeTensor({4, -2})); },
     "ValueError", {"DLTensor*: negative size in shape [4, -2]"}},
    {"AnyViewToOwnedOverflowingSize", [] { OwnBorrowed(FakeTensor({int64_t{1} << 40, int64_t{1} << 40})); },
     "ValueError", {"DLTensor*", "[1099511627776, 1099511627776]", "overflows int64"}},
    {"OpaqueWithPlainIndex", [] { KFFIObjectHandle h; Check(KFFIObjectCreateOpaque(nullptr, 5, nullptr, &h)); },
     "ValueError", {"KFFIObjectCreateOpaque: type_index 5 is not an object type index"}},
    {"OpaqueNullOut", [] { Check(KFFIObjectCreateOpaque(nullptr, kKFFIOpaquePyObject, nullptr, nullptr)); },
     "ValueError", {"KFFIObjectCreateOpaque: out must not be NULL"}},
    {"WeakLockNullOut", [] { Check(KFFIObjectWeakLock(StrObject("w"), nullptr)); },
     "ValueError", {"KFFIObjectWeakLock: out must not be NULL"}},
    {"DataTypeFromBadString", [] { KFFIByteArray s = Bytes("flot32"); DLDataType d; Check(KFFIDataTypeFromString(&s, &d)); },
     "ValueError", {"Cannot parse data type from string `flot32`"}},
    {"DataTypeFromEmptyString", [] { KFFIByteArray s = Bytes(""); DLDataType d; Check(KFFIDataTypeFromString(&s, &d)); },
     "ValueError", {"Cannot parse data type from string ``"}},
    {"DataTypeFromZeroLanes", [] { KFFIByteArray s = Bytes("float32x0"); DLDataType d; Check(KFFIDataTypeFromString(&s, &d)); },
     "ValueError", {"`float32x0`"}},
    {"TypeKeyUnknown", [] { KFFIByteArray k = Bytes("catalogue.NoSuchType"); int32_t i; Check(KFFITypeKeyToIndex(&k, &i)); },
     "KeyError", {"Type key `catalogue.NoSuchType` is not registered"}},
    {"TypeKeyReRegisteredUnderAnotherParent", [] {
       KFFIByteArray k = Bytes("catalogue.Child");
       int32_t i;
       Check(KFFITypeGetOrAllocIndex(&k, -1, 1, kKFFIObject, &i));
       Check(KFFITypeGetOrAllocIndex(&k, -1, 2, kKFFIArray, &i));
     }, "ValueError", {"Type key `catalogue.Child` is already registered with parent"}},
    {"TypeKeyEmpty", [] { KFFIByteArray k = Bytes(""); int32_t i; Check(KFFITypeGetOrAllocIndex(&k, -1, 1, kKFFIObject, &i)); },
     "ValueError", {"A type key must not be empty"}},

    // ---- DLPack imports: the layout is checked before anything else reads it ----------------
    {"ImportNull", [] { KFFIObjectHandle h; Check(KFFITensorFromDLPackVersioned(nullptr, 0, 0, &h)); },
     "ValueError", {"Cannot import a NULL DLPack tensor"}},
    {"ImportNegativeNdim", [] { ImportLayout({-1, {4}, {}}); },
     "ValueError", {"DLPack tensor: ndim -1 is out of range (0 to 1024)"}},
    {"ImportHugeNdim", [] { ImportLayout({1025, std::vector<int64_t>(1025, 1), {}}); },
     "ValueError", {"DLPack tensor: ndim 1025 is out of range (0 to 1024)"}},
    {"ImportNullShape", [] { ImportLayout({2, {}, {}}); },
     "ValueError", {"DLPack tensor: ndim 2 with a NULL shape"}},
    {"ImportNegativeSize", [] { ImportLayout({2, {3, -1}, {}}); },
     "ValueError", {"DLPack tensor: negative size in shape [3, -1]"}},
    {"ImportElementCountOverflow", [] { ImportLayout({3, {kBig, kBig, 4}, {}}); },
     "ValueError", {"DLPack tensor", "the number of elements overflows int64"}},
    {"ImportBitsOverflow", [] { ImportLayout({1, {int64_t{1} << 61}, {}}); },
     "ValueError", {"DLPack tensor", "[2305843009213693952]", "overflows int64"}},
    {"ImportStridesReachOverflow", [] { ImportLayout({2, {4, 4}, {kBig, 1}}); },
     "ValueError", {"DLPack tensor", "[4, 4]", "overflows int64"}},
    {"ImportMisaligned", [] { Layout l{1, {4}, {}}; l.data_offset = 4; ImportLayout(l, 16); },
     "ValueError", {"DLPack tensor data is not aligned to 16 bytes", "leaves a remainder of 4"}},
    {"ImportNegativeAlignment", [] { ImportLayout({1, {4}, {}}, -8); },
     "ValueError", {"require_alignment must be >= 0, got -8"}},
    {"ImportNotContiguous", [] { ImportLayout({2, {4, 4}, {1, 4}}, 0, 1); },
     "ValueError", {"DLPack tensor is not contiguous: shape [4, 4], strides [1, 4]"}},
    {"ImportUnknownMajorVersion", [] { ImportLayout({1, {4}, {}}, 0, 0, 7); },
     "ValueError", {"Unsupported DLPack major version 7"}},
    {"TensorFlagsOfAStr", [] { uint64_t f; Check(KFFITensorGetFlags(StrObject("t"), &f)); },
     "TypeError", {"expected a Tensor, got ffi.Str"}},
    {"TensorToDLPackOfAStr", [] { DLManagedTensor* m; Check(KFFITensorToDLPack(StrObject("t"), &m)); },
     "TypeError", {"expected a Tensor, got ffi.Str"}},

    // ---- tensors made in C++: sizes checked before allocating --------------------------------
    {"EnvAllocNegativeSize", [] { kffi::Tensor::FromEnvAlloc({2, -3}, kF32, DLDevice{kDLCPU, 0}); },
     "ValueError", {"Tensor::FromEnvAlloc: negative size in shape [2, -3]"}},
    {"EnvAllocOverflow", [] { kffi::Tensor::FromEnvAlloc({kBig, 8}, kF32, DLDevice{kDLCPU, 0}); },
     "ValueError", {"Tensor::FromEnvAlloc", "[4611686018427387904, 8]", "overflows int64"}},
    {"EnvAllocNoAllocatorForCuda", [] { kffi::Tensor::FromEnvAlloc({2}, kF32, DLDevice{kDLCUDA, 0}); },
     "RuntimeError", {"Tensor::FromEnvAlloc: no environment allocator is set for device cuda:0"}},
    {"AllocStridedCountMismatch", [] {
       kffi::Tensor::FromNDAllocStrided(kffi::details::HostAlignedAlloc(), {2, 3}, {1}, kF32,
                                        DLDevice{kDLCPU, 0});
     }, "ValueError", {"Tensor::FromNDAllocStrided: shape [2, 3] has 2 dimensions but strides [1] has 1"}},
    {"AllocStridedNegativeStride", [] {
       kffi::Tensor::FromNDAllocStrided(kffi::details::HostAlignedAlloc(), {2, 3}, {3, -1}, kF32,
                                        DLDevice{kDLCPU, 0});
     }, "ValueError", {"Tensor::FromNDAllocStrided: negative stride in [3, -1]"}},
    {"TensorSizeOutOfRange", [] { kffi::Tensor::FromEnvAlloc({2, 3}, kF32, DLDevice{kDLCPU, 0}).size(2); },
     "IndexError", {"Dimension out of range (expected to be in range of [-2, 1], but got 2)"}},
    {"ZeroDimTensorSize", [] { kffi::Tensor::FromEnvAlloc({}, kF32, DLDevice{kDLCPU, 0}).size(0); },
     "IndexError", {"the tensor has no dimensions (ndim=0), but got dimension 0"}},
    {"BorrowedViewNumelOverflow", [] { FakeTensor t({kBig, kBig}); kffi::TensorView(t).numel(); },
     "ValueError", {"[4611686018427387904, 4611686018427387904]", "overflows int64"}},
    {"AsStridedMismatch", [] {
       kffi::Tensor::FromEnvAlloc({4}, kF32, DLDevice{kDLCPU, 0}).as_strided({2, 2}, {1});
     }, "ValueError", {"Tensor::as_strided: shape [2, 2] has 2 dimensions but strides [1] has 1"}},

    // ---- tensor_checks.h: each names the tensor ------------------------------------------------
    {"CheckWritableReadOnly", [] {
       kffi::Tensor x = kffi::Tensor::FromEnvAlloc({4}, kF32, DLDevice{kDLCPU, 0}).as_read_only();
       kffi::CheckWritable(x, "out");
     }, "ValueError", {"out: expected a writable tensor, got a read-only tensor"}},
    {"CheckNdim", [] { kffi::CheckNdim(FakeTensor({3}), 2, "x"); },
     "ValueError", {"x.ndim: expected 2, got 1 (shape [3])"}},
    {"CheckDtype", [] { kffi::CheckDtype(FakeTensor({3}, kffi_test::kF16), {kF32}, "x"); },
     "TypeError", {"x.dtype: expected float32, got float16"}},
    {"CheckShape", [] { kffi::CheckShape(FakeTensor({3, 4}), {3, 5}, "w"); },
     "ValueError", {"w.shape: expected [3, 5], got [3, 4]"}},
    {"CheckContiguous", [] { kffi::CheckContiguous(FakeTensor({4, 2}, kF32, kffi_test::kCPU, {1, 4}), "x"); },
     "ValueError", {"x.strides: expected contiguous, got [1, 4] for shape [4, 2]"}},
    {"CheckAlignment", [] { kffi::CheckAlignment(FakeTensor({4}, kF32, kffi_test::kCPU, {}, 4), 16, "x"); },
     "ValueError", {"x: expected data aligned to 16 bytes, got data aligned to 4 bytes"}},
    {"CheckDevice", [] { kffi::CheckDevice(FakeTensor({4}), kDLCUDA, "x"); },
     "ValueError", {"x.device: expected cuda, got cpu"}},
    {"CheckSameDevice", [] {
       kffi::CheckSameDevice(FakeTensor({4}), FakeTensor({4}, kF32, kffi_test::kCuda0), "a", "b");
     }, "ValueError", {"a.device: expected cuda:0 (as b.device), got cpu"}},
    {"CheckSameDtype", [] {
       kffi::CheckSameDtype(FakeTensor({4}), FakeTensor({4}, kffi_test::kF16), "a", "b");
     }, "TypeError", {"a.dtype: expected float16 (as b.dtype), got float32"}},
    {"CheckSameShape", [] { kffi::CheckSameShape(FakeTensor({4}), FakeTensor({5}), "a", "b"); },
     "ValueError", {"a.shape: expected [5] (as b.shape), got [4]"}},

    // ---- typed calls: the argument's position, the signature, expected and received ----------
    {"TypedWrongType", [] { Typed()(int64_t{1}, int64_t{2}); },
     "TypeError", {"arg1: expected str, got int (argument #1 of `typed(arg0: int, arg1: str) -> int`)"}},
    {"TypedTooFewArguments", [] { Typed()(int64_t{1}); },
     "TypeError", {"typed: expected 2 arguments, got 1 (`typed(arg0: int, arg1: str) -> int`)"}},
    {"TypedTooManyArguments", [] { Typed()(int64_t{1}, "a", 3.0); },
     "TypeError", {"typed: expected 2 arguments, got 3"}},
    {"TypedIntOutOfRange", [] { Function::FromTyped([](int32_t) {}, "narrow")(int64_t{1} << 40); },
     "TypeError", {"argument #0", "`narrow(arg0: int32) -> None`",
                   "arg0: expected int32, got int (1099511627776 is out of range for int32)"}},
    {"TypedUnsignedNegative", [] { Function::FromTyped([](uint8_t) {}, "u8")(int64_t{-1}); },
     "TypeError", {"argument #0", "arg0: expected uint8, got int (-1 is out of range for uint8)"}},
    {"TypedFloatFromStr", [] { Function::FromTyped([](double) {}, "f")("x"); },
     "TypeError", {"argument #0", "arg0: expected float, got str"}},
    {"TypedBoolFromStr", [] { Function::FromTyped([](bool) {}, "b")("x"); },
     "TypeError", {"argument #0", "arg0: expected bool, got str"}},
    {"TypedTensorFromInt", [] { Function::FromTyped([](kffi::ConstTensorView) {}, "t")(int64_t{1}); },
     "TypeError", {"argument #0", "arg0: expected Tensor, got int"}},
    {"TypedReadOnlyTensorToWritable", [] {
       kffi::Tensor x = kffi::Tensor::FromEnvAlloc({4}, kF32, DLDevice{kDLCPU, 0});
       kffi::Tensor ro = x.as_read_only();
       Function::FromTyped([](kffi::TensorView) {}, "w")(ro);
     }, "ValueError", {"arg0: expected a writable tensor (the function may write it), got a read-only tensor",
                       "(argument #0 of `w(arg0: Tensor(mut)) -> None`)"}},
    {"TensorDataOfReadOnly", [] {
       kffi::Tensor x = kffi::Tensor::FromEnvAlloc({4}, kF32, DLDevice{kDLCPU, 0});
       x.as_read_only().data<float>();
     }, "ValueError", {"Cannot write through data<T>(): the tensor is read-only"}},
    {"TypedOptionalFromStr", [] { Function::FromTyped([](kffi::Optional<int64_t>) {}, "o")("x"); },
     "TypeError", {"argument #0", "arg0: expected Optional<int>, got str"}},
    {"TypedTupleOfWrongSize", [] {
       Function::FromTyped([](std::tuple<int64_t, std::string>) {}, "tup")(kffi::Array<Any>{Any(1)});
     }, "TypeError", {"argument #0", "arg0: expected Tuple<int, str>, got Array[size 1]"}},
    {"TypedArrayOfWrongElements", [] {
       Function::FromTyped([](kffi::Array<int64_t>) {}, "arr")(kffi::Array<Any>{Any(1), Any("s")});
     }, "TypeError", {"argument #0", "arg0: expected Array<int>, got Array[index 1: str]"}},
    {"TypedMapOfWrongValues", [] {
       kffi::Map<Any, Any> m;
       m.Set(Any("k"), Any(1.5));
       Function::FromTyped([](kffi::Map<kffi::String, int64_t>) {}, "map")(m);
     }, "TypeError", {"argument #0", "arg0: expected Map<str, int>, got", "float"}},
    {"TypedVariantOfNone", [] {
       Function::FromTyped([](std::variant<int64_t, std::string>) {}, "var")(nullptr);
     }, "TypeError", {"argument #0", "arg0: expected Variant<int, str>, got None"}},
    {"TypedFunctionFromInt", [] { Function::FromTyped([](Function) {}, "fn")(int64_t{3}); },
     "TypeError", {"argument #0", "arg0: expected Function, got int"}},
    {"TypedDtypeFromBadStr", [] { Function::FromTyped([](DLDataType) {}, "dt")("flot32"); },
     "ValueError", {"arg0: Cannot parse data type from string `flot32` (argument #0 of "
                    "`dt(arg0: dtype) -> None`)"}},
    {"TypedShapeFromStr", [] { Function::FromTyped([](kffi::Shape) {}, "sh")("x"); },
     "TypeError", {"argument #0", "arg0: expected Shape, got str"}},
    {"TypedUnknownTypeIndexToAny", [] {
       // An Any parameter takes every value, but not one of a type index no value has.
       KFFIAny bad;
       kffi::details::SetPOD(&bad, 30);
       bad.v_int64 = 0;
       Function f = Function::FromTyped([](Any) {}, "any");
       KFFIAny r;
       Check(KFFIFunctionCall(kffi::details::ObjectUnsafe::GetHandle(kffi::details::ObjectRefData(f)),
                              &bad, 1, &r));
     }, "TypeError", {"argument #0", "unknown type index 30"}},
    {"NullFunctionCall", [] { Function()(); }, "ValueError", {"Cannot call a null Function"}},

    // ---- what a kernel throws arrives with its kind and text ---------------------------------
    {"KernelRuntimeError", [] { Function::FromTyped([]() { throw std::runtime_error("rt text"); })(); },
     "RuntimeError", {"rt text"}},
    {"KernelInvalidArgument", [] { Function::FromTyped([]() { throw std::invalid_argument("ia text"); })(); },
     "ValueError", {"ia text"}},
    {"KernelDomainError", [] { Function::FromTyped([]() { throw std::domain_error("de text"); })(); },
     "ValueError", {"de text"}},
    {"KernelOutOfRange", [] { Function::FromTyped([]() { throw std::out_of_range("oor text"); })(); },
     "IndexError", {"oor text"}},
    {"KernelBadAlloc", [] { Function::FromTyped([]() { throw std::bad_alloc(); })(); },
     "MemoryError", {"Out of memory"}},
    {"KernelUnknownException", [] { Function::FromTyped([]() { throw 42; })(); },
     "InternalError", {"unknown C++ exception"}},

    // ---- containers and casts ----------------------------------------------------------------
    {"ArrayIndexOutOfRange", [] { kffi::Array<int64_t>{1, 2}.at(5); },
     "IndexError", {"5", "2"}},
    {"MapMissingKey", [] { kffi::Map<kffi::String, int64_t> m; m.Set("a", 1); m.at("missing"); },
     "KeyError", {"missing"}},
    {"CastStrToInt", [] { Any("text").cast<int64_t>(); },
     "TypeError", {"Cannot convert from type `str` to `int`"}},
    {"CastIntToInt8OutOfRange", [] { Any(int64_t{300}).cast<int8_t>(); },
     "TypeError", {"Cannot convert from type `int (300 is out of range for int8)` to `int8`"}},
    {"CastNoneToTensor", [] { Any().cast<kffi::Tensor>(); },
     "TypeError", {"Cannot convert from type `None` to `Tensor`"}},
    {"CastStrToBadDtype", [] { Any("int3x").cast<DLDataType>(); },
     "ValueError", {"Cannot parse data type from string `int3x`"}},

    // ---- the loader: the path is named, and nothing is opened that should not be ----------
    {"LoadNullPath", [] { KFFIObjectHandle h; Check(KFFIModuleLoadFromFile(nullptr, &h)); },
     "ValueError", {"KFFIModuleLoadFromFile: path must not be NULL"}},
    {"LoadNullOut", [] { KFFIByteArray p = Bytes("/x"); Check(KFFIModuleLoadFromFile(&p, nullptr)); },
     "ValueError", {"KFFIModuleLoadFromFile: out must not be NULL"}},
    {"LoadEmptyPath", [] { kffi::Module::Load(""); },
     "ValueError", {"Cannot load module: the path is empty"}},
    {"LoadPathWithNul", [] {
       KFFIByteArray p{"/tmp/a\0b", 8};
       KFFIObjectHandle h;
       Check(KFFIModuleLoadFromFile(&p, &h));
     }, "ValueError", {"the path contains a NUL byte at offset 6"}},
    {"LoadMissingFile", [] { kffi::Module::Load("/nonexistent/catalogue/libnothing.so"); },
     "RuntimeError", {"Cannot load module `/nonexistent/catalogue/libnothing.so`: no such file"}},
    {"LoadDirectory", [] { kffi::Module::Load(::testing::TempDir()); },
     "RuntimeError", {"Cannot load module `", "regular file"}},
    {"LoadFifo", [] {
       std::string path = TempPath("fifo");
       unlink(path.c_str());
       ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
       struct Unlink { std::string p; ~Unlink() { unlink(p.c_str()); } } cleanup{path};
       kffi::Module::Load(path);
     }, "RuntimeError", {"Cannot load module `", "fifo", "regular file"}},
    {"LoadTextFile", [] { kffi::Module::Load(KFFI_TEST_NOT_A_LIBRARY); },
     "RuntimeError", {"Cannot load module `", "libkffi_test_not_a_library.so`: not a loadable shared library"}},
    {"LoadPlainLibrary", [] { kffi::Module::Load(KFFI_TEST_PLAINLIB); },
     "RuntimeError", {"libkffi_test_plainlib.so`: it is not a kffi library"}},
    {"LoadOtherAbiVersion", [] { kffi::Module::Load(KFFI_TEST_MODLIB_ABI999); },
     "RuntimeError", {"libkffi_test_modlib_abi999.so`: it was built for kffi ABI version 999",
                      "serves ABI version 1"}},
    {"ModuleCallOnAStr", [] { KFFIByteArray n = Bytes("f"); KFFIObjectHandle h; Check(KFFIModuleGetFunction(StrObject("m"), &n, 1, &h)); },
     "TypeError", {"KFFIModuleGetFunction: expected a `ffi.Module`, got `ffi.Str`"}},
    {"ModuleListNullVisit", [] {
       KFFIObjectHandle sys;
       Check(KFFIModuleGetSystemLib(&sys));
       struct Drop { KFFIObjectHandle h; ~Drop() { KFFIObjectDecRef(h); } } drop{sys};
       Check(KFFIModuleListFunctions(sys, 1, nullptr, nullptr));
     }, "ValueError", {"KFFIModuleListFunctions: visit is NULL"}},
    {"ModuleImportCycle", [] {
       kffi::Module a = kffi::Module::Load(KFFI_TEST_MODLIB);
       kffi::Module b = kffi::Module::Load(KFFI_TEST_MODLIB_OTHER);
       a.Import(b);
       b.Import(a);
     }, "ValueError", {"Cannot import module `", "it would make an import cycle"}},
    {"SystemLibSymbolRegisteredTwice", [] {
       static int first, second;
       Check(KFFIModuleRegisterSystemLibSymbol("__kffi_catalogue_twice", &first));
       Check(KFFIModuleRegisterSystemLibSymbol("__kffi_catalogue_twice", &second));
     }, "KeyError", {"System library symbol `__kffi_catalogue_twice` is already registered"}},
    {"SystemLibEmptyName", [] { static int x; Check(KFFIModuleRegisterSystemLibSymbol("", &x)); },
     "ValueError", {"KFFIModuleRegisterSystemLibSymbol: name is NULL or empty"}},
    {"MetadataSymbolReturnsAnInt", [] {
       static auto fn = [](void*, const KFFIAny*, int32_t, KFFIAny*) { return 0; };
       static auto meta = [](void*, const KFFIAny*, int32_t, KFFIAny* r) {
         kffi::details::SetPOD(r, kKFFIInt);
         r->v_int64 = 7;
         return 0;
       };
       KFFISafeCallType f = fn, m = meta;
       Check(KFFIModuleRegisterSystemLibSymbol("__kffi_catalogue_meta_int", reinterpret_cast<void*>(f)));
       Check(KFFIModuleRegisterSystemLibSymbol("__kffi__meta_catalogue_meta_int", reinterpret_cast<void*>(m)));
       kffi::Module::SystemLib().GetFunctionMetadata("catalogue_meta_int");
     }, "TypeError", {"The metadata symbol `__kffi__meta_catalogue_meta_int` returned `int`, expected a str"}},
    {"MetadataSymbolFailsWithoutError", [] {
       static auto fn = [](void*, const KFFIAny*, int32_t, KFFIAny*) { return 0; };
       static auto meta = [](void*, const KFFIAny*, int32_t, KFFIAny*) { return -1; };
       KFFISafeCallType f = fn, m = meta;
       Check(KFFIModuleRegisterSystemLibSymbol("__kffi_catalogue_meta_silent", reinterpret_cast<void*>(f)));
       Check(KFFIModuleRegisterSystemLibSymbol("__kffi__meta_catalogue_meta_silent", reinterpret_cast<void*>(m)));
       kffi::Module::SystemLib().GetFunctionMetadata("catalogue_meta_silent");
     }, "RuntimeError", {"The metadata symbol `__kffi__meta_catalogue_meta_silent` failed with code -1 "
                         "without raising an error"}},

    // ---- contracts in a loaded library: the parameter, expected and received ----------------
    {"ContractWrongCount", [] { ContractLib().GetFunctionRequired("add_one")(kffi::TensorView(FakeTensor({16}))); },
     "TypeError", {"add_one: expected 2 arguments, got 1"}},
    {"ContractWrongType", [] { ContractLib().GetFunctionRequired("add_one")(int64_t{1}, int64_t{2}); },
     "TypeError", {"a: expected Tensor, got int (argument #0 of `add_one("}},
    {"ContractShapeMismatch", [] {
       ContractLib().GetFunctionRequired("add_one")(kffi::TensorView(FakeTensor({32})),
                                                    kffi::TensorView(FakeTensor({16})));
     }, "ValueError", {"b.shape[0]: expected n = 32 (as a.shape[0]), got 16 (argument #1"}},
    {"ContractDtype", [] {
       ContractLib().GetFunctionRequired("add_one")(kffi::TensorView(FakeTensor({16}, kffi_test::kF16)),
                                                    kffi::TensorView(FakeTensor({16})));
     }, "TypeError", {"a.dtype: expected float32, got float16 (argument #0"}},
    {"ContractNdim", [] {
       ContractLib().GetFunctionRequired("add_one")(kffi::TensorView(FakeTensor({4, 4})),
                                                    kffi::TensorView(FakeTensor({16})));
     }, "ValueError", {"a.ndim: expected 1, got 2 (argument #0"}},
    {"ContractAlignment", [] {
       ContractLib().GetFunctionRequired("add_one")(
           kffi::TensorView(FakeTensor({16}, kF32, kffi_test::kCPU, {}, 4)),
           kffi::TensorView(FakeTensor({16})));
     }, "ValueError", {"a: expected data aligned to 16 bytes, got data aligned to 4 bytes (argument #0"}},
    {"ContractDivisibility", [] {
       ContractLib().GetFunctionRequired("add_one")(kffi::TensorView(FakeTensor({24})),
                                                    kffi::TensorView(FakeTensor({24})));
     }, "ValueError", {"a.shape[0]: expected n divisible by 16, got 24 (argument #0"}},
    {"ContractMutReadOnly", [] {
       kffi::Tensor y = kffi::Tensor::FromEnvAlloc({4}, kF32, DLDevice{kDLCPU, 0}).as_read_only();
       kffi::Tensor x = kffi::Tensor::FromEnvAlloc({4}, kF32, DLDevice{kDLCPU, 0});
       ContractLib().GetFunctionRequired("scale")(kffi::TensorView(y), kffi::TensorView(x), 2.0);
     }, "ValueError", {"y: expected a writable tensor (the parameter is declared `mut`), got a read-only tensor (argument #0"}},
    {"ContractStreamWrongType", [] {
       ContractLib().GetFunctionRequired("with_bias")(kffi::TensorView(FakeTensor({2, 4})), nullptr, "s");
     }, "TypeError", {"stream: expected Stream", "got str (argument #2"}},
    {"ContractOptionalShape", [] {
       ContractLib().GetFunctionRequired("with_bias")(kffi::TensorView(FakeTensor({2, 4})),
                                                      kffi::TensorView(FakeTensor({5})), nullptr);
     }, "ValueError", {"bias.shape[0]: expected m = 4 (as x.shape[1]), got 5 (argument #1"}},
  };
}
// clang-format on

const std::vector<Case>& Cases() {
  static const std::vector<Case>* cases = new std::vector<Case>(MakeCases());
  return *cases;
}

class BadInput : public ::testing::TestWithParam<size_t> {};

TEST_P(BadInput, RaisesItsKindNamingTheArgument) {
  const Case& c = Cases()[GetParam()];
  std::string kind, message;
  try {
    c.action();
  } catch (const kffi::Error& e) {
    kind = e.kind();
    message = e.message();
  }
  ASSERT_FALSE(kind.empty()) << c.name << ": no error was raised";
  EXPECT_EQ(kind, c.kind) << c.name << ": " << message;
  for (const std::string& f : c.fragments) {
    EXPECT_NE(message.find(f), std::string::npos)
        << c.name << ": the message lacks `" << f << "`:\n  " << message;
  }
  // The process is still healthy: an ordinary call works, and nothing is left raised.
  KFFIObjectHandle leftover = nullptr;
  KFFIErrorMoveFromRaised(&leftover);
  EXPECT_EQ(leftover, nullptr) << c.name << ": an error was left in the thread's slot";
  KFFIObjectDecRef(leftover);
  EXPECT_EQ(Typed()(int64_t{1}, "x").cast<int64_t>(), 1);
}

INSTANTIATE_TEST_SUITE_P(Catalogue, BadInput, ::testing::Range<size_t>(0, Cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           return std::string(Cases()[info.param].name);
                         });

}  // namespace
