// tests/cpp/core/test_readonly.cc: read-only tensors: the argument flag (KFFIAny.tensor_flags) and
// the imported DLPack flag reach ConstTensorView and Tensor parameters, no conversion drops the
// flag, and read-only by type: a parameter that may write (TensorView, DLTensor*) refuses read-only
// memory naming itself, one that only reads (ConstTensorView, const DLTensor*) takes it without a
// copy, and metadata and signatures say which is which.
// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>
#include <kffi/kffi.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tensor_producer.h"
#include "test_util.h"

namespace {

using kffi::Any;
using kffi::ConstTensorView;
using kffi::Function;
using kffi::Tensor;
using kffi::TensorView;
using kffi_test::kCPU;
using kffi_test::ProducedV1;

// A borrowed tensor argument as a binding passes it: a DLTensor* with flags.
KFFIAny DLTensorArg(DLTensor* t, uint32_t flags) {
  KFFIAny a;
  kffi::details::SetPOD(&a, kKFFIDLTensorPtr);
  a.tensor_flags = flags;
  a.v_ptr = t;
  return a;
}

KFFIAny TensorObjectArg(const Tensor& t, uint32_t flags) {
  KFFIAny a;
  kffi::details::SetObject(&a, static_cast<KFFIObject*>(kffi::details::ObjectUnsafe::GetHandle(
                                   kffi::details::ObjectRefData(t))));
  a.tensor_flags = flags;
  return a;
}

struct Raw {
  std::vector<float> data = std::vector<float>(4, 1.0f);
  std::vector<int64_t> shape{4};
  DLTensor t{data.data(), kCPU, 1, kffi::dtypes::float32, shape.data(), nullptr, 0};
};

Tensor ImportReadOnly(int* deletes) {
  DLManagedTensorVersioned* in = ProducedV1::Make({4}, {}, deletes);
  in->flags = DLPACK_FLAG_BITMASK_READ_ONLY;
  return Tensor::FromDLPackVersioned(in);
}

// out = 2 * x: out is written, x only read.
void Scale(TensorView out, ConstTensorView x) {
  for (int64_t i = 0; i < x.numel(); ++i) out.data<float>()[i] = 2 * x.data<float>()[i];
}

// "Kind: message" of the error f throws.
template <typename F>
std::string ErrorText(F&& f) {
  kffi::Error e = CatchError(std::forward<F>(f));
  return e.kind() + ": " + e.message();
}

// The refusal of read-only memory for a parameter that may write it, as argument #k of sig.
std::string ReadOnlyRefused(const std::string& param, int k, const std::string& sig) {
  return "ValueError: " + param +
         ": expected a writable tensor (the function may write it), got a read-only tensor "
         "(argument #" +
         std::to_string(k) + " of `" + sig + "`)";
}

TEST(ReadOnly, ConstTensorViewReadsTheArgumentFlag) {
  Function probe = Function::FromTyped([](ConstTensorView x) { return x.is_read_only(); }, "probe");
  Raw raw;
  KFFIAny plain = DLTensorArg(&raw.t, 0);
  KFFIAny ro = DLTensorArg(&raw.t, kKFFITensorFlagReadOnly);
  EXPECT_FALSE(probe.CallPacked(&plain, 1).cast<bool>());
  EXPECT_TRUE(probe.CallPacked(&ro, 1).cast<bool>());
  // Unknown bits (a newer producer) are ignored, not mistaken for read-only.
  KFFIAny other = DLTensorArg(&raw.t, 2);
  EXPECT_FALSE(probe.CallPacked(&other, 1).cast<bool>());
  // The view still points at the DLTensor itself.
  Function ptr = Function::FromTyped(
      [](ConstTensorView x) {
        return static_cast<void*>(const_cast<DLTensor*>(x.GetDLTensorPtr()));
      },
      "ptr");
  EXPECT_EQ(ptr.CallPacked(&ro, 1).cast<void*>(), static_cast<void*>(&raw.t));
}

TEST(ReadOnly, AWrittenParameterRefusesReadOnlyMemoryNamingTheArgument) {
  Function scale = Function::FromTyped(&Scale, "scale");
  const std::string sig = "scale(arg0: Tensor(mut), arg1: Tensor) -> None";
  Raw out, x;
  KFFIAny args[2] = {DLTensorArg(&out.t, kKFFITensorFlagReadOnly), DLTensorArg(&x.t, 0)};
  EXPECT_EQ(ErrorText([&] { scale.CallPacked(args, 2); }), ReadOnlyRefused("arg0", 0, sig));
  EXPECT_EQ(out.data[0], 1.0f);  // nothing written
  args[0].tensor_flags = 0;
  args[1].tensor_flags = kKFFITensorFlagReadOnly;  // reading a read-only input is fine
  scale.CallPacked(args, 2);
  EXPECT_EQ(out.data[3], 2.0f);
}

TEST(ReadOnly, ImportedFlagReachesViewsOfTheObject) {
  int deletes = 0;
  {
    Tensor t = ImportReadOnly(&deletes);
    EXPECT_TRUE(TensorView(t).is_read_only());
    Function probe =
        Function::FromTyped([](ConstTensorView x) { return x.is_writable(); }, "probe");
    EXPECT_FALSE(probe(t).cast<bool>());        // packed with the flag, and the object says so too
    KFFIAny unflagged = TensorObjectArg(t, 0);  // a producer that sends no flags
    EXPECT_FALSE(probe.CallPacked(&unflagged, 1).cast<bool>());
    Function scale = Function::FromTyped(&Scale, "scale");
    EXPECT_EQ(ErrorText([&] { scale(t, t); }),
              ReadOnlyRefused("arg0", 0, "scale(arg0: Tensor(mut), arg1: Tensor) -> None"));
    // A C++ caller passing a Tensor sets the argument flag itself.
    KFFIAny packed;
    kffi::TypeTraits<Tensor>::CopyToAnyView(t, &packed);
    EXPECT_EQ(packed.tensor_flags, static_cast<uint32_t>(kKFFITensorFlagReadOnly));
    // And a TensorView passed on keeps it.
    kffi::TypeTraits<TensorView>::CopyToAnyView(TensorView(t), &packed);
    EXPECT_EQ(packed.type_index, kKFFIDLTensorPtr);
    EXPECT_EQ(packed.tensor_flags, static_cast<uint32_t>(kKFFITensorFlagReadOnly));
    kffi::TypeTraits<ConstTensorView>::CopyToAnyView(ConstTensorView(t), &packed);
    EXPECT_EQ(packed.tensor_flags, static_cast<uint32_t>(kKFFITensorFlagReadOnly));
    Function forward = Function::FromTyped([probe](ConstTensorView x) { return probe(x); }, "fwd");
    Raw raw;
    KFFIAny ro = DLTensorArg(&raw.t, kKFFITensorFlagReadOnly);
    EXPECT_FALSE(forward.CallPacked(&ro, 1).cast<bool>());
  }
  EXPECT_EQ(deletes, 1);
}

TEST(ReadOnly, OwnedTensorParametersKeepTheFlag) {
  Function own = Function::FromTyped([](Tensor x) { return x; }, "own");
  Raw raw;
  KFFIAny ro = DLTensorArg(&raw.t, kKFFITensorFlagReadOnly);
  Tensor from_view = own.CallPacked(&ro, 1).cast<Tensor>();
  EXPECT_TRUE(from_view.is_read_only());
  EXPECT_EQ(from_view.data_ptr(), raw.data.data());
  KFFIAny rw = DLTensorArg(&raw.t, 0);
  EXPECT_FALSE(own.CallPacked(&rw, 1).cast<Tensor>().is_read_only());

  // A writable Tensor object passed read-only arrives as a read-only view of the same memory;
  // the caller's object is unchanged.
  Tensor t = Tensor::FromEnvAlloc({3}, kffi::dtypes::float32, kCPU);
  KFFIAny flagged = TensorObjectArg(t, kKFFITensorFlagReadOnly);
  Tensor got = own.CallPacked(&flagged, 1).cast<Tensor>();
  EXPECT_TRUE(got.is_read_only());
  EXPECT_FALSE(got.same_as(t));
  EXPECT_EQ(got.data_ptr(), t.data_ptr());
  EXPECT_EQ(got.shape(), t.shape());
  EXPECT_FALSE(t.is_read_only());
  // Without the flag the object itself arrives.
  KFFIAny plain = TensorObjectArg(t, 0);
  EXPECT_TRUE(own.CallPacked(&plain, 1).cast<Tensor>().same_as(t));
  // A read-only object passed read-only needs no view.
  int deletes = 0;
  Tensor imported = ImportReadOnly(&deletes);
  KFFIAny both = TensorObjectArg(imported, kKFFITensorFlagReadOnly);
  EXPECT_TRUE(own.CallPacked(&both, 1).cast<Tensor>().same_as(imported));
}

TEST(ReadOnly, StoredValuesNeverKeepArgumentFlags) {
  Tensor t = Tensor::FromEnvAlloc({2}, kffi::dtypes::float32, kCPU);
  KFFIAny flagged = TensorObjectArg(t, kKFFITensorFlagReadOnly);
  Any stored(reinterpret_cast<const kffi::AnyView&>(flagged));
  const KFFIAny* raw = kffi::details::AnyUnsafe::Raw(stored);
  EXPECT_EQ(raw->zero_padding, 0u);
  EXPECT_TRUE(stored.cast<Tensor>().is_read_only());
  // Through the C API too, for a DLTensor* argument.
  Raw r;
  KFFIAny view = DLTensorArg(&r.t, kKFFITensorFlagReadOnly);
  KFFIAny owned;
  ASSERT_EQ(KFFIAnyViewToOwnedAny(&view, &owned), 0);
  EXPECT_EQ(owned.type_index, kKFFITensor);
  EXPECT_EQ(owned.zero_padding, 0u);
  uint64_t flags = 0;
  ASSERT_EQ(KFFITensorGetFlags(owned.v_obj, &flags), 0);
  EXPECT_EQ(flags, DLPACK_FLAG_BITMASK_READ_ONLY);
  // Exported again, the flag travels with it.
  DLManagedTensorVersioned* out = nullptr;
  ASSERT_EQ(KFFITensorToDLPackVersioned(owned.v_obj, &out), 0);
  EXPECT_EQ(out->flags, DLPACK_FLAG_BITMASK_READ_ONLY);
  out->deleter(out);
  KFFIObjectDecRef(owned.v_obj);
  // Any non-tensor object with stray padding is stored with the padding cleared.
  kffi::String s("a string longer than seven bytes");
  KFFIAny str = s.raw();
  str.zero_padding = 5;
  ASSERT_EQ(KFFIAnyViewToOwnedAny(&str, &owned), 0);
  EXPECT_EQ(owned.zero_padding, 0u);
  KFFIObjectDecRef(owned.v_obj);
}

TEST(ReadOnly, AsReadOnlyAndGetFlags) {
  Tensor t = Tensor::FromEnvAlloc({2, 3}, kffi::dtypes::float32, kCPU);
  Tensor ro = t.as_read_only();
  EXPECT_TRUE(ro.is_read_only());
  EXPECT_EQ(ro.data_ptr(), t.data_ptr());
  EXPECT_EQ(ro.strides().ToVector(), t.strides().ToVector());
  EXPECT_TRUE(ro.as_read_only().same_as(ro));
  uint64_t flags = 7;
  KFFIObjectHandle th = kffi::details::ObjectUnsafe::GetHandle(kffi::details::ObjectRefData(t));
  ASSERT_EQ(KFFITensorGetFlags(th, &flags), 0);
  EXPECT_EQ(flags, 0u);
  int deletes = 0;
  {
    DLManagedTensorVersioned* in = ProducedV1::Make({4}, {}, &deletes);
    in->flags = DLPACK_FLAG_BITMASK_IS_COPIED;
    Tensor copied = Tensor::FromDLPackVersioned(in);
    ASSERT_EQ(
        KFFITensorGetFlags(
            kffi::details::ObjectUnsafe::GetHandle(kffi::details::ObjectRefData(copied)), &flags),
        0);
    EXPECT_EQ(flags, DLPACK_FLAG_BITMASK_IS_COPIED);
  }
  EXPECT_EQ(deletes, 1);
  Function f = Function::FromTyped([](int x) { return x; });
  KFFIObjectHandle fh = kffi::details::ObjectUnsafe::GetHandle(kffi::details::ObjectRefData(f));
  EXPECT_EQ(KFFITensorGetFlags(fh, &flags), -1);
  KFFIObjectHandle err = nullptr;
  KFFIErrorMoveFromRaised(&err);
  ASSERT_NE(err, nullptr);
  kffi::Error e(kffi::details::ObjectUnsafe::FromOwnedHandle<kffi::Object>(err));
  EXPECT_EQ(e.kind(), "TypeError");
  EXPECT_EQ(e.message(), "KFFITensorGetFlags: expected a Tensor, got ffi.Function");
  EXPECT_EQ(KFFITensorGetFlags(th, nullptr), -1);
  KFFIErrorMoveFromRaised(&err);
  EXPECT_NE(err, nullptr);
  KFFIObjectDecRef(err);
}

// ---- read-only by type ----------------------------------------------------------------------

// y[i] = value: y may be written.
void Fill(TensorView y, double value) {
  for (int64_t i = 0; i < y.numel(); ++i) y.data<float>()[i] = static_cast<float>(value);
}
void FillC(DLTensor* y, double value) {
  float* out = static_cast<float*>(y->data);
  for (int64_t i = 0; i < y->shape[0]; ++i) out[i] = static_cast<float>(value);
}

// Writes y, bias and c_out; only reads x, c_in and maybe_in.
void Kinds(TensorView y, ConstTensorView x, kffi::Optional<TensorView> bias, DLTensor* c_out,
           const DLTensor* c_in, kffi::Optional<ConstTensorView> maybe_in) {
  const float v = x.data<float>()[0] + static_cast<const float*>(c_in->data)[0] +
                  (maybe_in.has_value() ? maybe_in->data<float>()[0] : 0.0f);
  y.data<float>()[0] = v;
  if (bias.has_value()) bias->data<float>()[0] = v;
  static_cast<float*>(c_out->data)[0] = v;
}

}  // namespace

KFFI_EXPORT_DOC(test_readonly_fill, Fill, "", "y, value");
KFFI_EXPORT_DOC(test_readonly_fill_c, FillC, "", "y, value");
KFFI_EXPORT_DOC(test_readonly_kinds, Kinds, "", "y, x, bias, c_out, c_in, maybe_in");
// A `mut` contract tensor may reach an owned kffi::Tensor (which takes any memory): the export
// loads, and the contract refuses read-only memory before the function runs. (A ConstTensorView
// under `mut` fails the load: ContractMut.AWritableCppParameterNeedsAMutTensor.)
KFFI_EXPORT_CONTRACT(
    test_readonly_mut_reader, [](kffi::Tensor y) { return y.ndim() == 1; },
    "y: Tensor([n], float32, mut)");

namespace {

using kffi::Module;

/// Calls an export's symbol with raw arguments: "no error", or the raised "Kind: message".
std::string CallRaw(int (*fn)(void*, const KFFIAny*, int32_t, KFFIAny*), const KFFIAny* args,
                    int32_t num_args) {
  KFFIAny result;
  kffi::details::SetNone(&result);
  if (fn(nullptr, args, num_args, &result) == 0) {
    Any owned = kffi::details::AnyUnsafe::FromOwnedRaw(result);  // released here
    return "no error";
  }
  return ErrorText([] { kffi::details::ThrowRaisedError(-1); });
}

KFFIAny FloatArg(double v) {
  KFFIAny a;
  kffi::details::SetPOD(&a, kKFFIFloat);
  a.v_float64 = v;
  return a;
}

TEST(ReadOnlyByType, WritableParametersRefuseReadOnlyDLTensors) {
  struct Case {
    int (*fn)(void*, const KFFIAny*, int32_t, KFFIAny*);
    const char* sig;
  };
  for (const Case& c : {Case{&__kffi_test_readonly_fill,
                             "test_readonly_fill(y: Tensor(mut), value: float) -> None"},
                        Case{&__kffi_test_readonly_fill_c,
                             "test_readonly_fill_c(y: Tensor(mut), value: float) -> None"}}) {
    SCOPED_TRACE(c.sig);
    Raw y;
    KFFIAny args[2] = {DLTensorArg(&y.t, kKFFITensorFlagReadOnly), FloatArg(5.0)};
    EXPECT_EQ(CallRaw(c.fn, args, 2), ReadOnlyRefused("y", 0, c.sig));
    EXPECT_EQ(y.data, std::vector<float>(4, 1.0f));  // nothing written
    args[0].tensor_flags = 0;
    EXPECT_EQ(CallRaw(c.fn, args, 2), "no error");
    EXPECT_EQ(y.data, std::vector<float>(4, 5.0f));
  }
}

TEST(ReadOnlyByType, WritableParametersRefuseReadOnlyTensorObjects) {
  int deletes = 0;
  {
    Tensor imported = ImportReadOnly(&deletes);  // the object itself is read-only
    Tensor writable = Tensor::FromEnvAlloc({4}, kffi::dtypes::float32, kCPU);
    for (int i = 0; i < 4; ++i) writable.data<float>()[i] = 1.0f;
    const float* imported_data = imported.const_data<float>();
    const std::string fill = "test_readonly_fill(y: Tensor(mut), value: float) -> None";
    const std::string fill_c = "test_readonly_fill_c(y: Tensor(mut), value: float) -> None";
    // A read-only object, passed without flags (a producer that sends none) or by C++ (flagged).
    KFFIAny args[2] = {TensorObjectArg(imported, 0), FloatArg(5.0)};
    EXPECT_EQ(CallRaw(&__kffi_test_readonly_fill, args, 2), ReadOnlyRefused("y", 0, fill));
    EXPECT_EQ(CallRaw(&__kffi_test_readonly_fill_c, args, 2), ReadOnlyRefused("y", 0, fill_c));
    EXPECT_EQ(ErrorText([&] {
                Module::InvokeExternC(reinterpret_cast<void*>(&__kffi_test_readonly_fill), imported,
                                      5.0);
              }),
              ReadOnlyRefused("y", 0, fill));
    EXPECT_EQ(imported_data[0], 1.0f);
    // A writable object passed read-only.
    args[0] = TensorObjectArg(writable, kKFFITensorFlagReadOnly);
    EXPECT_EQ(CallRaw(&__kffi_test_readonly_fill, args, 2), ReadOnlyRefused("y", 0, fill));
    EXPECT_EQ(CallRaw(&__kffi_test_readonly_fill_c, args, 2), ReadOnlyRefused("y", 0, fill_c));
    Tensor read_only = writable.as_read_only();
    EXPECT_EQ(ErrorText([&] {
                Module::InvokeExternC(reinterpret_cast<void*>(&__kffi_test_readonly_fill_c),
                                      read_only, 5.0);
              }),
              ReadOnlyRefused("y", 0, fill_c));
    EXPECT_EQ(writable.const_data<float>()[0], 1.0f);
    // The same object, writable: written.
    args[0] = TensorObjectArg(writable, 0);
    EXPECT_EQ(CallRaw(&__kffi_test_readonly_fill_c, args, 2), "no error");
    EXPECT_EQ(writable.const_data<float>()[3], 5.0f);
  }
  EXPECT_EQ(deletes, 1);
}

TEST(ReadOnlyByType, ReadOnlyParametersTakeReadOnlyMemoryWithoutACopy) {
  Function view_ptr = Function::FromTyped(
      [](ConstTensorView x) {
        EXPECT_TRUE(x.is_read_only());
        return static_cast<void*>(const_cast<DLTensor*>(x.GetDLTensorPtr()));
      },
      "view_ptr");
  Function c_ptr = Function::FromTyped(
      [](const DLTensor* x) { return static_cast<void*>(const_cast<DLTensor*>(x)); }, "c_ptr");
  Raw raw;
  KFFIAny ro = DLTensorArg(&raw.t, kKFFITensorFlagReadOnly);
  EXPECT_EQ(view_ptr.CallPacked(&ro, 1).cast<void*>(), static_cast<void*>(&raw.t));
  EXPECT_EQ(c_ptr.CallPacked(&ro, 1).cast<void*>(), static_cast<void*>(&raw.t));
  int deletes = 0;
  {
    Tensor imported = ImportReadOnly(&deletes);
    void* cell = const_cast<DLTensor*>(imported.GetDLTensorPtr());
    KFFIAny unflagged = TensorObjectArg(imported, 0);
    EXPECT_EQ(view_ptr.CallPacked(&unflagged, 1).cast<void*>(), cell);
    EXPECT_EQ(c_ptr.CallPacked(&unflagged, 1).cast<void*>(), cell);
    EXPECT_EQ(view_ptr(imported).cast<void*>(), cell);
    EXPECT_EQ(c_ptr(imported).cast<void*>(), cell);
    EXPECT_EQ(imported.use_count(), 1u);  // borrowed, not kept
  }
  EXPECT_EQ(deletes, 1);
  // A writable argument is taken as it is, and reads as writable.
  Function writable = Function::FromTyped([](ConstTensorView x) { return x.is_writable(); }, "w");
  KFFIAny rw = DLTensorArg(&raw.t, 0);
  EXPECT_TRUE(writable.CallPacked(&rw, 1).cast<bool>());
}

TEST(ReadOnlyByType, OwnedTensorParametersTakeReadOnlyMemoryAsReadOnlyTensors) {
  Function own = Function::FromTyped(
      [](Tensor x) {
        EXPECT_TRUE(x.is_read_only());
        EXPECT_EQ(CatchError([&] { x.data<float>(); }).kind(), "ValueError");
        return static_cast<double>(x.const_data<float>()[0]);
      },
      "own");
  Raw raw;
  raw.data[0] = 3.0f;
  KFFIAny ro = DLTensorArg(&raw.t, kKFFITensorFlagReadOnly);
  EXPECT_EQ(own.CallPacked(&ro, 1).cast<double>(), 3.0);
  int deletes = 0;
  Tensor imported = ImportReadOnly(&deletes);
  EXPECT_EQ(own(imported).cast<double>(), 1.0);
}

TEST(ReadOnlyByType, AMutContractTensorMayBeAnOwnedTensor) {
  Raw y;
  KFFIAny arg = DLTensorArg(&y.t, 0);
  KFFIAny result;
  kffi::details::SetNone(&result);
  ASSERT_EQ(__kffi_test_readonly_mut_reader(nullptr, &arg, 1, &result), 0);
  EXPECT_EQ(result.type_index, kKFFIBool);
  EXPECT_EQ(result.v_int64, 1);
  arg.tensor_flags = kKFFITensorFlagReadOnly;
  EXPECT_EQ(CallRaw(&__kffi_test_readonly_mut_reader, &arg, 1),
            "ValueError: y: expected a writable tensor (the parameter is declared `mut`), got a "
            "read-only tensor (argument #0 of `test_readonly_mut_reader(y: Tensor([n], float32, "
            "mut))`)");
}

TEST(ReadOnlyByType, MetadataAndSignatureSayWhichParametersMayBeWritten) {
  EXPECT_EQ(Module::InvokeExternC(reinterpret_cast<void*>(&__kffi__meta_test_readonly_kinds))
                .cast<std::string>(),
            R"({"name":"test_readonly_kinds","params":[)"
            R"({"name":"y","type":"Tensor","mutable":true},)"
            R"({"name":"x","type":"Tensor"},)"
            R"({"name":"bias","type":"Optional<Tensor>","default":null,"mutable":true},)"
            R"({"name":"c_out","type":"Tensor","mutable":true},)"
            R"({"name":"c_in","type":"Tensor"},)"
            R"({"name":"maybe_in","type":"Optional<Tensor>","default":null}],)"
            R"("return":"None","doc":""})");
  const std::string sig =
      "test_readonly_kinds(y: Tensor(mut), x: Tensor, bias: Optional<Tensor(mut)>, "
      "c_out: Tensor(mut), c_in: Tensor, maybe_in: Optional<Tensor>) -> None";
  Raw y, x, bias, c_out, c_in, maybe_in;
  auto call = [&](uint32_t x_flags, uint32_t bias_flags, uint32_t in_flags) {
    KFFIAny args[6] = {DLTensorArg(&y.t, 0),
                       DLTensorArg(&x.t, x_flags),
                       DLTensorArg(&bias.t, bias_flags),
                       DLTensorArg(&c_out.t, 0),
                       DLTensorArg(&c_in.t, in_flags),
                       DLTensorArg(&maybe_in.t, in_flags)};
    return CallRaw(&__kffi_test_readonly_kinds, args, 6);
  };
  // Every read-only parameter takes read-only memory; the Optional writable one refuses it.
  EXPECT_EQ(call(kKFFITensorFlagReadOnly, 0, kKFFITensorFlagReadOnly), "no error");
  EXPECT_EQ(y.data[0], 3.0f);
  EXPECT_EQ(bias.data[0], 3.0f);
  EXPECT_EQ(c_out.data[0], 3.0f);
  bias.data[0] = 1.0f;
  EXPECT_EQ(call(0, kKFFITensorFlagReadOnly, 0), ReadOnlyRefused("bias", 2, sig));
  EXPECT_EQ(bias.data[0], 1.0f);
  // A wrong type names the signature with its writable parameters.
  KFFIAny args[6] = {DLTensorArg(&y.t, 0), FloatArg(1.0)};
  for (int i = 2; i < 6; ++i) kffi::details::SetNone(&args[i]);
  EXPECT_EQ(CallRaw(&__kffi_test_readonly_kinds, args, 6),
            "TypeError: x: expected Tensor, got float (argument #1 of `" + sig + "`)");
}

}  // namespace
