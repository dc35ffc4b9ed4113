// tests/cpp/core/test_tensor_view_header.cc: kffi/tensor_view.h on its own, as kffi.compile's
// CUDA files use it: every name they may take from it compiles, and its errors still arrive as
// kffi::Error (thrown through the out-of-line thrower that another unit's kffi/error.h defines).
// SPDX-License-Identifier: Apache-2.0

// This header first and alone of kffi's: the file must compile with nothing else.
#include <kffi/tensor_view.h>

// The view header stays free of the string and container headers (what makes nvcc slow), and of
// the rest of kffi's.
#if defined(_GLIBCXX_STRING) || defined(_GLIBCXX_VECTOR) || defined(KFFI_ERROR_H_) || \
    defined(KFFI_OBJECT_H_) || defined(KFFI_ANY_H_)
#error "kffi/tensor_view.h includes more than it should"
#endif

#include <gtest/gtest.h>

#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <utility>

namespace {

// Each of the names kffi.compile lets a CUDA source use with this header alone
// (_VIEW_HEADER_NAMES in python/kffi/contract/_compile.py).
void UsesEveryName(kffi::ConstTensorView x, kffi::TensorView y) {
  kffi::IntArrayView shape = x.shape();
  kffi::StrideArray strides = x.strides();
  kffi::TensorAccessor<float, 2> acc = y.accessor<float, 2>();
  static_assert(kffi::DataTypeBits(kffi::dtypes::float32) == 32, "");
  static_assert(kffi::DataTypeBytes(kffi::dtypes::float4_e2m1fn) == 1, "");
  static_assert(kffi::DataTypeIs(kffi::dtypes::int8, kDLInt, 8), "");
  int64_t bytes = 0;
  EXPECT_TRUE(kffi::TryDataTypeStorageBytes(kffi::dtypes::float32, 3, &bytes));
  EXPECT_EQ(bytes, 12);
  EXPECT_TRUE(kffi::TryGetDataSize(*x.GetDLTensorPtr(), &bytes));
  EXPECT_LT(x.ndim(), kffi::kMaxTensorNdim);
  acc[0][1] = static_cast<float>(shape[0] + strides[0]);
}

struct Tensor2d {
  float data[6] = {0, 1, 2, 3, 4, 5};
  int64_t shape[2] = {2, 3};
  DLTensor t{};
  Tensor2d() {
    t.data = data;
    t.device = DLDevice{kDLCPU, 0};
    t.ndim = 2;
    t.dtype = kffi::dtypes::float32;
    t.shape = shape;
  }
};

std::string WhatOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(nothing thrown)";
}

TEST(TensorViewHeader, TheViewsWorkWithThisHeaderAlone) {
  Tensor2d a;
  kffi::TensorView y(&a.t);
  UsesEveryName(kffi::ConstTensorView(y), y);
  EXPECT_EQ(a.data[1], 2.0f + 3.0f);  // shape[0] + the compact stride of dimension 0
  EXPECT_EQ(y.numel(), 6);
  EXPECT_EQ(y.size(-1), 3);
  EXPECT_EQ(y.stride(0), 3);
  EXPECT_TRUE(y.is_contiguous());
  EXPECT_TRUE(y.dtype() == kffi::dtypes::float32);
  EXPECT_FALSE(y.dtype() != kffi::dtypes::float32);
  EXPECT_EQ(kffi::ConstTensorView(&a.t).data<float>()[4], 4.0f);
}

TEST(TensorViewHeader, ComputedStridesOfManyDimensionsCopyAndMove) {
  // More dimensions than StrideArray keeps inline: its computed strides are on the heap.
  int64_t shape[10] = {2, 1, 3, 1, 1, 1, 1, 1, 2, 5};
  const kffi::StrideArray s = kffi::StrideArray::Compact(kffi::IntArrayView(shape, 10));
  const int64_t want[10] = {30, 30, 10, 10, 10, 10, 10, 10, 5, 1};
  ASSERT_EQ(s.size(), 10u);
  EXPECT_TRUE(s.computed());
  for (size_t i = 0; i < 10; ++i) EXPECT_EQ(s[i], want[i]) << i;
  kffi::StrideArray copy = s;
  EXPECT_NE(copy.data(), s.data());  // its own storage
  kffi::StrideArray moved = std::move(copy);
  EXPECT_EQ(copy.size(), 0u);  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_TRUE(moved.view() == s.view());
  kffi::StrideArray small = kffi::StrideArray::Compact({4, 5});
  moved = small;
  EXPECT_TRUE(moved.view() == kffi::IntArrayView({5, 1}));
  kffi::StrideArray small_moved = std::move(small);
  EXPECT_EQ(small_moved.data()[0], 5);
}

TEST(TensorViewHeader, ErrorsArriveWithTheirKindAndMessage) {
  Tensor2d a;
  kffi::TensorView y(&a.t);
  EXPECT_EQ(WhatOf([&] { (void)y.size(5); }),
            "IndexError: Dimension out of range (expected to be in range of [-2, 1], but got 5)");
  DLTensor scalar = a.t;
  scalar.ndim = 0;
  EXPECT_EQ(WhatOf([&] { (void)kffi::ConstTensorView(&scalar).stride(-1); }),
            "IndexError: Dimension out of range: the tensor has no dimensions (ndim=0), but got "
            "dimension -1");
  EXPECT_EQ(WhatOf([&] { (void)y.size(INT64_MIN); }),
            "IndexError: Dimension out of range (expected to be in range of [-2, 1], but got "
            "-9223372036854775808)");
  EXPECT_EQ(WhatOf([&] { (void)kffi::TensorView(&a.t, true).data<float>(); }),
            "ValueError: Cannot write through data<T>(): the tensor is read-only (use "
            "const_data<T>() to read it)");
  EXPECT_EQ(WhatOf([&] { (void)y.accessor<float, 3>(); }),
            "ValueError: accessor<T, N>().ndim: expected 3, got 2");
  int64_t huge[2] = {INT64_MAX, 2};
  DLTensor big = a.t;
  big.shape = huge;
  EXPECT_EQ(WhatOf([&] { (void)kffi::ConstTensorView(&big).numel(); }),
            "ValueError: Tensor: shape [9223372036854775807, 2] is too large: the number of "
            "elements overflows int64");
}

}  // namespace
