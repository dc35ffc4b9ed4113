// tests/python/kffi_torch/torch_kernels.cc: CPU kernels with contracts that the kffi.torch tests
// register as torch ops (and two plain exports for the no-contract paths).
// SPDX-License-Identifier: Apache-2.0
#include <kffi/kffi.h>

#include <cstdint>
#include <cstring>

namespace {

bool IsF64(kffi::ConstTensorView t) { return t.dtype() == DLDataType{kDLFloat, 64, 1}; }

// The elements (byte_offset included): writable through a TensorView or a Tensor, read-only
// through a ConstTensorView.
template <typename T>
T* P(kffi::TensorView t) {
  return t.data<T>();
}
template <typename T>
T* P(const kffi::Tensor& t) {
  return t.data<T>();
}
template <typename T>
const T* P(kffi::ConstTensorView t) {
  return t.data<T>();
}

/// Elementwise over contiguous float32 or float64 tensors of the same dtype.
template <typename F>
void Map2(kffi::TensorView out, kffi::ConstTensorView x, F f) {
  KFFI_CHECK(out.dtype() == x.dtype(), TypeError)
      << "expected matching dtypes, got " << out.dtype() << " and " << x.dtype();
  if (IsF64(x)) {
    for (int64_t i = 0; i < x.numel(); ++i) P<double>(out)[i] = f(P<double>(x)[i]);
  } else {
    for (int64_t i = 0; i < x.numel(); ++i)
      P<float>(out)[i] = static_cast<float>(f(P<float>(x)[i]));
  }
}

kffi::Tensor Like(kffi::ConstTensorView x) {
  return kffi::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
}

/// y = x * factor, written into y.
void ScaleInto(kffi::TensorView y, kffi::ConstTensorView x, double factor) {
  Map2(y, x, [factor](double v) { return v * factor; });
}

/// y = x, for complex64 (two floats an element): writes through conjugate views in the tests.
void CopyComplexInto(kffi::TensorView y, kffi::ConstTensorView x) {
  std::memcpy(static_cast<char*>(y.data_ptr()) + y.byte_offset(),
              static_cast<const char*>(x.data_ptr()) + x.byte_offset(),
              static_cast<size_t>(x.numel()) * 2 * sizeof(float));
}

/// A new tensor: a[i, j] + b[j].
kffi::Tensor AddRow(kffi::ConstTensorView a, kffi::ConstTensorView b) {
  kffi::Tensor out = Like(a);
  const int64_t n = a.size(0), m = a.size(1);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < m; ++j)
      P<float>(out)[i * m + j] = P<float>(a)[i * m + j] + P<float>(b)[j];
  }
  return out;
}

/// A new [n + m, k] tensor: a on top of b.
kffi::Tensor Concat(kffi::ConstTensorView a, kffi::ConstTensorView b) {
  int64_t shape[2] = {a.size(0) + b.size(0), a.size(1)};
  kffi::Tensor out =
      kffi::Tensor::FromEnvAlloc(kffi::IntArrayView(shape, 2), a.dtype(), a.device());
  std::memcpy(out.data<float>(), a.data<float>(), static_cast<size_t>(a.numel()) * 4);
  std::memcpy(P<float>(out) + a.numel(), b.data<float>(), static_cast<size_t>(b.numel()) * 4);
  return out;
}

/// y = x * x (returned) and its backward dx = 2 x g.
kffi::Tensor Square(kffi::ConstTensorView x) {
  kffi::Tensor y = Like(x);
  Map2(y, x, [](double v) { return v * v; });
  return y;
}
kffi::Tensor SquareBwd(kffi::ConstTensorView x, kffi::ConstTensorView g) {
  kffi::Tensor dx = Like(x);
  for (int64_t i = 0; i < x.numel(); ++i) P<double>(dx)[i] = 2 * P<double>(x)[i] * P<double>(g)[i];
  return dx;
}

/// The same written into outputs: y = x * x; dx = 2 x g.
void SquareInto(kffi::ConstTensorView x, kffi::TensorView y) {
  Map2(y, x, [](double v) { return v * v; });
}
void SquareBwdInto(kffi::ConstTensorView x, kffi::ConstTensorView g, kffi::TensorView dx) {
  for (int64_t i = 0; i < x.numel(); ++i) P<double>(dx)[i] = 2 * P<double>(x)[i] * P<double>(g)[i];
}

/// z = a * b * scale; backward: da = g b scale, db = g a scale.
kffi::Tensor Mul(kffi::ConstTensorView a, kffi::ConstTensorView b, double scale) {
  kffi::Tensor z = Like(a);
  for (int64_t i = 0; i < a.numel(); ++i)
    P<double>(z)[i] = P<double>(a)[i] * P<double>(b)[i] * scale;
  return z;
}
void MulBwd(kffi::ConstTensorView a, kffi::ConstTensorView b, kffi::ConstTensorView g, double scale,
            kffi::TensorView da, kffi::TensorView db) {
  for (int64_t i = 0; i < a.numel(); ++i) {
    P<double>(da)[i] = P<double>(g)[i] * P<double>(b)[i] * scale;
    P<double>(db)[i] = P<double>(g)[i] * P<double>(a)[i] * scale;
  }
}

/// Two new tensors: (x + 1, x * 2).
kffi::Array<kffi::Tensor> TwoOut(kffi::ConstTensorView x) {
  kffi::Tensor a = Like(x), b = Like(x);
  Map2(a, x, [](double v) { return v + 1; });
  Map2(b, x, [](double v) { return v * 2; });
  return kffi::Array<kffi::Tensor>{a, b};
}

/// y = x + (bias or 0) + (shift or 0), written into y.
void AddBias(kffi::ConstTensorView x, kffi::TensorView y,
             kffi::Optional<kffi::ConstTensorView> bias, kffi::Optional<int64_t> shift) {
  const int64_t s = shift.has_value() ? *shift : 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    P<float>(y)[i] = P<float>(x)[i] + (bias.has_value() ? P<float>(*bias)[i] : 0.f) + s;
  }
}

/// Writes the stream handles it receives: out[0] the explicit one, out[1] the environment's.
void Streams(kffi::TensorView out, void* stream, void* env_stream) {
  P<int64_t>(out)[0] = reinterpret_cast<int64_t>(stream);
  P<int64_t>(out)[1] = reinterpret_cast<int64_t>(env_stream);
}

/// Sum of the sizes of x (an int result: no tensor output).
int64_t Numel(kffi::ConstTensorView x) { return x.numel(); }

/// Fails in the kernel, after the contract check passed.
void Fail(kffi::ConstTensorView x) { KFFI_THROW(IndexError) << "kernel failure on " << x.numel(); }

/// Plain exports (no contract): y = x * factor written into y; a new x + 1.
void ScalePlain(kffi::TensorView y, kffi::ConstTensorView x, double factor) {
  Map2(y, x, [factor](double v) { return v * factor; });
}
kffi::Tensor PlusOnePlain(kffi::ConstTensorView x) {
  kffi::Tensor y = Like(x);
  Map2(y, x, [](double v) { return v + 1; });
  return y;
}

/// y[i] = values[i] * (negate ? -1 : 1) + len(label), written into y (float32).
void FillPlain(kffi::TensorView y, kffi::Array<int64_t> values, kffi::String label, bool negate) {
  for (int64_t i = 0; i < y.numel() && i < static_cast<int64_t>(values.size()); ++i) {
    P<float>(y)[i] =
        static_cast<float>(values[i] * (negate ? -1 : 1) + static_cast<int64_t>(label.size()));
  }
}

/// Two new tensors (x + 1, x * 2) as an Array.
kffi::Array<kffi::Tensor> PairPlain(kffi::ConstTensorView x) { return TwoOut(x); }

/// The empty kernel (benchmarks): three tensors.
void Empty3(kffi::ConstTensorView, kffi::ConstTensorView, kffi::ConstTensorView) {}

}  // namespace

KFFI_EXPORT_CONTRACT_DOC(scale_into, ScaleInto,
                         "y: Tensor([n], float32|float64, mut, contiguous), x: Tensor([n], "
                         "float32|float64, contiguous), "
                         "factor: float",
                         "y = x * factor");
KFFI_EXPORT_CONTRACT_DOC(copy_complex_into, CopyComplexInto,
                         "y: Tensor([n], complex64, mut, contiguous), x: Tensor([n], complex64, "
                         "contiguous)",
                         "y = x");
KFFI_EXPORT_CONTRACT_DOC(
    add_row, AddRow,
    "a: Tensor([n, m], float32, contiguous), b: Tensor([m], float32, contiguous) "
    "-> out: Tensor([n, m], float32)",
    "a + b (broadcast over rows)");
KFFI_EXPORT_CONTRACT(
    concat, Concat,
    "a: Tensor([n, k], float32, contiguous), b: Tensor([m, k], float32, contiguous) "
    "-> Tensor([n + m, k], float32)");
KFFI_EXPORT_CONTRACT(square, Square,
                     "x: Tensor([n], float32|float64, contiguous) -> Tensor([n], *)");
KFFI_EXPORT_CONTRACT(square_bwd, SquareBwd,
                     "x: Tensor([n], float64, contiguous), g: Tensor([n], float64, contiguous) -> "
                     "Tensor([n], float64)");
KFFI_EXPORT_CONTRACT(square_into, SquareInto,
                     "x: Tensor([n], float32|float64, contiguous), y: Tensor([n], float32|float64, "
                     "mut, contiguous)");
KFFI_EXPORT_CONTRACT(square_bwd_into, SquareBwdInto,
                     "x: Tensor([n], float64, contiguous), g: Tensor([n], float64, contiguous), "
                     "dx: Tensor([n], float64, mut, contiguous)");
KFFI_EXPORT_CONTRACT(
    mul, Mul,
    "a: Tensor([n], float64, contiguous), b: Tensor([n], float64, contiguous), scale: float "
    "-> Tensor([n], float64)");
KFFI_EXPORT_CONTRACT(mul_bwd, MulBwd,
                     "a: Tensor([n], float64, contiguous), b: Tensor([n], float64, contiguous), g: "
                     "Tensor([n], float64, contiguous), "
                     "scale: float, da: Tensor([n], float64, mut, contiguous), db: Tensor([n], "
                     "float64, mut, contiguous)");
KFFI_EXPORT_CONTRACT(
    two_out, TwoOut,
    "x: Tensor([n], float32, contiguous) -> a: Tensor([n], float32), b: Tensor([n], float32)");
KFFI_EXPORT_CONTRACT(
    add_bias, AddBias,
    "x: Tensor([n], float32, contiguous), y: Tensor([n], float32, mut, contiguous), "
    "bias: Optional[Tensor([n], float32, contiguous)], shift: Optional[int]");
KFFI_EXPORT_CONTRACT(streams, Streams,
                     "out: Tensor([2], int64, mut, contiguous), stream: Stream, env: EnvStream");
KFFI_EXPORT_CONTRACT(numel, Numel, "x: Tensor([n], *, contiguous)");
KFFI_EXPORT_CONTRACT(fail, Fail, "x: Tensor([n], float32, contiguous)");
KFFI_EXPORT_CONTRACT(empty3, Empty3,
                     "a: Tensor([n], float32), b: Tensor([n], float32), c: Tensor([n], float32)");
KFFI_EXPORT_DOC(scale_plain, ScalePlain, "y = x * factor", "y, x, factor");
KFFI_EXPORT_DOC(plus_one_plain, PlusOnePlain, "x + 1", "x");
KFFI_EXPORT_DOC(fill_plain, FillPlain, "y = values * sign + len(label)",
                "y, values, label, negate");
KFFI_EXPORT_DOC(pair_plain, PairPlain, "(x + 1, x * 2)", "x");
