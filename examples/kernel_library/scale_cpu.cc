// examples/kernel_library/scale_cpu.cc: the `scale` kernel (y = x * factor) for CPU tensors.
//
// Every kernel follows the same steps: validate the arguments, make the tensors' device current,
// take the caller's stream, dispatch on dtype, launch. On CPU the middle two have nothing to do;
// scale_cuda.cu shows them in full.
#include <kffi/dtype.h>
#include <kffi/export.h>
#include <kffi/tensor_checks.h>

#include <cstdint>
#include <cstring>

namespace {

// ---- 16-bit floats as raw bits ---------------------------------------------------------------
// Plain C++ has no half types, so float16 and bfloat16 elements are read as uint16_t, widened to
// float, computed on, and rounded back to nearest-even (what a GPU's conversion does).

float BitsToFloat(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

uint32_t FloatToBits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return bits;
}

float Bfloat16ToFloat(uint16_t h) { return BitsToFloat(static_cast<uint32_t>(h) << 16); }

uint16_t FloatToBfloat16(float f) {
  uint32_t bits = FloatToBits(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);  // NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<uint16_t>(bits >> 16);
}

float Float16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return BitsToFloat(sign | 0x7f800000u | (mant << 13));  // inf / NaN
  if (exp != 0) return BitsToFloat(sign | ((exp + 112) << 23) | (mant << 13));
  // Zero or subnormal: mant * 2^-24, exact in float.
  const float magnitude = static_cast<float>(mant) * BitsToFloat(0x33800000u);
  return sign ? -magnitude : magnitude;
}

uint16_t FloatToFloat16(float f) {
  const uint32_t bits = FloatToBits(f);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds to or beyond the largest: inf
  if (abs < 0x38800000u) {
    // Below the smallest normal half: a subnormal (or zero), rounded to nearest-even in float
    // arithmetic by adding 0.5 (whose ulp is 2^-24, the subnormal step).
    const float rounded = BitsToFloat(abs) + 0.5f;
    return sign | static_cast<uint16_t>(FloatToBits(rounded) - FloatToBits(0.5f));
  }
  uint32_t v = abs - (112u << 23);  // rebias the exponent from 127 to 15
  v += 0xfffu + ((v >> 13) & 1u);   // round to nearest, ties to even
  return sign | static_cast<uint16_t>(v >> 13);
}

// ---- the kernel ------------------------------------------------------------------------------

template <typename T, typename Load, typename Store>
void ScaleLoop(void* y, const void* x, int64_t n, float factor, Load load, Store store) {
  T* out = static_cast<T*>(y);
  const T* in = static_cast<const T*>(x);
  for (int64_t i = 0; i < n; ++i) out[i] = store(load(in[i]) * factor);
}

// y is written (a TensorView: the call refuses read-only memory for it, which is never changed);
// x is only read (a ConstTensorView: read-only arrays are welcome, without a copy).
void Scale(kffi::TensorView y, kffi::ConstTensorView x, double factor) {
  // 1. Validate: every failure names the argument, what was expected and what came.
  kffi::CheckDevice(x, kDLCPU, "x");
  kffi::CheckSameDevice(y, x, "y", "x");
  kffi::CheckDtype(x, {kffi::dtypes::float32, kffi::dtypes::float16, kffi::dtypes::bfloat16}, "x");
  kffi::CheckSameDtype(y, x, "y", "x");
  kffi::CheckSameShape(y, x, "y", "x");
  kffi::CheckContiguous(x, "x");
  kffi::CheckContiguous(y, "y");
  // 2. Device guard and 3. stream: none on CPU; the loop runs on the calling thread.
  // 4. Dispatch on dtype and 5. launch.
  const int64_t n = x.numel();
  const float f = static_cast<float>(factor);
  void* out = y.data();  // data() is the first element: DLTensor.data + byte_offset
  const void* in = x.data();
  const auto same = [](float v) { return v; };
  if (x.dtype() == kffi::dtypes::float32) {
    ScaleLoop<float>(out, in, n, f, same, same);
  } else if (x.dtype() == kffi::dtypes::float16) {
    ScaleLoop<uint16_t>(out, in, n, f, Float16ToFloat, FloatToFloat16);
  } else {
    ScaleLoop<uint16_t>(out, in, n, f, Bfloat16ToFloat, FloatToBfloat16);
  }
}

}  // namespace

KFFI_EXPORT_DOC(scale, Scale, "y = x * factor, elementwise (float32, float16, bfloat16; CPU).",
                "y, x, factor");
