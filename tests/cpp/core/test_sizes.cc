// tests/cpp/core/test_sizes.cc: every size computation is checked: tensor layouts that overflow
// int64 (allocation, DLPack import, borrowed views), container capacities and string sizes are
// clear errors, never a small number.
// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>
#include <kffi/kffi.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "tensor_producer.h"
#include "test_util.h"

namespace {

using kffi::Tensor;
using kffi::TensorView;
using kffi_test::kCPU;
using kffi_test::ProducedV0;
using kffi_test::ProducedV1;

constexpr int64_t kTwo60 = int64_t{1} << 60;
constexpr int64_t kTwo40 = int64_t{1} << 40;
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

// An allocator that must never be reached: the layout check comes first.
struct NeverAlloc {
  int* calls;
  void AllocData(DLTensor* t) {
    ++*calls;
    t->data = nullptr;
  }
  void FreeData(DLTensor*) {}
};

void ExpectValueError(const std::string& needle, const kffi::Error& e) {
  EXPECT_EQ(e.kind(), "ValueError") << e.message();
  EXPECT_NE(e.message().find(needle), std::string::npos) << e.message();
}

TEST(TensorSizes, FromNDAllocRefusesASizeThatOverflowsBeforeAllocating) {
  int calls = 0;
  // 2^60 float32 elements are 2^65 bits: the unchecked size was 0 bytes, then 64 allocated.
  kffi::Error e = CatchError(
      [&] { Tensor::FromNDAlloc(NeverAlloc{&calls}, {kTwo60}, kffi::dtypes::float32, kCPU); });
  EXPECT_EQ(e.message(),
            "Tensor::FromNDAlloc: shape [1152921504606846976] is too large: the memory it spans "
            "overflows int64 (its size in bits exceeds 2^63 - 1)");
  ExpectValueError("number of elements overflows int64", CatchError([&] {
                     Tensor::FromNDAlloc(NeverAlloc{&calls},
                                         {int64_t{1} << 31, int64_t{1} << 31, int64_t{1} << 31},
                                         kffi::dtypes::int8, kCPU);
                   }));
  // Empty, but its compact strides would still overflow: refused as NumPy refuses it.
  ExpectValueError(
      "shape [0, 1099511627776, 1099511627776] is too large", CatchError([&] {
        Tensor::FromNDAlloc(NeverAlloc{&calls}, {0, kTwo40, kTwo40}, kffi::dtypes::int8, kCPU);
      }));
  ExpectValueError("negative size in shape [2, -3]", CatchError([&] {
                     Tensor::FromNDAlloc(NeverAlloc{&calls}, {2, -3}, kffi::dtypes::int8, kCPU);
                   }));
  std::vector<int64_t> many(static_cast<size_t>(kffi::kMaxTensorNdim) + 1, 1);
  ExpectValueError("ndim 1025 is out of range (0 to 1024)", CatchError([&] {
                     Tensor::FromNDAlloc(NeverAlloc{&calls}, many, kffi::dtypes::int8, kCPU);
                   }));
  EXPECT_EQ(calls, 0);
  // The largest sizes that fit still pass the check (the allocator decides about memory).
  Tensor fits = Tensor::FromNDAlloc(NeverAlloc{&calls}, {kMax / 64}, kffi::dtypes::float64, kCPU);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(fits.numel(), kMax / 64);
}

TEST(TensorSizes, FromNDAllocStridedAndAsStridedCheckTheSpannedMemory) {
  int calls = 0;
  ExpectValueError("Tensor::FromNDAllocStrided: shape [1099511627776, 2] is too large",
                   CatchError([&] {
                     Tensor::FromNDAllocStrided(NeverAlloc{&calls}, {kTwo40, 2}, {kTwo40, 1},
                                                kffi::dtypes::float32, kCPU);
                   }));
  EXPECT_EQ(calls, 0);
  Tensor small = Tensor::FromEnvAlloc({4}, kffi::dtypes::float32, kCPU);
  ExpectValueError("Tensor::as_strided: shape [4, 1099511627776] is too large", CatchError([&] {
                     small.as_strided({4, kTwo40}, {kTwo40, kTwo40});
                   }));
}

int g_env_calls = 0;
int CountingEnvAlloc(DLTensor*, DLManagedTensorVersioned**, void*,
                     void (*)(void*, const char*, const char*)) {
  ++g_env_calls;
  return -1;
}

TEST(TensorSizes, FromEnvAllocChecksBeforeEitherAllocator) {
  ExpectValueError("Tensor::FromEnvAlloc: shape [1152921504606846976] is too large",
                   CatchError([] { Tensor::FromEnvAlloc({kTwo60}, kffi::dtypes::float32, kCPU); }));
  g_env_calls = 0;
  {
    kffi::env::TensorAllocatorScope scope(&CountingEnvAlloc);
    ExpectValueError("Tensor::FromEnvAlloc: shape [1152921504606846976] is too large",
                     CatchError([] {
                       Tensor::FromEnvAlloc({kTwo60}, kffi::dtypes::float32, DLDevice{kDLCUDA, 0});
                     }));
  }
  EXPECT_EQ(g_env_calls, 0);
}

TEST(TensorSizes, BorrowedViewsComputeSizesChecked) {
  std::vector<int64_t> shape{kTwo40, kTwo40};
  DLTensor raw{nullptr, kCPU, 2, kffi::dtypes::float32, shape.data(), nullptr, 0};
  TensorView v(&raw);
  ExpectValueError(
      "Tensor: shape [1099511627776, 1099511627776] is too large: the number of "
      "elements overflows int64",
      CatchError([&] { v.numel(); }));
  EXPECT_EQ(v.strides().ToVector(), (std::vector<int64_t>{kTwo40, 1}));  // these still fit
  EXPECT_EQ(v.stride(0), kTwo40);
  std::vector<int64_t> shape3{2, kTwo40, kTwo40};
  DLTensor raw3{nullptr, kCPU, 3, kffi::dtypes::float32, shape3.data(), nullptr, 0};
  ExpectValueError(
      "Tensor strides: shape [2, 1099511627776, 1099511627776] is too large: the "
      "strides overflow int64",
      CatchError([&] { TensorView(&raw3).strides(); }));
  ExpectValueError("strides overflow int64", CatchError([&] { TensorView(&raw3).stride(0); }));
  EXPECT_EQ(TensorView(&raw3).stride(1), kTwo40);
  ExpectValueError("is too large", CatchError([&] { kffi::GetDataSize(raw); }));
  int64_t bytes = -1;
  EXPECT_FALSE(kffi::TryGetDataSize(raw, &bytes));

  // Contiguity never overflows into a false match: strides [0, 1] would equal a wrapped product.
  std::vector<int64_t> wrap_shape{2, int64_t{1} << 62, 4};
  std::vector<int64_t> wrap_strides{0, 4, 1};
  DLTensor wrapped{nullptr, kCPU, 3, kffi::dtypes::int8, wrap_shape.data(), wrap_strides.data(), 0};
  EXPECT_FALSE(TensorView(&wrapped).is_contiguous());
  std::vector<int64_t> one_shape{1, int64_t{1} << 62, 4};
  DLTensor leading_one{nullptr, kCPU, 3, kffi::dtypes::int8, one_shape.data(), wrap_strides.data(),
                       0};
  EXPECT_TRUE(TensorView(&leading_one).is_contiguous());
}

TEST(TensorSizes, StorageBytesAreCheckedInBits) {
  int64_t out = -1;
  EXPECT_TRUE(kffi::TryDataTypeStorageBytes(kffi::dtypes::float4_e2m1fn, 5, &out));
  EXPECT_EQ(out, 3);
  EXPECT_TRUE(kffi::TryDataTypeStorageBytes(kffi::dtypes::int8, kMax / 8, &out));
  EXPECT_EQ(out, kMax / 8);
  EXPECT_FALSE(kffi::TryDataTypeStorageBytes(kffi::dtypes::int8, kMax / 8 + 1, &out));
  EXPECT_FALSE(kffi::TryDataTypeStorageBytes(DLDataType{kDLFloat, 32, 4}, kTwo60, &out));
  kffi::Error e = CatchError([] { kffi::DataTypeStorageBytes(kffi::dtypes::float32, kTwo60); });
  EXPECT_EQ(e.kind(), "ValueError");
  EXPECT_EQ(e.message(),
            "1152921504606846976 elements of float32 are too large: the size in bits exceeds "
            "2^63 - 1");
  static_assert(kffi::DataTypeStorageBytes(kffi::dtypes::float32, 3) == 12, "constexpr");
}

// A bad layout given to the DLPack import: how to break a good one, and what the error says.
struct BadLayout {
  const char* name;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  void (*edit)(DLTensor*);
  const char* message;
};

std::vector<BadLayout> BadLayouts() {
  return {
      {"bytes",
       {kTwo60},
       {},
       nullptr,
       "DLPack tensor: shape [1152921504606846976] is too large: the memory it spans overflows "
       "int64 (its size in bits exceeds 2^63 - 1)"},
      {"elements",
       {kTwo40, kTwo40},
       {},
       nullptr,
       "DLPack tensor: shape [1099511627776, 1099511627776] is too large: the number of elements "
       "overflows int64"},
      {"empty but huge",
       {0, kTwo40, kTwo40},
       {},
       nullptr,
       "the number of elements overflows int64"},
      {"strided extent",
       {4, 1 << 20},
       {kTwo60, 1},
       nullptr,
       "DLPack tensor: shape [4, 1048576] is too large: the memory it spans overflows int64"},
      {"negative size", {3, -1}, {}, nullptr, "DLPack tensor: negative size in shape [3, -1]"},
      {"negative ndim",
       {2},
       {},
       [](DLTensor* t) { t->ndim = -1; },
       "DLPack tensor: ndim -1 is out of range (0 to 1024)"},
      {"huge ndim",
       {2},
       {},
       [](DLTensor* t) { t->ndim = 1 << 30; },
       "DLPack tensor: ndim 1073741824 is out of range (0 to 1024)"},
      {"null shape",
       {2, 2},
       {},
       [](DLTensor* t) { t->shape = nullptr; },
       "DLPack tensor: ndim 2 with a NULL shape"},
  };
}

TEST(TensorSizes, DLPackImportRefusesBadLayoutsAndReleasesOnce) {
  for (const BadLayout& bad : BadLayouts()) {
    SCOPED_TRACE(bad.name);
    int deletes = 0;
    DLManagedTensor* v0 = ProducedV0::Make(bad.shape, bad.strides, &deletes);
    if (bad.edit) bad.edit(&v0->dl_tensor);
    kffi::Error e0 = CatchError([&] { Tensor::FromDLPack(v0); });
    ExpectValueError(bad.message, e0);
    DLManagedTensorVersioned* v1 = ProducedV1::Make(bad.shape, bad.strides, &deletes);
    if (bad.edit) bad.edit(&v1->dl_tensor);
    ExpectValueError(bad.message, CatchError([&] { Tensor::FromDLPackVersioned(v1); }));
    EXPECT_EQ(deletes, 2);
  }
}

TEST(TensorSizes, BorrowedTensorArgumentsAreValidatedWhenOwned) {
  kffi::Function own = kffi::Function::FromTyped([](Tensor t) { return t.numel(); }, "own");
  for (const BadLayout& bad : BadLayouts()) {
    SCOPED_TRACE(bad.name);
    std::vector<int64_t> shape = bad.shape, strides = bad.strides;
    DLTensor raw{nullptr,
                 kCPU,
                 static_cast<int32_t>(shape.size()),
                 kffi::dtypes::float32,
                 shape.data(),
                 strides.empty() ? nullptr : strides.data(),
                 0};
    if (bad.edit) bad.edit(&raw);
    KFFIAny view;
    kffi::details::SetPOD(&view, kKFFIDLTensorPtr);
    view.v_ptr = &raw;
    KFFIAny owned;
    kffi::details::SetNone(&owned);
    EXPECT_EQ(KFFIAnyViewToOwnedAny(&view, &owned), -1);
    EXPECT_EQ(owned.type_index, kKFFINone);  // untouched on error
    KFFIObjectHandle err = nullptr;
    KFFIErrorMoveFromRaised(&err);
    ASSERT_NE(err, nullptr);
    kffi::Error e(kffi::details::ObjectUnsafe::FromOwnedHandle<kffi::Object>(err));
    // The same check as the import, named for what was given.
    std::string expected = bad.message;
    const std::string prefix = "DLPack tensor";
    if (expected.compare(0, prefix.size(), prefix) == 0)
      expected.replace(0, prefix.size(), "DLTensor*");
    ExpectValueError(expected, e);
    // Through a typed function the same error names the argument.
    kffi::Error call = CatchError([&] { own.CallPacked(&view, 1); });
    EXPECT_EQ(call.kind(), "ValueError");
    EXPECT_EQ(call.message(),
              "arg0: " + e.message() + " (argument #0 of `own(arg0: Tensor) -> int`)");
  }
  std::vector<int64_t> shape{2, 3};
  DLTensor good{nullptr, kCPU, 2, kffi::dtypes::float32, shape.data(), nullptr, 0};
  EXPECT_EQ(own(TensorView(&good)).cast<int64_t>(), 6);
}

TEST(ContainerSizes, ProductsAndCapacitiesAreChecked) {
  kffi::Shape big{kTwo40, kTwo40};
  kffi::Error e = CatchError([&] { big.Product(); });
  EXPECT_EQ(e.kind(), "ValueError");
  EXPECT_EQ(e.message(),
            "The product of the dimensions of shape (1099511627776, 1099511627776) overflows "
            "int64");
  EXPECT_EQ((kffi::Shape{2, 3, 4}.Product()), 24);

  kffi::Array<int64_t> arr;
  e = CatchError([&] { arr.reserve(kMax / 8); });
  EXPECT_EQ(e.kind(), "MemoryError");
  EXPECT_NE(e.message().find("exceeds what one allocation can hold"), std::string::npos);
  EXPECT_EQ(arr.size(), 0);
  kffi::List<int64_t> list{1, 2};
  e = CatchError([&] { list.reserve(kMax / 4); });
  EXPECT_EQ(e.kind(), "MemoryError");
  EXPECT_EQ(list.size(), 2);  // unchanged
  kffi::Map<int64_t, int64_t> map;
  EXPECT_EQ(CatchError([&] { kffi::MapObj::Empty(kMax); }).kind(), "ValueError");
  EXPECT_EQ(map.size(), 0);
}

TEST(StringSizes, ASizeNoAllocationCanHoldIsAMemoryError) {
  // The data pointer is never read: the size is refused first.
  const char byte = 'x';
  KFFIByteArray huge{&byte, std::numeric_limits<size_t>::max() - 8};
  KFFIAny out;
  kffi::details::SetNone(&out);
  EXPECT_EQ(KFFIStringFromByteArray(&huge, &out), -1);
  KFFIObjectHandle err = nullptr;
  KFFIErrorMoveFromRaised(&err);
  ASSERT_NE(err, nullptr);
  kffi::Error e(kffi::details::ObjectUnsafe::FromOwnedHandle<kffi::Object>(err));
  EXPECT_EQ(e.kind(), "MemoryError");
  EXPECT_EQ(out.type_index, kKFFINone);
}

}  // namespace
