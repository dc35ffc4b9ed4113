// tests/cpp/core/test_checks.cc: the kernel argument checks of kffi/tensor_checks.h and their
// messages.
// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>
#include <kffi/tensor_checks.h>

#include <string>
#include <vector>

namespace {

using kffi::TensorView;

// A DLTensor over caller-owned shape/strides (no data needed for layout checks).
struct FakeTensor {
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  DLTensor t;
  FakeTensor(std::vector<int64_t> s, std::vector<int64_t> st, DLDataType dtype, DLDevice dev)
      : shape(std::move(s)), strides(std::move(st)) {
    t = DLTensor{nullptr, dev,          static_cast<int32_t>(shape.size()),
                 dtype,   shape.data(), strides.empty() ? nullptr : strides.data(),
                 0};
  }
  TensorView view() const { return TensorView(&t); }
};

template <typename F>
std::string ErrorMessage(const char* kind, F f) {
  try {
    f();
  } catch (const kffi::Error& e) {
    EXPECT_EQ(e.kind(), kind);
    return e.message();
  }
  ADD_FAILURE() << "expected a " << kind;
  return "";
}
template <typename F>
std::string ValueErrorMessage(F f) {
  return ErrorMessage("ValueError", f);
}
// A wrong dtype is a TypeError, as DispatchDtype and contracts raise it.
template <typename F>
std::string TypeErrorMessage(F f) {
  return ErrorMessage("TypeError", f);
}

const DLDevice kCPU{kDLCPU, 0};
const DLDevice kCuda0{kDLCUDA, 0};
const DLDevice kCuda1{kDLCUDA, 1};

TEST(Checks, Device) {
  FakeTensor x({4}, {}, kffi::dtypes::float32, kCPU);
  EXPECT_NO_THROW(kffi::CheckDevice(x.view(), kDLCPU, "x"));
  EXPECT_EQ(ValueErrorMessage([&] { kffi::CheckDevice(x.view(), kDLCUDA, "x"); }),
            "x.device: expected cuda, got cpu");
  FakeTensor y({4}, {}, kffi::dtypes::float32, kCuda1);
  EXPECT_NO_THROW(kffi::CheckDevice(y.view(), kDLCUDA, "y"));
  EXPECT_EQ(ValueErrorMessage([&] { kffi::CheckDevice(y.view(), kCuda0, "y"); }),
            "y.device: expected cuda:0, got cuda:1");
}

TEST(Checks, Contiguous) {
  FakeTensor row({4, 4}, {4, 1}, kffi::dtypes::float32, kCPU);
  FakeTensor compact({4, 4}, {}, kffi::dtypes::float32, kCPU);
  FakeTensor col({4, 4}, {1, 4}, kffi::dtypes::float32, kCPU);
  EXPECT_NO_THROW(kffi::CheckContiguous(row.view(), "x"));
  EXPECT_NO_THROW(kffi::CheckContiguous(compact.view(), "x"));
  EXPECT_EQ(ValueErrorMessage([&] { kffi::CheckContiguous(col.view(), "x"); }),
            "x.strides: expected contiguous, got [1, 4] for shape [4, 4]");
}

TEST(Checks, NdimAndShape) {
  FakeTensor x({2, 3, 4}, {}, kffi::dtypes::float32, kCPU);
  EXPECT_NO_THROW(kffi::CheckNdim(x.view(), 3, "x"));
  EXPECT_EQ(ValueErrorMessage([&] { kffi::CheckNdim(x.view(), 2, "x"); }),
            "x.ndim: expected 2, got 3 (shape [2, 3, 4])");
  EXPECT_NO_THROW(kffi::CheckShape(x.view(), {2, -1, 4}, "x"));
  EXPECT_EQ(ValueErrorMessage([&] {
              kffi::CheckShape(x.view(), {2, 3, 5}, "x");
            }),
            "x.shape: expected [2, 3, 5], got [2, 3, 4]");
  EXPECT_EQ(ValueErrorMessage([&] {
              kffi::CheckShape(x.view(), {2, 3}, "x");
            }),
            "x.shape: expected [2, 3], got [2, 3, 4]");
  // A wildcard dimension shows as `*` in the expected shape.
  EXPECT_EQ(ValueErrorMessage([&] {
              kffi::CheckShape(x.view(), {3, -1, 4}, "x");
            }),
            "x.shape: expected [3, *, 4], got [2, 3, 4]");
}

TEST(Checks, Dtype) {
  FakeTensor x({4}, {}, kffi::dtypes::int32, kCPU);
  EXPECT_NO_THROW(kffi::CheckDtype(x.view(), {kffi::dtypes::float32, kffi::dtypes::int32}, "x"));
  EXPECT_EQ(TypeErrorMessage([&] { kffi::CheckDtype(x.view(), {kffi::dtypes::float32}, "x"); }),
            "x.dtype: expected float32, got int32");
  EXPECT_EQ(TypeErrorMessage([&] {
              kffi::CheckDtype(x.view(), {kffi::dtypes::float32, kffi::dtypes::float16}, "x");
            }),
            "x.dtype: expected float32|float16, got int32");
  EXPECT_EQ(TypeErrorMessage([&] {
              kffi::CheckDtype(
                  x.view(), {kffi::dtypes::float32, kffi::dtypes::float16, kffi::dtypes::bfloat16},
                  "x");
            }),
            "x.dtype: expected float32|float16|bfloat16, got int32");
}

TEST(Checks, SameDeviceDtypeShape) {
  FakeTensor a({4}, {}, kffi::dtypes::float32, kCuda0);
  FakeTensor b({4}, {}, kffi::dtypes::float16, kCuda1);
  FakeTensor c({5}, {}, kffi::dtypes::float32, kCuda0);
  EXPECT_NO_THROW(kffi::CheckSameDevice(a.view(), c.view(), "a", "c"));
  EXPECT_EQ(ValueErrorMessage([&] { kffi::CheckSameDevice(a.view(), b.view(), "a", "b"); }),
            "a.device: expected cuda:1 (as b.device), got cuda:0");
  EXPECT_NO_THROW(kffi::CheckSameDtype(a.view(), c.view(), "a", "c"));
  EXPECT_EQ(TypeErrorMessage([&] { kffi::CheckSameDtype(a.view(), b.view(), "a", "b"); }),
            "a.dtype: expected float16 (as b.dtype), got float32");
  EXPECT_NO_THROW(kffi::CheckSameShape(a.view(), b.view(), "a", "b"));
  EXPECT_EQ(ValueErrorMessage([&] { kffi::CheckSameShape(a.view(), c.view(), "a", "c"); }),
            "a.shape: expected [5] (as c.shape), got [4]");
}

TEST(Checks, Alignment) {
  alignas(64) static float buf[32];
  FakeTensor x({4}, {}, kffi::dtypes::float32, kCPU);
  x.t.data = buf;
  EXPECT_NO_THROW(kffi::CheckAlignment(x.view(), 64, "x"));
  x.t.byte_offset = 4;
  EXPECT_EQ(ValueErrorMessage([&] { kffi::CheckAlignment(x.view(), 16, "x"); }),
            "x: expected data aligned to 16 bytes, got data aligned to 4 bytes");
  // The first element's address counts (data + byte_offset), not data alone.
  x.t.data = reinterpret_cast<char*>(buf) + 4;
  x.t.byte_offset = 12;
  EXPECT_NO_THROW(kffi::CheckAlignment(x.view(), 16, "x"));
}

TEST(Checks, Writable) {
  FakeTensor x({4}, {}, kffi::dtypes::float32, kCPU);
  EXPECT_NO_THROW(kffi::CheckWritable(x.view(), "x"));
  EXPECT_EQ(ValueErrorMessage(
                [&] { kffi::CheckWritable(kffi::ConstTensorView(&x.t, /*read_only=*/true), "x"); }),
            "x: expected a writable tensor, got a read-only tensor");
  kffi::Tensor t = kffi::Tensor::FromEnvAlloc({2}, kffi::dtypes::float32, kCPU);
  EXPECT_NO_THROW(kffi::CheckWritable(t, "t"));
  kffi::Tensor ro = t.as_read_only();
  EXPECT_EQ(ValueErrorMessage([&] { kffi::CheckWritable(ro, "t"); }),
            "t: expected a writable tensor, got a read-only tensor");
}

TEST(Checks, WorkWithOwnedTensors) {
  kffi::Tensor t = kffi::Tensor::FromEnvAlloc({2, 2}, kffi::dtypes::float32, kCPU);
  EXPECT_NO_THROW(kffi::CheckContiguous(t, "t"));
  EXPECT_NO_THROW(kffi::CheckDevice(t, kDLCPU, "t"));
  EXPECT_EQ(ValueErrorMessage([&] { kffi::CheckNdim(t, 1, "t"); }),
            "t.ndim: expected 1, got 2 (shape [2, 2])");
}

}  // namespace
