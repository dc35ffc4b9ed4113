// tests/cpp/core/test_tensor.cc: Tensor, TensorView, DLPack exchange, allocation and dtypes.
// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>
#include <kffi/env.h>
#include <kffi/function.h>
#include <kffi/tensor.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include "tensor_producer.h"
#include "test_util.h"

namespace {

using kffi::ConstTensorView;
using kffi::Tensor;
using kffi::TensorView;
using kffi_test::kCPU;
using kffi_test::ProducedV0;
using kffi_test::ProducedV1;

// An allocator that aligns data to kAlign bytes and counts its calls through extra arguments.
struct AlignedAlloc {
  static constexpr size_t kAlign = 256;
  int* frees;
  void AllocData(DLTensor* t, int* allocs) {
    size_t bytes = static_cast<size_t>(kffi::GetDataSize(*t));
    t->data = std::aligned_alloc(kAlign, (bytes + kAlign - 1) / kAlign * kAlign + kAlign);
    ++*allocs;
  }
  void FreeData(DLTensor* t) {
    std::free(t->data);
    ++*frees;
  }
};

Tensor MakeCPU(std::vector<int64_t> shape, int* frees) {
  int allocs = 0;
  return Tensor::FromNDAlloc(AlignedAlloc{frees}, shape, kffi::dtypes::float32, kCPU, &allocs);
}

TEST(Tensor, CellIsTheDLTensorAfterTheHeader) {
  int frees = 0;
  Tensor t = MakeCPU({2, 3}, &frees);
  KFFIObjectHandle h = const_cast<kffi::TensorObj*>(t.get());
  EXPECT_EQ(KFFITensorGetDLTensorPtr(h), t.GetDLTensorPtr());
  EXPECT_EQ(t->type_index(), kKFFITensor);
  EXPECT_EQ(t->GetTypeKey(), "ffi.Tensor");
  EXPECT_EQ(sizeof(TensorView), sizeof(void*));
}

TEST(Tensor, DLPackRoundTripCallsDeleterOnce) {
  int deletes = 0;
  DLManagedTensor* in = ProducedV0::Make({2, 3}, {}, &deletes);
  void* data = in->dl_tensor.data;
  DLManagedTensor* out = nullptr;
  {
    Tensor t = Tensor::FromDLPack(in);
    EXPECT_EQ(t.data_ptr(), data);
    EXPECT_EQ(t.shape(), kffi::IntArrayView({2, 3}));
    EXPECT_EQ(t.strides().ToVector(), (std::vector<int64_t>{3, 1}));  // filled in by the import
    EXPECT_FALSE(t.is_read_only());
    out = t.ToDLPack();
    EXPECT_EQ(t.use_count(), 2u);  // the export holds a reference
  }
  EXPECT_EQ(deletes, 0);  // still alive through the consumer's copy
  EXPECT_EQ(out->dl_tensor.data, data);
  EXPECT_EQ(out->dl_tensor.shape[1], 3);
  out->deleter(out);
  EXPECT_EQ(deletes, 1);
}

TEST(Tensor, DLPackVersionedRoundTripKeepsReadOnly) {
  int deletes = 0;
  DLManagedTensorVersioned* in = ProducedV1::Make({4}, {1}, &deletes);
  in->flags = DLPACK_FLAG_BITMASK_READ_ONLY | DLPACK_FLAG_BITMASK_IS_COPIED;
  Tensor t = Tensor::FromDLPackVersioned(in);
  EXPECT_TRUE(t.is_read_only());
  EXPECT_TRUE(t.is_copied());
  DLManagedTensorVersioned* out = t.ToDLPackVersioned();
  EXPECT_EQ(out->version.major, 1u);
  EXPECT_EQ(out->flags, DLPACK_FLAG_BITMASK_READ_ONLY);  // shared now, so not "copied"
  // Importing our own export works and releases through the chain exactly once.
  Tensor again = Tensor::FromDLPackVersioned(out);
  EXPECT_EQ(again.data_ptr(), t.data_ptr());
  EXPECT_TRUE(again.is_read_only());
  t = Tensor();
  EXPECT_EQ(deletes, 0);
  again = Tensor();
  EXPECT_EQ(deletes, 1);
}

TEST(Tensor, DLPackImportErrorsStillCallDeleterOnce) {
  int deletes = 0;
  DLManagedTensorVersioned* in = ProducedV1::Make({4, 4}, {1, 4}, &deletes);
  kffi::Error e = CatchError([&] { Tensor::FromDLPackVersioned(in, 0, true); });
  EXPECT_EQ(e.kind(), "ValueError");
  EXPECT_NE(e.message().find("not contiguous"), std::string::npos) << e.message();
  EXPECT_EQ(deletes, 1);

  DLManagedTensor* odd = ProducedV0::Make({3}, {}, &deletes);
  odd->dl_tensor.byte_offset = 4;
  e = CatchError([&] { Tensor::FromDLPack(odd, 16); });
  EXPECT_EQ(e.kind(), "ValueError");
  EXPECT_NE(e.message().find("aligned to 16 bytes"), std::string::npos) << e.message();
  EXPECT_EQ(deletes, 2);

  DLManagedTensorVersioned* future = ProducedV1::Make({3}, {}, &deletes);
  future->version.major = 2;
  e = CatchError([&] { Tensor::FromDLPackVersioned(future); });
  EXPECT_NE(e.message().find("Unsupported DLPack major version 2"), std::string::npos);
  EXPECT_EQ(deletes, 3);

  e = CatchError([] { Tensor::FromDLPack(nullptr); });
  EXPECT_EQ(e.kind(), "ValueError");
  EXPECT_EQ(KFFITensorFromDLPack(ProducedV0::Make({1}, {}, &deletes), 0, 0, nullptr), -1);
  KFFIObjectHandle err = nullptr;
  KFFIErrorMoveFromRaised(&err);
  EXPECT_NE(err, nullptr);
  KFFIObjectDecRef(err);
  EXPECT_EQ(deletes, 4);
}

TEST(Tensor, ToDLPackRejectsNonTensors) {
  kffi::Function f = kffi::Function::FromTyped([](int x) { return x; });
  DLManagedTensor* out = nullptr;
  KFFIObjectHandle h = const_cast<kffi::FunctionObj*>(f.get());
  EXPECT_EQ(KFFITensorToDLPack(h, &out), -1);
  KFFIObjectHandle err = nullptr;
  KFFIErrorMoveFromRaised(&err);
  ASSERT_NE(err, nullptr);
  kffi::Error e(kffi::details::ObjectUnsafe::FromOwnedHandle<kffi::Object>(err));
  EXPECT_EQ(e.kind(), "TypeError");
  EXPECT_NE(e.message().find("expected a Tensor, got ffi.Function"), std::string::npos);
}

TEST(Tensor, NegativeIndicesAndIndexError) {
  int frees = 0;
  Tensor t = MakeCPU({2, 3, 4}, &frees);
  EXPECT_EQ(t.ndim(), 3);
  EXPECT_EQ(t.dim(), 3);
  EXPECT_EQ(t.size(-1), 4);
  EXPECT_EQ(t.size(-3), 2);
  EXPECT_EQ(t.stride(-1), 1);
  EXPECT_EQ(t.stride(0), 12);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.sizes()[1], 3);
  kffi::Error e = CatchError([&] { t.size(3); });
  EXPECT_EQ(e.kind(), "IndexError");
  EXPECT_EQ(e.message(), "Dimension out of range (expected to be in range of [-3, 2], but got 3)");
  EXPECT_EQ(CatchError([&] { t.stride(-4); }).kind(), "IndexError");

  Tensor scalar = MakeCPU({}, &frees);
  EXPECT_EQ(scalar.numel(), 1);
  EXPECT_TRUE(scalar.shape().empty());
  EXPECT_EQ(CatchError([&] { scalar.size(0); }).kind(), "IndexError");
}

TEST(Tensor, ContiguityWithAndWithoutStrides) {
  std::vector<int64_t> shape{4, 4};
  std::vector<int64_t> row{4, 1}, col{1, 4}, bcast{0, 1};
  float buf[16];
  DLTensor t{buf, kCPU, 2, kffi::dtypes::float32, shape.data(), nullptr, 0};
  TensorView v(&t);
  EXPECT_TRUE(v.is_contiguous());
  kffi::StrideArray computed = v.strides();
  EXPECT_TRUE(computed.computed());
  EXPECT_EQ(computed.ToVector(), row);
  kffi::StrideArray copy = computed;  // owned values survive the copy
  EXPECT_EQ(copy[0], 4);
  EXPECT_EQ(v.stride(-2), 4);
  t.strides = row.data();
  EXPECT_TRUE(v.is_contiguous());
  EXPECT_FALSE(v.strides().computed());
  t.strides = col.data();
  EXPECT_FALSE(v.is_contiguous());
  EXPECT_FALSE(v.IsContiguous());
  t.strides = bcast.data();
  EXPECT_FALSE(v.is_contiguous());
  // Size-1 dimensions may have any stride; tensors without elements are contiguous.
  std::vector<int64_t> shape1{1, 4}, odd{99, 1};
  DLTensor u{buf, kCPU, 2, kffi::dtypes::float32, shape1.data(), odd.data(), 0};
  EXPECT_TRUE(TensorView(&u).is_contiguous());
  std::vector<int64_t> empty{0, 4};
  u.shape = empty.data();
  u.strides = col.data();
  EXPECT_TRUE(TensorView(&u).is_contiguous());
  EXPECT_EQ(TensorView(&u).numel(), 0);
}

TEST(Tensor, FromNDAllocAlignsAndFreesOnce) {
  int frees = 0, allocs = 0;
  {
    Tensor t =
        Tensor::FromNDAlloc(AlignedAlloc{&frees}, {3, 5}, kffi::dtypes::float16, kCPU, &allocs);
    EXPECT_EQ(allocs, 1);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % AlignedAlloc::kAlign, 0u);
    EXPECT_EQ(t.dtype(), kffi::dtypes::float16);
    EXPECT_EQ(t.strides().ToVector(), (std::vector<int64_t>{5, 1}));
    EXPECT_EQ(kffi::GetDataSize(*t.GetDLTensorPtr()), 30);
    Tensor copy = t;
    t = Tensor();
    EXPECT_EQ(frees, 0);
  }
  EXPECT_EQ(frees, 1);
}

TEST(Tensor, FromNDAllocFailureDoesNotFree) {
  struct FailingAlloc {
    int* frees;
    void AllocData(DLTensor*) { KFFI_THROW(MemoryError) << "no memory for you"; }
    void FreeData(DLTensor*) { ++*frees; }
  };
  int frees = 0;
  kffi::Error e =
      CatchError([&] { Tensor::FromNDAlloc(FailingAlloc{&frees}, {2}, kffi::dtypes::int8, kCPU); });
  EXPECT_EQ(e.kind(), "MemoryError");
  EXPECT_EQ(frees, 0);
  e = CatchError([&] {
    Tensor::FromNDAlloc(FailingAlloc{&frees}, {2, -1}, kffi::dtypes::int8, kCPU);
  });
  EXPECT_EQ(e.kind(), "ValueError");
  EXPECT_NE(e.message().find("negative size in shape [2, -1]"), std::string::npos);
}

TEST(Tensor, FromNDAllocStridedColumnMajor) {
  int frees = 0, allocs = 0;
  Tensor t = Tensor::FromNDAllocStrided(AlignedAlloc{&frees}, {3, 4}, {1, 3}, kffi::dtypes::float32,
                                        kCPU, &allocs);
  EXPECT_EQ(t.stride(0), 1);
  EXPECT_EQ(t.stride(1), 3);
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(kffi::GetDataSize(*t.GetDLTensorPtr()), 48);
  kffi::Error e = CatchError([&] {
    Tensor::FromNDAllocStrided(AlignedAlloc{&frees}, {3, 4}, {1}, kffi::dtypes::float32, kCPU,
                               &allocs);
  });
  EXPECT_EQ(e.kind(), "ValueError");
  EXPECT_NE(e.message().find("shape [3, 4] has 2 dimensions but strides [1] has 1"),
            std::string::npos)
      << e.message();
  e = CatchError([&] {
    Tensor::FromNDAllocStrided(AlignedAlloc{&frees}, {3}, {-1}, kffi::dtypes::float32, kCPU,
                               &allocs);
  });
  EXPECT_NE(e.message().find("negative stride"), std::string::npos);
  EXPECT_EQ(allocs, 1);
}

TEST(Tensor, AsStridedViewKeepsSourceAlive) {
  int frees = 0;
  Tensor base = MakeCPU({4, 4}, &frees);
  void* data = base.data_ptr();
  Tensor transposed = base.as_strided({4, 4}, {1, 4});
  Tensor row = base.as_strided({4}, {1}, 4 * sizeof(float));
  base = Tensor();
  EXPECT_EQ(frees, 0);
  EXPECT_EQ(transposed.data_ptr(), data);
  EXPECT_FALSE(transposed.is_contiguous());
  EXPECT_EQ(row.byte_offset(), 16u);
  EXPECT_EQ(row.shape(), kffi::IntArrayView({4}));
  Tensor view_of_view = row.as_strided({2}, {2});  // keeps row's byte_offset
  EXPECT_EQ(view_of_view.byte_offset(), 16u);
  transposed = Tensor();
  row = Tensor();
  EXPECT_EQ(frees, 0);
  view_of_view = Tensor();
  EXPECT_EQ(frees, 1);
}

TEST(Tensor, AsStridedCarriesReadOnly) {
  int deletes = 0;
  DLManagedTensorVersioned* in = ProducedV1::Make({4}, {}, &deletes);
  in->flags = DLPACK_FLAG_BITMASK_READ_ONLY;
  Tensor t = Tensor::FromDLPackVersioned(in);
  EXPECT_TRUE(t.as_strided({2}, {2}).is_read_only());
  EXPECT_EQ(CatchError([] { Tensor().as_strided({1}, {1}, 0); }).kind(), "ValueError");
}

// A framework-like allocator: records requests; fails with MemoryError for huge ones.
int g_env_allocs = 0;
int g_env_frees = 0;
int EnvAlloc(DLTensor* proto, DLManagedTensorVersioned** out, void* ctx,
             void (*set_error)(void*, const char*, const char*)) {
  int64_t n = 1;
  for (int32_t i = 0; i < proto->ndim; ++i) n *= proto->shape[i];
  if (n > (int64_t{1} << 40)) {
    set_error(ctx, "MemoryError", "framework allocator: out of memory");
    return -1;
  }
  ++g_env_allocs;
  std::vector<int64_t> shape(proto->shape, proto->shape + proto->ndim);
  DLManagedTensorVersioned* m = ProducedV1::Make(shape, {}, &g_env_frees);
  m->dl_tensor.dtype = proto->dtype;
  m->dl_tensor.device = proto->device;
  *out = m;
  return 0;
}
int SilentFailAlloc(DLTensor*, DLManagedTensorVersioned**, void*,
                    void (*)(void*, const char*, const char*)) {
  return -1;
}

TEST(Tensor, FromEnvAllocUsesTheEnvironmentAllocator) {
  g_env_allocs = g_env_frees = 0;
  {
    kffi::env::TensorAllocatorScope scope(&EnvAlloc);
    Tensor t = Tensor::FromEnvAlloc({2, 8}, kffi::dtypes::float32, DLDevice{kDLCUDA, 1});
    EXPECT_EQ(g_env_allocs, 1);
    EXPECT_EQ(t.device().device_type, kDLCUDA);
    EXPECT_EQ(t.device().device_id, 1);
    EXPECT_EQ(t.shape(), kffi::IntArrayView({2, 8}));
    kffi::Error e =
        CatchError([] { Tensor::FromEnvAlloc({int64_t{1} << 41}, kffi::dtypes::int8, kCPU); });
    EXPECT_EQ(e.kind(), "MemoryError");
    EXPECT_EQ(e.message(), "framework allocator: out of memory");
  }
  EXPECT_EQ(g_env_frees, 1);
  kffi::Error e =
      CatchError([] { Tensor::FromEnvAlloc(&SilentFailAlloc, {2}, kffi::dtypes::int8, kCPU); });
  EXPECT_EQ(e.kind(), "RuntimeError");
  EXPECT_NE(e.message().find("without reporting an error"), std::string::npos);
}

TEST(Tensor, FromEnvAllocFallsBackToAlignedHostMemory) {
  ASSERT_EQ(KFFIEnvGetTensorAllocator(), nullptr);
  Tensor t = Tensor::FromEnvAlloc({3, 7}, kffi::dtypes::uint8, kCPU);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % 64, 0u);
  EXPECT_TRUE(t.is_contiguous());
  static_cast<uint8_t*>(t.data_ptr())[20] = 7;  // the memory is real (ASan checks the bounds)
  Tensor empty = Tensor::FromEnvAlloc({0}, kffi::dtypes::float32, kCPU);
  EXPECT_NE(empty.data_ptr(), nullptr);
  kffi::Error e = CatchError([] {
    Tensor::FromEnvAlloc({4}, kffi::dtypes::float32, DLDevice{kDLCUDA, 0});
  });
  EXPECT_EQ(e.kind(), "RuntimeError");
  EXPECT_NE(e.message().find("no environment allocator is set for device cuda:0"),
            std::string::npos)
      << e.message();
}

TEST(Tensor, TypedFunctionTakesViewsFromDLTensorAndTensor) {
  kffi::Function numel = kffi::Function::FromTyped(
      [](ConstTensorView x, int64_t scale) { return x.numel() * scale; }, "numel");
  int frees = 0;
  Tensor t = MakeCPU({2, 5}, &frees);
  std::vector<int64_t> shape{3, 3};
  DLTensor raw{nullptr, kCPU, 2, kffi::dtypes::float32, shape.data(), nullptr, 0};
  EXPECT_EQ(numel(t, 2).cast<int64_t>(), 20);
  EXPECT_EQ(numel(TensorView(&raw), 1).cast<int64_t>(), 9);
  EXPECT_EQ(numel(&raw, 1).cast<int64_t>(), 9);  // a plain DLTensor* argument too
  EXPECT_EQ(t.use_count(), 1u);                  // views took no reference

  kffi::Error e = CatchError([&] { numel(3, 1); });
  EXPECT_EQ(e.kind(), "TypeError");
  EXPECT_EQ(e.message(),
            "arg0: expected Tensor, got int (argument #0 of `numel(arg0: Tensor, arg1: int) -> "
            "int`)");
}

// data<T>() and const_data<T>() point at the first element: DLTensor.data + byte_offset (a DLPack
// producer may hand a view into a larger buffer this way); data_ptr() stays DLTensor.data.
TEST(Tensor, DataAccessorsAddTheByteOffset) {
  float buf[4] = {10, 11, 12, 13};
  std::vector<int64_t> shape{3};
  DLTensor raw{buf, kCPU, 1, kffi::dtypes::float32, shape.data(), nullptr, sizeof(float)};
  TensorView v(&raw);
  EXPECT_EQ(v.data_ptr(), static_cast<void*>(buf));
  EXPECT_EQ(v.data<float>()[0], 11.0f);
  EXPECT_EQ(v.const_data<float>()[0], 11.0f);
  EXPECT_EQ(v.data(), static_cast<void*>(buf + 1));
  v.data<float>()[2] = 42.0f;
  EXPECT_EQ(buf[3], 42.0f);
  ConstTensorView c(&raw);
  static_assert(std::is_same_v<decltype(c.data<float>()), const float*>);
  static_assert(std::is_same_v<decltype(v.data<float>()), float*>);
  EXPECT_EQ(c.data<float>()[0], 11.0f);
  EXPECT_EQ(static_cast<const void*>(c.const_data<float>()), static_cast<const void*>(buf + 1));
  EXPECT_EQ(ConstTensorView(v).data<float>(), buf + 1);

  // Through a typed call: element 0 of the argument is buf[1].
  kffi::Function first = kffi::Function::FromTyped(
      [](ConstTensorView x) { return static_cast<double>(x.data<float>()[0]); }, "first");
  EXPECT_EQ(first(&raw).cast<double>(), 11.0);
  kffi::Function fill = kffi::Function::FromTyped(
      [](TensorView y, double value) {
        for (int64_t i = 0; i < y.numel(); ++i) y.data<float>()[i] = static_cast<float>(value);
      },
      "fill");
  fill(&raw, 7.0);
  EXPECT_EQ(buf[0], 10.0f);  // before the first element: untouched
  EXPECT_EQ(buf[1], 7.0f);
  EXPECT_EQ(buf[3], 7.0f);

  // An owned Tensor with a byte_offset (a view of another).
  int frees = 0;
  Tensor base = MakeCPU({4}, &frees);
  for (int i = 0; i < 4; ++i) base.data<float>()[i] = static_cast<float>(i);
  Tensor tail = base.as_strided({3}, {1}, sizeof(float));
  EXPECT_EQ(tail.data_ptr(), base.data_ptr());
  EXPECT_EQ(tail.data<float>()[0], 1.0f);
  EXPECT_EQ(tail.const_data<float>()[2], 3.0f);
  EXPECT_EQ(TensorView(tail).data<float>()[0], 1.0f);
}

TEST(Tensor, WritableDataOfReadOnlyMemoryThrows) {
  float buf[2] = {1, 2};
  std::vector<int64_t> shape{2};
  DLTensor raw{buf, kCPU, 1, kffi::dtypes::float32, shape.data(), nullptr, 0};
  const std::string message =
      "Cannot write through data<T>(): the tensor is read-only (use const_data<T>() to read it)";
  TensorView ro(&raw, /*read_only=*/true);
  ExpectError("ValueError", message, [&] { ro.data<float>(); });
  EXPECT_EQ(ro.const_data<float>()[1], 2.0f);
  // A ConstTensorView of it reads through data<T>() (const T*).
  EXPECT_EQ(ConstTensorView(ro).data<float>()[1], 2.0f);
  EXPECT_TRUE(ConstTensorView(ro).is_read_only());

  int frees = 0;
  Tensor t = MakeCPU({2}, &frees);
  Tensor read_only = t.as_read_only();
  ExpectError("ValueError", message, [&] { read_only.data<float>(); });
  ExpectError("ValueError", message, [&] { TensorView(read_only).data<float>(); });
  EXPECT_EQ(read_only.const_data<float>(), t.data<float>());
  EXPECT_EQ(ConstTensorView(read_only).data<float>(), t.data<float>());
}

TEST(Tensor, TypedFunctionTakesAndReturnsOwnedTensor) {
  kffi::Function identity =
      kffi::Function::FromTyped([](Tensor x) { return x.as_strided({x.numel()}, {1}); }, "flat");
  int frees = 0;
  Tensor t = MakeCPU({2, 3}, &frees);
  kffi::Any r = identity(t);
  Tensor flat = r.cast<Tensor>();
  EXPECT_EQ(flat.shape(), kffi::IntArrayView({6}));
  EXPECT_EQ(flat.data_ptr(), t.data_ptr());

  // A borrowed DLTensor* becomes a Tensor viewing the same memory (valid while the caller's is).
  std::vector<float> storage(4);
  std::vector<int64_t> shape{2, 2};
  DLTensor raw{storage.data(), kCPU, 2, kffi::dtypes::float32, shape.data(), nullptr, 0};
  Tensor viewed = identity(TensorView(&raw)).cast<Tensor>();
  EXPECT_EQ(viewed.data_ptr(), storage.data());
  EXPECT_EQ(viewed.shape(), kffi::IntArrayView({4}));
  kffi::Error e = CatchError([&] { identity(nullptr); });
  EXPECT_EQ(e.message(),
            "arg0: expected Tensor, got None (argument #0 of `flat(arg0: Tensor) -> Tensor`)");
}

TEST(Tensor, AnyHoldsTensorsAndViews) {
  int frees = 0;
  Tensor t = MakeCPU({2}, &frees);
  kffi::Any a = t;
  EXPECT_EQ(a.type_index(), kKFFITensor);
  EXPECT_EQ(a.GetTypeKey(), "Tensor");
  EXPECT_EQ(t.use_count(), 2u);
  EXPECT_TRUE(a.as<Tensor>().has_value());
  EXPECT_EQ(a.as<TensorView>()->data_ptr(), t.data_ptr());
  EXPECT_FALSE(a.as<int64_t>().has_value());
  kffi::AnyView v = TensorView(t);
  EXPECT_EQ(v.type_index(), kKFFIDLTensorPtr);
  EXPECT_FALSE(v.as<Tensor>().has_value());
  EXPECT_EQ(v.cast<TensorView>().GetDLTensorPtr(), t.GetDLTensorPtr());
  a = kffi::Any();
  EXPECT_EQ(t.use_count(), 1u);
}

TEST(TensorDtype, ConstantsNamesAndSizes) {
  EXPECT_EQ(kffi::DataTypeToString(kffi::dtypes::bfloat16), "bfloat16");
  EXPECT_EQ(kffi::DataTypeToString(kffi::dtypes::float8_e4m3fn), "float8_e4m3fn");
  EXPECT_EQ(kffi::DataTypeToString(kffi::dtypes::bool_), "bool");
  EXPECT_EQ(kffi::StringToDataType("float8_e5m2"), kffi::dtypes::float8_e5m2);
  EXPECT_EQ(kffi::StringToDataType("uint16"), kffi::dtypes::uint16);
  EXPECT_EQ(kffi::StringToDataType("float4_e2m1fn"), kffi::dtypes::float4_e2m1fn);
  EXPECT_NE(kffi::dtypes::int32, kffi::dtypes::uint32);
  kffi::Error e = CatchError([] { kffi::StringToDataType("float33x"); });
  EXPECT_EQ(e.kind(), "ValueError");
  EXPECT_NE(e.message().find("float33x"), std::string::npos);
  EXPECT_EQ(kffi::DataTypeBytes(kffi::dtypes::float64), 8);
  EXPECT_EQ(kffi::DataTypeBytes(kffi::dtypes::float4_e2m1fn), 1);
  EXPECT_EQ(kffi::DataTypeBytes(DLDataType{kDLFloat, 32, 4}), 16);
  EXPECT_EQ(kffi::DataTypeStorageBytes(kffi::dtypes::float4_e2m1fn, 5), 3);
  static_assert(kffi::DataTypeBytes(kffi::dtypes::bfloat16) == 2, "constexpr");
}

}  // namespace
