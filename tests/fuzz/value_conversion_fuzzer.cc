// tests/fuzz/value_conversion_fuzzer.cc: libFuzzer target for values crossing the C ABI.
//
// The input is a small program that builds KFFIAny values of every type index (plain values with
// any payload bits, strings, borrowed DLTensor* with hostile layouts, Tensor objects imported
// through DLPack, arrays, maps, functions, objects of unregistered types, unknown type indices)
// and passes them through KFFIFunctionCall to typed C++ functions (one per kind of parameter),
// to a packed function that owns, stores, hashes and compares them, and to the container
// builders. Every call must return 0 or -1 with a well-formed error of an expected kind (never
// InternalError), and nothing may leak (LeakSanitizer runs after each input).
//
// Values are valid as the ABI defines them (pointers point at live memory, SmallStr lengths are
// 0..7, a borrowed DLTensor's shape holds ndim entries); everything else is hostile.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/any.h>
#include <kffi/container/containers.h>
#include <kffi/function.h>
#include <kffi/optional.h>
#include <kffi/string.h>
#include <kffi/tensor.h>
#include <kffi/variant.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

namespace {

// ---- the input -------------------------------------------------------------------------------

class Input {
 public:
  Input(const uint8_t* data, size_t size) : p_(data), n_(size) {}
  bool empty() const { return n_ == 0; }
  uint8_t U8() {
    if (n_ == 0) return 0;
    --n_;
    return *p_++;
  }
  uint64_t U64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = (v << 8) | U8();
    return v;
  }
  /// Sizes, strides and ints: mostly edge values, sometimes raw bits.
  int64_t Int() {
    static constexpr int64_t kEdges[] = {0,
                                         1,
                                         -1,
                                         2,
                                         3,
                                         7,
                                         8,
                                         16,
                                         1000,
                                         -7,
                                         INT32_MAX,
                                         INT32_MIN,
                                         int64_t{1} << 31,
                                         int64_t{1} << 32,
                                         int64_t{1} << 40,
                                         int64_t{1} << 53,
                                         (int64_t{1} << 53) + 1,
                                         int64_t{1} << 60,
                                         (int64_t{1} << 62) + 1,
                                         INT64_MAX,
                                         INT64_MAX - 1,
                                         INT64_MIN,
                                         INT64_MIN + 1};
    uint8_t s = U8();
    if (s < 200) return kEdges[s % (sizeof(kEdges) / sizeof(kEdges[0]))];
    return static_cast<int64_t>(U64());
  }
  /// Bytes for a string: length from the input (bounded), contents copied.
  std::string Bytes(size_t max) {
    size_t len = U8() % (max + 1);
    std::string s;
    for (size_t i = 0; i < len && !empty(); ++i) s += static_cast<char>(U8());
    return s;
  }

 private:
  const uint8_t* p_;
  size_t n_;
};

// ---- everything the values of one input point at ----------------------------------------------

/// Most shape entries a fuzzed DLTensor has room for: more than the runtime accepts (1024), so
/// a DLTensor whose ndim exceeds this must be refused before its shape is read.
constexpr size_t kShapeRoom = 1100;
alignas(64) char g_data[4096];  // what every tensor's data points at (never read or written)

struct Arena {
  std::deque<std::string> strings;
  std::deque<std::vector<int64_t>> dims;
  std::deque<DLTensor> tensors;
  std::deque<KFFIByteArray> byte_arrays;
  std::deque<KFFIObject*> rvalue_slots;  // ObjectRValueRef slots; released if not moved from
  std::vector<KFFIObject*> owned;        // objects made for the values, released at the end

  ~Arena() {
    for (KFFIObject* o : owned) KFFIObjectDecRef(o);
    for (KFFIObject* o : rvalue_slots) KFFIObjectDecRef(o);
  }
  KFFIAny Keep(KFFIObject* obj) {
    owned.push_back(obj);
    KFFIAny v;
    kffi::details::SetObject(&v, obj);
    return v;
  }
};

KFFIAny Pod(int32_t index, uint64_t payload) {
  KFFIAny v;
  kffi::details::SetPOD(&v, index);
  v.v_uint64 = payload;
  return v;
}

/// The kinds of error a conversion may raise. InternalError (a broken invariant) or anything
/// else is a bug.
bool ExpectedKind(const std::string& kind) {
  return kind == "TypeError" || kind == "ValueError" || kind == "IndexError" ||
         kind == "KeyError" || kind == "OverflowError" || kind == "MemoryError" ||
         kind == "RuntimeError";
}

/// Takes the raised error after a call returned -1 and checks that it is well formed.
void CheckRaisedError() {
  KFFIObjectHandle err = nullptr;
  KFFIErrorMoveFromRaised(&err);
  if (err == nullptr) __builtin_trap();  // -1 without an error
  if (static_cast<KFFIObject*>(err)->type_index != kKFFIError) __builtin_trap();
  const KFFIErrorCell* cell = KFFIErrorGetCellPtr(err);
  std::string kind(cell->kind.data, cell->kind.size);
  if (!ExpectedKind(kind) || cell->message.size == 0) __builtin_trap();
  KFFIObjectDecRef(err);
}

void ReleaseResult(KFFIAny* result) {
  if (result->type_index >= kKFFIStaticObjectBegin) KFFIObjectDecRef(result->v_obj);
  kffi::details::SetNone(result);
}

/// Calls f with args; checks the protocol; releases the result.
void CallChecked(const kffi::Function& f, const KFFIAny* args, int32_t n) {
  KFFIAny result;
  kffi::details::SetNone(&result);
  KFFIObjectHandle h = kffi::details::ObjectUnsafe::GetHandle(kffi::details::ObjectRefData(f));
  int rc = KFFIFunctionCall(h, args, n, &result);
  if (rc == -1) {
    CheckRaisedError();
    if (result.type_index != kKFFINone) __builtin_trap();  // a failed call leaves no result
    return;
  }
  if (rc != 0) __builtin_trap();
  ReleaseResult(&result);
}

// ---- tensors ----------------------------------------------------------------------------------

DLDataType FuzzDType(Input& in) {
  static constexpr uint8_t kBits[] = {0, 1, 4, 8, 16, 32, 64, 128, 255, 6};
  static constexpr uint16_t kLanes[] = {1, 1, 1, 2, 4, 0, 65535};
  DLDataType d;
  d.code = static_cast<uint8_t>(in.U8() % 12);
  d.bits = kBits[in.U8() % sizeof(kBits)];
  d.lanes = kLanes[in.U8() % (sizeof(kLanes) / sizeof(kLanes[0]))];
  return d;
}

/// A DLTensor with a fuzzed layout whose shape (and strides) hold room for kShapeRoom entries.
/// borrowed: ndim in 0..64 (a borrowed DLTensor* must describe itself); otherwise any ndim, for
/// the importer to refuse.
DLTensor* FuzzDLTensor(Input& in, Arena& a, bool borrowed) {
  DLTensor& t = a.tensors.emplace_back();
  uint8_t sel = in.U8();
  // The ndim the DLTensor carries (an int32: a fuzzed int64 wraps).
  int32_t ndim = sel % 6;  // usually small
  if (sel >= 200) ndim = borrowed ? sel % 65 : static_cast<int32_t>(in.Int());
  // As many entries as ndim says (at most kShapeRoom: more must be refused unread).
  const size_t room =
      ndim <= 8 ? 8 : static_cast<size_t>(ndim < int32_t{kShapeRoom} ? ndim : kShapeRoom);
  std::vector<int64_t>& shape = a.dims.emplace_back(room, 1);
  std::vector<int64_t>& strides = a.dims.emplace_back(room, 1);
  const size_t filled = ndim > 0 ? static_cast<size_t>(ndim < 8 ? ndim : 8) : 0;
  for (size_t i = 0; i < filled; ++i) shape[i] = in.U8() < 128 ? in.U8() % 5 : in.Int();
  for (size_t i = 0; i < filled; ++i) strides[i] = in.U8() < 128 ? in.U8() % 7 - 1 : in.Int();
  t.data = in.U8() % 8 == 0 ? nullptr : g_data + in.U8() % 64;
  t.device = DLDevice{static_cast<DLDeviceType>(in.U8() % 20), static_cast<int32_t>(in.Int())};
  t.ndim = ndim;
  t.dtype = FuzzDType(in);
  const uint8_t layout = in.U8();
  t.shape = (!borrowed && layout % 16 == 0) ? nullptr : shape.data();
  t.strides = layout % 3 == 0 ? nullptr : strides.data();
  t.byte_offset = in.U8() < 220 ? in.U8() % 16 : static_cast<uint64_t>(in.Int());
  return &t;
}

struct ImportedTensor {
  DLManagedTensorVersioned managed;
  std::vector<int64_t> shape, strides;
};

/// A Tensor object imported through DLPack with a fuzzed layout and flags; None when the
/// importer refuses it (then its error must be well formed and the deleter must have run).
KFFIAny FuzzTensorObject(Input& in, Arena& a) {
  DLTensor* t = FuzzDLTensor(in, a, /*borrowed=*/false);
  auto holder = std::make_unique<ImportedTensor>();
  holder->shape.assign(a.dims[a.dims.size() - 2].begin(), a.dims[a.dims.size() - 2].end());
  holder->strides.assign(a.dims.back().begin(), a.dims.back().end());
  holder->managed.version = DLPackVersion{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
  holder->managed.flags = in.U8() % 4;
  holder->managed.dl_tensor = *t;
  if (t->shape != nullptr) holder->managed.dl_tensor.shape = holder->shape.data();
  if (t->strides != nullptr) holder->managed.dl_tensor.strides = holder->strides.data();
  holder->managed.manager_ctx = holder.get();
  holder->managed.deleter = [](DLManagedTensorVersioned* self) {
    delete static_cast<ImportedTensor*>(self->manager_ctx);
  };
  const bool versioned = in.U8() % 4 != 0;
  const int32_t align = in.U8() % 4 == 0 ? static_cast<int32_t>(in.Int()) : 0;
  const int32_t contiguous = in.U8() % 4 == 0;
  KFFIObjectHandle h = nullptr;
  int rc;
  if (versioned) {
    rc = KFFITensorFromDLPackVersioned(&holder.release()->managed, align, contiguous, &h);
  } else {
    // The unversioned struct is the versioned one's tail (same dl_tensor, manager_ctx, deleter).
    struct Unversioned {
      DLManagedTensor mt;
      std::unique_ptr<ImportedTensor> inner;
    };
    auto* u = new Unversioned();
    u->inner = std::move(holder);
    u->mt.dl_tensor = u->inner->managed.dl_tensor;
    u->mt.manager_ctx = u;
    u->mt.deleter = [](DLManagedTensor* self) {
      delete static_cast<Unversioned*>(self->manager_ctx);
    };
    rc = KFFITensorFromDLPack(&u->mt, align, contiguous, &h);
  }
  if (rc != 0) {
    CheckRaisedError();
    return Pod(kKFFINone, 0);
  }
  uint64_t flags = 0;
  if (KFFITensorGetFlags(h, &flags) != 0) __builtin_trap();
  return a.Keep(static_cast<KFFIObject*>(h));
}

/// A Tensor kffi allocates for a fuzzed (small or impossible) shape; None when refused.
KFFIAny FuzzAllocatedTensor(Input& in, Arena& a) {
  std::vector<int64_t> shape(in.U8() % 4);
  for (int64_t& d : shape) d = in.U8() < 200 ? in.U8() % 6 : in.Int();
  DLDataType dtype = FuzzDType(in);
  // Sizes the runtime accepts but that are too large to allocate here are left out (the point is
  // the check, not the allocator).
  int64_t numel = 1;
  bool overflow = false;
  for (int64_t d : shape) overflow |= d >= 0 && kffi::details::MulOverflow(numel, d, &numel);
  const bool allocatable = !overflow && numel <= 64 && dtype.lanes <= 4;
  bool any_negative = false;
  for (int64_t d : shape) any_negative |= d < 0;
  if (!allocatable && !any_negative && !overflow) return Pod(kKFFINone, 0);
  try {
    kffi::Tensor t = kffi::Tensor::FromEnvAlloc(kffi::IntArrayView(shape.data(), shape.size()),
                                                dtype, DLDevice{kDLCPU, 0});
    KFFIAny v;
    kffi::TypeTraits<kffi::Tensor>::MoveToAny(std::move(t), &v);
    return a.Keep(v.v_obj);
  } catch (const kffi::Error& e) {
    if (!ExpectedKind(e.kind())) __builtin_trap();
    return Pod(kKFFINone, 0);
  }
}

// ---- values -----------------------------------------------------------------------------------

KFFIAny FuzzValue(Input& in, Arena& a, int depth);

/// A typed function value: int -> int.
kffi::Function& IncrementFunction() {
  static kffi::Function* f = new kffi::Function(kffi::Function::FromTyped(
      [](int64_t x) { return static_cast<int64_t>(static_cast<uint64_t>(x) + 1); }, "inc"));
  return *f;
}

template <typename Seq>
KFFIAny FuzzSequence(Input& in, Arena& a, int depth) {
  Seq seq;
  const int n = in.U8() % 6;
  for (int i = 0; i < n && !in.empty(); ++i) {
    KFFIAny v = FuzzValue(in, a, depth + 1);
    try {
      seq.push_back(kffi::Any(reinterpret_cast<const kffi::AnyView&>(v)));
    } catch (const kffi::Error& e) {
      if (!ExpectedKind(e.kind())) __builtin_trap();
    }
  }
  KFFIAny out;
  kffi::TypeTraits<Seq>::MoveToAny(std::move(seq), &out);
  return a.Keep(out.v_obj);
}

template <typename MapT>
KFFIAny FuzzMapping(Input& in, Arena& a, int depth) {
  MapT map;
  const int n = in.U8() % 6;
  for (int i = 0; i < n && !in.empty(); ++i) {
    KFFIAny k = FuzzValue(in, a, depth + 1);
    KFFIAny v = FuzzValue(in, a, depth + 1);
    try {
      map.Set(kffi::Any(reinterpret_cast<const kffi::AnyView&>(k)),
              kffi::Any(reinterpret_cast<const kffi::AnyView&>(v)));
    } catch (const kffi::Error& e) {
      if (!ExpectedKind(e.kind())) __builtin_trap();
    }
  }
  KFFIAny out;
  kffi::TypeTraits<MapT>::MoveToAny(std::move(map), &out);
  return a.Keep(out.v_obj);
}

KFFIAny FuzzValue(Input& in, Arena& a, int depth) {
  const uint8_t kind = in.U8();
  // Deep nesting is for the converters' own limits (tested elsewhere); here it stays shallow.
  const bool leaf_only = depth >= 4;
  switch (kind % 32) {
    case 0:
      return Pod(kKFFINone, 0);
    case 1:
      return Pod(kKFFIInt, static_cast<uint64_t>(in.Int()));
    case 2:
      return Pod(kKFFIBool, in.U8() < 200 ? in.U8() % 2 : static_cast<uint64_t>(in.Int()));
    case 3:
      return Pod(kKFFIFloat, in.U64());
    case 4:
      return Pod(kKFFIOpaquePtr, static_cast<uint64_t>(in.Int()));
    case 5: {
      KFFIAny v = Pod(kKFFIDataType, 0);
      v.v_dtype = FuzzDType(in);
      return v;
    }
    case 6: {
      KFFIAny v = Pod(kKFFIDevice, 0);
      v.v_device = DLDevice{static_cast<DLDeviceType>(in.Int()), static_cast<int32_t>(in.Int())};
      return v;
    }
    case 7:
    case 8: {
      KFFIAny v = Pod(kKFFIDLTensorPtr, 0);
      v.v_ptr = FuzzDLTensor(in, a, /*borrowed=*/true);
      v.tensor_flags = in.U8() % 8 == 0 ? static_cast<uint32_t>(in.U64()) : in.U8() % 2;
      return v;
    }
    case 9: {
      KFFIAny v = Pod(kKFFIRawStr, 0);
      v.v_c_str = a.strings.emplace_back(in.Bytes(40)).c_str();  // stops at its first NUL
      return v;
    }
    case 10: {
      const std::string& s = a.strings.emplace_back(in.Bytes(40));
      KFFIByteArray& ba = a.byte_arrays.emplace_back(KFFIByteArray{s.data(), s.size()});
      KFFIAny v = Pod(kKFFIByteArrayPtr, 0);
      v.v_ptr = &ba;
      return v;
    }
    case 11: {
      // The slot holds a fresh object (or NULL) that a callee may move out.
      KFFIObject*& slot = a.rvalue_slots.emplace_back(nullptr);
      if (!leaf_only && in.U8() % 4 != 0) {
        KFFIAny inner = FuzzValue(in, a, depth + 1);
        if (inner.type_index >= kKFFIStaticObjectBegin) {
          kffi::details::HeaderIncRef(inner.v_obj);
          slot = inner.v_obj;
        }
      }
      KFFIAny v = Pod(kKFFIObjectRValueRef, 0);
      v.v_ptr = &slot;
      return v;
    }
    case 12:
    case 13: {
      std::string s = in.Bytes(7);
      KFFIAny v;
      kffi::details::SetSmallBytes(&v, kind % 32 == 12 ? kKFFISmallStr : kKFFISmallBytes, s.data(),
                                   s.size());
      return v;
    }
    case 14: {
      // A type index no value has: below 0, between the plain kinds and the objects.
      static constexpr int32_t kUnknown[] = {-1, -2, 13, 30, 63, INT32_MIN};
      return Pod(kUnknown[in.U8() % 6], in.U64());
    }
    case 15:
    case 16: {
      std::string s = in.Bytes(64);
      KFFIByteArray ba{s.data(), s.size()};
      KFFIAny v;
      int rc = kind % 32 == 15 ? KFFIStringFromByteArray(&ba, &v) : KFFIBytesFromByteArray(&ba, &v);
      if (rc != 0) __builtin_trap();
      if (v.type_index >= kKFFIStaticObjectBegin) a.Keep(v.v_obj);
      return v;
    }
    case 17: {
      std::vector<int64_t> dims(in.U8() % 5);
      for (int64_t& d : dims) d = in.Int();
      KFFIAny v;
      kffi::TypeTraits<kffi::Shape>::MoveToAny(kffi::Shape(dims), &v);
      return a.Keep(v.v_obj);
    }
    case 18:
      return FuzzTensorObject(in, a);
    case 19:
      return FuzzAllocatedTensor(in, a);
    case 20:
      return leaf_only ? Pod(kKFFIInt, 1) : FuzzSequence<kffi::Array<kffi::Any>>(in, a, depth);
    case 21:
      return leaf_only ? Pod(kKFFIInt, 2) : FuzzSequence<kffi::List<kffi::Any>>(in, a, depth);
    case 22:
      return leaf_only ? Pod(kKFFIInt, 3)
                       : FuzzMapping<kffi::Map<kffi::Any, kffi::Any>>(in, a, depth);
    case 23:
      return leaf_only ? Pod(kKFFIInt, 4)
                       : FuzzMapping<kffi::Dict<kffi::Any, kffi::Any>>(in, a, depth);
    case 24: {
      KFFIObject* f = static_cast<KFFIObject*>(kffi::details::ObjectUnsafe::GetHandle(
          kffi::details::ObjectRefData(IncrementFunction())));
      kffi::details::HeaderIncRef(f);
      return a.Keep(f);
    }
    case 25: {
      std::string kind_text = in.Bytes(12), msg = in.Bytes(30);
      KFFIByteArray k{kind_text.data(), kind_text.size()}, m{msg.data(), msg.size()};
      KFFIObjectHandle e = nullptr;
      if (KFFIErrorCreate(&k, &m, nullptr, &e) != 0) __builtin_trap();
      return a.Keep(static_cast<KFFIObject*>(e));
    }
    case 26: {
      // An object of a type index no library registered (a foreign runtime's type), or of the
      // opaque Python-object type.
      static constexpr int32_t kIndices[] = {kKFFIOpaquePyObject, kKFFIDynObjectBegin + 5000,
                                             kKFFIObject, INT32_MAX};
      KFFIObjectHandle o = nullptr;
      if (KFFIObjectCreateOpaque(nullptr, kIndices[in.U8() % 4], nullptr, &o) != 0)
        __builtin_trap();
      return a.Keep(static_cast<KFFIObject*>(o));
    }
    case 27: {
      KFFIObjectHandle m = nullptr;
      if (KFFIModuleGetSystemLib(&m) != 0) __builtin_trap();
      return a.Keep(static_cast<KFFIObject*>(m));
    }
    default: {
      if (depth > 8) return Pod(kKFFINone, 0);
      // A well-formed value with nonzero padding (a flagged object argument, or a plain value
      // from a careless producer).
      KFFIAny v = FuzzValue(in, a, depth + 1);
      if (v.type_index != kKFFISmallStr && v.type_index != kKFFISmallBytes) {
        v.zero_padding = static_cast<uint32_t>(in.U64());
      }
      return v;
    }
  }
}

// ---- the callees --------------------------------------------------------------------------------

/// Reads everything a kernel may read of a tensor's layout (never its data).
template <typename T>
int64_t TouchLayout(const T& x) {
  // Unsigned: the values are hostile, only the reads matter.
  uint64_t acc = static_cast<uint64_t>(x.ndim()) + static_cast<uint64_t>(x.element_size()) +
                 static_cast<uint64_t>(x.is_contiguous());
  acc += static_cast<uint64_t>(x.numel());
  for (int64_t s : x.strides()) acc ^= static_cast<uint64_t>(s);
  if (x.ndim() > 0) acc ^= static_cast<uint64_t>(x.size(-1) ^ x.stride(0));
  return static_cast<int64_t>(acc >> 1);
}

struct Callee {
  kffi::Function f;
  int32_t arity;
};

std::vector<Callee> MakeCallees() {
  using kffi::Any;
  using kffi::Array;
  using kffi::Function;
  using kffi::Map;
  using kffi::String;
  std::vector<Callee> f;
  auto add = [&f](Function fn) {
    // The arity is in the signature text: count the parameters of "name(a: T, ...) -> R".
    f.push_back(Callee{std::move(fn), 0});
  };
  add(Function::FromTyped(
      [](int64_t a, double b, bool c) { return static_cast<double>(a) * b + c; }, "scalars"));
  add(Function::FromTyped(
      [](std::string a, String b) { return static_cast<int64_t>(a.size() + b.size()); }, "strs"));
  add(Function::FromTyped(
      [](DLDataType d, DLDevice dev, void* p) {
        return static_cast<int64_t>(kffi::details::DataTypeToString(d).size() +
                                    static_cast<uint32_t>(dev.device_id) +
                                    reinterpret_cast<uintptr_t>(p));
      },
      "dtype_device_ptr"));
  add(Function::FromTyped([](kffi::ConstTensorView x) { return TouchLayout(x); }, "view"));
  // A parameter that may write (it refuses read-only memory); the fake data is never written.
  add(Function::FromTyped(
      [](kffi::TensorView y) { return TouchLayout(y) ^ static_cast<int64_t>(y.is_writable()); },
      "mut_view"));
  add(Function::FromTyped(
      [](kffi::Tensor x) {
        int64_t acc = TouchLayout(x) ^ static_cast<int64_t>(x.is_read_only());
        DLManagedTensorVersioned* mt = x.ToDLPackVersioned();
        mt->deleter(mt);
        return acc == 42 ? x : x.as_read_only();
      },
      "tensor"));
  add(Function::FromTyped([](DLTensor* x) { return static_cast<int64_t>(x->ndim); }, "dltensor"));
  add(Function::FromTyped([](const DLTensor* x) { return static_cast<int64_t>(x->ndim); },
                          "const_dltensor"));
  add(Function::FromTyped(
      [](kffi::Optional<int64_t> a, kffi::Optional<kffi::ConstTensorView> b,
         kffi::Optional<String> c) {
        return (a.has_value() ? *a : 0) ^ (b.has_value() ? TouchLayout(*b) : 0) ^
               static_cast<int64_t>(c.has_value() ? c->size() : 0);
      },
      "optionals"));
  add(Function::FromTyped(
      [](Array<int64_t> xs) {
        uint64_t s = 0;
        for (int64_t x : xs) s += static_cast<uint64_t>(x);
        return s == 42 ? Array<int64_t>() : xs;
      },
      "int_array"));
  add(Function::FromTyped(
      [](Array<Any> xs) {
        std::string keys;
        for (const Any& x : xs) keys += x.GetTypeKey();
        return String(keys);
      },
      "any_array"));
  add(Function::FromTyped(
      [](Array<Array<double>> xs) {
        double s = 0;
        for (const Array<double>& row : xs) {
          for (double v : row) s += v;
        }
        return s;
      },
      "nested_array"));
  add(Function::FromTyped(
      [](Map<String, int64_t> m) {
        int64_t n = 0;
        for (auto kv : m) n += static_cast<int64_t>(kv.first.size());
        return n + m.count(String("a"));
      },
      "str_int_map"));
  add(Function::FromTyped(
      [](Map<Any, Any> m) {
        int64_t hits = 0;
        for (auto kv : m) hits += m.count(kv.first);
        if (hits != m.size()) __builtin_trap();  // every key finds itself
        return m;
      },
      "any_map"));
  add(Function::FromTyped([](Function g) { return g(int64_t{41}); }, "function"));
  add(Function::FromTyped(
      [](kffi::Shape s) {
        int64_t n = 0;
        for (int64_t d : s) n ^= d;
        return n == 42 ? kffi::Shape() : s;
      },
      "shape"));
  add(Function::FromTyped(
      [](std::tuple<int64_t, String> t) {
        return std::get<0>(t) ^ static_cast<int64_t>(std::get<1>(t).size());
      },
      "tuple"));
  add(Function::FromTyped(
      [](std::variant<int64_t, String, kffi::Tensor> v) { return static_cast<int64_t>(v.index()); },
      "variant"));
  add(Function::FromTyped(
      [](kffi::List<Any> l, kffi::Dict<Any, Any> d) {
        l.push_back(Any(d));
        return static_cast<int64_t>(l.size() + d.size());
      },
      "list_dict"));
  add(Function::FromTyped([](Any x, kffi::ObjectRef o) { return o.defined() ? x : Any(); },
                          "any_object"));
  add(Function::FromTyped([](kffi::Bytes b) { return b; }, "bytes"));
  return f;
}

/// Owns, stores, hashes and compares every argument: the container and Any paths.
void PackedStress(kffi::PackedArgs args, kffi::Any* rv) {
  kffi::Array<kffi::Any> all;
  kffi::Map<kffi::Any, kffi::Any> by_value;
  kffi::Dict<kffi::Any, kffi::Any> dict;
  for (int32_t i = 0; i < args.size(); ++i) {
    kffi::Any owned(args[i]);  // may throw (e.g. a refused tensor layout)
    all.push_back(owned);
    by_value.Set(owned, kffi::Any(static_cast<int64_t>(i)));
    dict.Set(owned, all);
    if (by_value.count(owned) != 1) __builtin_trap();  // a stored key is found again
    (void)owned.try_cast<int64_t>();
    (void)owned.try_cast<double>();
    (void)owned.try_cast<kffi::String>();
    (void)owned.try_cast<DLDataType>();
    (void)owned.try_cast<kffi::Array<kffi::Any>>();
    (void)owned.GetTypeKey();
  }
  for (auto kv : by_value) {
    if (!(kv.first == kv.first)) __builtin_trap();
  }
  dict.erase(args.size() > 0 ? kffi::AnyView(args[0]) : kffi::AnyView());
  *rv = by_value;
}

/// The callees, each with its parameter count (read from the count error that calling with no
/// arguments raises: "<name>: expected N arguments, got 0 (`<signature>`)").
const std::vector<Callee>& Callees() {
  static auto* callees = [] {
    auto* v = new std::vector<Callee>(MakeCallees());
    for (Callee& c : *v) {
      try {
        c.f.CallPacked(kffi::PackedArgs(nullptr, 0));
      } catch (const kffi::Error& e) {
        const std::string& m = e.message();
        size_t at = m.find(": expected ");
        if (at != std::string::npos) c.arity = std::atoi(m.c_str() + at + 12);
      }
    }
    return v;
  }();
  return *callees;
}

const kffi::Function& Stress() {
  static auto* f = new kffi::Function(kffi::Function::FromPacked(PackedStress, "stress"));
  return *f;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  Arena arena;
  const uint8_t target = in.U8();
  const int n = in.U8() % 5;
  std::vector<KFFIAny> args;
  for (int i = 0; i < n; ++i) args.push_back(FuzzValue(in, arena, 0));
  const std::vector<Callee>& callees = Callees();
  // Every callee once per input would be slow: the input picks two, called with their own
  // number of arguments when there are enough (else with all: a count mismatch), plus the
  // packed one with all.
  for (size_t pick : {target % callees.size(), (target / 32u + 7u) % callees.size()}) {
    const Callee& c = callees[pick];
    const int32_t count = c.arity <= n ? c.arity : n;
    CallChecked(c.f, args.data(), count);
  }
  CallChecked(Stress(), args.data(), static_cast<int32_t>(args.size()));
  // Each value on its own through the owned conversion.
  for (const KFFIAny& v : args) {
    KFFIAny owned;
    kffi::details::SetNone(&owned);
    if (KFFIAnyViewToOwnedAny(&v, &owned) != 0) {
      CheckRaisedError();
      continue;
    }
    if (owned.zero_padding != 0 && owned.type_index != kKFFISmallStr &&
        owned.type_index != kKFFISmallBytes) {
      __builtin_trap();  // stored values keep zero padding
    }
    ReleaseResult(&owned);
  }
  return 0;
}
