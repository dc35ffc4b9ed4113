// tests/cpp/test_readonly.cc: read-only tensors: the argument flag (KFFIAny.tensor_flags) and the
// imported DLPack flag reach ConstTensorView and Tensor parameters, a TensorView parameter (the
// function may write it) refuses them, and no conversion drops the flag.
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
         ": expected a writable tensor (the function may write it), got a read-only one (a "
         "read-only array, bytes or a JAX array: pass a writable copy) (argument #" +
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

}  // namespace
