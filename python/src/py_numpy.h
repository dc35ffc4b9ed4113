// python/src/py_numpy.h: NumPy arrays read straight from their fields (NumPy's own headers): the
// dtype table, ml_dtypes' types (bfloat16, fp8) and the borrowed DLTensor of an array. Included
// by py_tensor.cc alone: its calls inline into the argument path there.
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_PYTHON_SRC_PY_NUMPY_H_
#define KFFI_PYTHON_SRC_PY_NUMPY_H_

#include <array>
#include <cstring>

#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/ndarraytypes.h>

#include "py_common.h"

namespace kffi {
namespace pyglue {
namespace {

/// DLPack dtypes by NumPy type number (NumPy's own constants and C type sizes); bits 0 where
/// there is none (such arrays go through NumPy's __dlpack__).
struct NumpyDTypeEntry {
  uint8_t code;
  uint8_t bits;
};
constexpr int kNumpyTableSize = 32;
constexpr std::array<NumpyDTypeEntry, kNumpyTableSize> MakeNumpyDTypeTable() {
  std::array<NumpyDTypeEntry, kNumpyTableSize> t{};
  auto set = [&t](int type_num, uint8_t code, size_t bytes) {
    t[static_cast<size_t>(type_num)] = NumpyDTypeEntry{code, static_cast<uint8_t>(bytes * 8)};
  };
  set(NPY_BOOL, kDLBool, 1);
  set(NPY_BYTE, kDLInt, sizeof(npy_byte));
  set(NPY_UBYTE, kDLUInt, sizeof(npy_ubyte));
  set(NPY_SHORT, kDLInt, sizeof(npy_short));
  set(NPY_USHORT, kDLUInt, sizeof(npy_ushort));
  set(NPY_INT, kDLInt, sizeof(npy_int));
  set(NPY_UINT, kDLUInt, sizeof(npy_uint));
  set(NPY_LONG, kDLInt, sizeof(npy_long));
  set(NPY_ULONG, kDLUInt, sizeof(npy_ulong));
  set(NPY_LONGLONG, kDLInt, sizeof(npy_longlong));
  set(NPY_ULONGLONG, kDLUInt, sizeof(npy_ulonglong));
  set(NPY_HALF, kDLFloat, sizeof(npy_half));
  set(NPY_FLOAT, kDLFloat, sizeof(npy_float));
  set(NPY_DOUBLE, kDLFloat, sizeof(npy_double));
  set(NPY_CFLOAT, kDLComplex, 2 * sizeof(npy_float));
  set(NPY_CDOUBLE, kDLComplex, 2 * sizeof(npy_double));
  return t;
}
constexpr std::array<NumpyDTypeEntry, kNumpyTableSize> kNumpyDTypes = MakeNumpyDTypeTable();

/// DLPack dtype of a NumPy type number; false when there is none (fall back to __dlpack__).
KFFI_INLINE bool NumpyDType(int type_num, DLDataType* out) {
  if (static_cast<unsigned>(type_num) >= static_cast<unsigned>(kNumpyTableSize)) return false;
  const NumpyDTypeEntry e = kNumpyDTypes[static_cast<size_t>(type_num)];
  if (e.bits == 0) return false;
  *out = DLDataType{e.code, e.bits, 1};
  return true;
}

/// DLPack dtypes of ml_dtypes' NumPy types (the arrays JAX and data loaders keep on the host), by
/// their scalar type's name: ml_dtypes registers them as user dtypes, whose type numbers depend
/// on the order of registration. Byte-sized types only: ml_dtypes keeps one sub-byte value
/// (int4, float4_e2m1fn) per byte, which DLPack's 4-bit dtypes pack two to a byte.
struct MlDTypeEntry {
  const char* name;
  uint8_t code;
  uint8_t bits;
};
constexpr MlDTypeEntry kMlDTypes[] = {
    {"ml_dtypes.bfloat16", kDLBfloat, 16},
    {"ml_dtypes.float8_e3m4", kDLFloat8_e3m4, 8},
    {"ml_dtypes.float8_e4m3", kDLFloat8_e4m3, 8},
    {"ml_dtypes.float8_e4m3b11fnuz", kDLFloat8_e4m3b11fnuz, 8},
    {"ml_dtypes.float8_e4m3fn", kDLFloat8_e4m3fn, 8},
    {"ml_dtypes.float8_e4m3fnuz", kDLFloat8_e4m3fnuz, 8},
    {"ml_dtypes.float8_e5m2", kDLFloat8_e5m2, 8},
    {"ml_dtypes.float8_e5m2fnuz", kDLFloat8_e5m2fnuz, 8},
    {"ml_dtypes.float8_e8m0fnu", kDLFloat8_e8m0fnu, 8},
};

/// The user dtypes seen so far (their scalar types) and what they are, so that a name is matched
/// once per type. Read and written with the GIL held.
struct UserDTypeSeen {
  const PyTypeObject* scalar;
  DLDataType dtype;  // bits 0: no DLPack dtype
};
inline UserDTypeSeen g_user_dtypes[16];
inline size_t g_num_user_dtypes = 0;

/// DLPack dtype of a user-defined NumPy dtype (ml_dtypes'); false when there is none.
KFFI_NOINLINE inline bool UserDType(const PyArray_Descr* d, DLDataType* out) {
  const PyTypeObject* scalar = d->typeobj;
  for (size_t i = 0; i < g_num_user_dtypes; ++i) {
    if (g_user_dtypes[i].scalar == scalar) {
      *out = g_user_dtypes[i].dtype;
      return out->bits != 0;
    }
  }
  DLDataType found{0, 0, 0};
  for (const MlDTypeEntry& e : kMlDTypes) {
    if (scalar == nullptr || std::strcmp(scalar->tp_name, e.name) != 0) continue;
    // The item size as the dtype says it (np.dtype's C getter; the struct field moved between
    // NumPy 1 and 2): a type that only borrowed the name is not read with the wrong size.
    PyRef size(PyObject_GetAttrString(reinterpret_cast<PyObject*>(const_cast<PyArray_Descr*>(d)),
                                      "itemsize"));
    const long n = size ? PyLong_AsLong(size.get()) : -1;
    if (n == -1) PyErr_Clear();
    if (n == e.bits / 8) found = DLDataType{e.code, e.bits, 1};
  }
  if (g_num_user_dtypes < sizeof(g_user_dtypes) / sizeof(g_user_dtypes[0])) {
    g_user_dtypes[g_num_user_dtypes++] = UserDTypeSeen{scalar, found};
  }
  *out = found;
  return found.bits != 0;
}

/// The DLPack dtype of an array's dtype: NumPy's own, or ml_dtypes'; false for none.
KFFI_INLINE bool ArrayDType(const PyArray_Descr* d, DLDataType* out) {
  if (KFFI_LIKELY(NumpyDType(d->type_num, out))) return true;
  return d->type_num >= NPY_USERDEF && UserDType(d, out);
}

bool IsNativeByteOrder(char byteorder) {
#if NPY_BYTE_ORDER == NPY_LITTLE_ENDIAN
  return byteorder != '>';
#else
  return byteorder != '<';
#endif
}

/// Fills a borrowed DLTensor straight from a NumPy array's fields; false to fall back.
KFFI_INLINE bool FillFromNumpy(PyObject* obj, DLTensor* t, CallContext* ctx, bool* read_only,
                               bool* fits) {
  auto* a = reinterpret_cast<PyArrayObject*>(obj);
  const PyArray_Descr* d = PyArray_DESCR(a);
  if (d == nullptr || !IsNativeByteOrder(d->byteorder)) return false;
  if (!ArrayDType(d, &t->dtype)) return false;
  const int nd = PyArray_NDIM(a);
  const int itemsize = t->dtype.bits / 8;
  int64_t* strides = ctx->NewInt64Buffer(static_cast<size_t>(nd));
  // Every item size here is a power of two: mask and shift instead of dividing.
  const int64_t mask = itemsize - 1;
  const int shift = __builtin_ctz(static_cast<unsigned>(itemsize));
  const npy_intp* byte_strides = PyArray_STRIDES(a);
  const npy_intp* dims = PyArray_DIMS(a);
  uint64_t bits = 0;  // every dimension and |byte stride| (less one for negatives), OR-ed
  for (int i = 0; i < nd; ++i) {
    const int64_t bytes = byte_strides[i];
    if ((bytes & mask) != 0) return false;  // DLPack strides count elements
    strides[i] = bytes >> shift;            // exact: a multiple of itemsize (sign kept)
    bits |= static_cast<uint64_t>(bytes ^ (bytes >> 63)) | static_cast<uint64_t>(dims[i]);
  }
  t->data = PyArray_DATA(a);
  t->device = DLDevice{kDLCPU, 0};
  t->ndim = nd;
  static_assert(sizeof(npy_intp) == sizeof(int64_t), "64-bit platforms only");
  t->shape = reinterpret_cast<int64_t*>(PyArray_DIMS(a));
  t->strides = strides;
  t->byte_offset = 0;
  *read_only = (PyArray_FLAGS(a) & NPY_ARRAY_WRITEABLE) == 0;
  // NumPy bounds the element count and byte size of every array it makes, but strides are free
  // (numpy.lib.stride_tricks.as_strided): the farthest byte they reach must fit. With every
  // dimension and |stride| at most 2**27 it is below nd * 2**54 <= 2**60 (nd <= 64); beyond,
  // the exact check decides.
  *fits = bits < (uint64_t{1} << 27) || LayoutFitsExact(t);
  return true;
}

}  // namespace
}  // namespace pyglue
}  // namespace kffi

#endif  // KFFI_PYTHON_SRC_PY_NUMPY_H_
