// tests/tvm_libs/tvm_structural_maps.cc: a TVM-FFI library that walks and mutates its own Maps and
// Dicts with apache-tvm-ffi's structural visitor and mutator, whose container hooks are the
// runtime's (on kffi's runtime: src/tvm_bridge/shim_structural.cc and tvm_map.cc). Built with
// apache-tvm-ffi's headers only. Each export builds its maps itself (maps do not cross between
// kffi and TVM-FFI code), small (up to 4 entries) or dense (more), and returns what the headers'
// own code then sees: visited values, mapped values found by key (the hash chains of a copy), the
// copy grown and shrunk by the headers' code, errors. Hostile maps (a Map's type index on fields
// that are not a map's) must give an error, never a read.
// SPDX-License-Identifier: Apache-2.0
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/dict.h>
#include <tvm/ffi/container/map.h>
#include <tvm/ffi/extra/structural_mutate.h>
#include <tvm/ffi/extra/structural_visit.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/string.h>

#include <cstdint>
#include <cstring>
#include <string>

namespace ffi = tvm::ffi;

namespace {

using AnyArray = ffi::Array<ffi::Any>;

ffi::String Key(int64_t i) { return ffi::String("key_" + std::to_string(i)); }

// n entries key_i -> i, except key_1 -> "same" (a string: a leaf the mutation leaves as it is).
template <typename M>
M Build(int64_t n) {
  M m;
  for (int64_t i = 0; i < n; ++i) {
    if (i == 1) {
      m.Set(Key(i), ffi::String("same"));
    } else {
      m.Set(Key(i), i);
    }
  }
  return m;
}

// Records the ints and strings it reaches (keys are strings: none may be reached).
class RecordingVisitorObj : public ffi::StructuralVisitorObj {
 public:
  AnyArray seen;
  RecordingVisitorObj() : ffi::StructuralVisitorObj(&kTable) {}
  static TVMFFIAny VisitAbi(ffi::StructuralVisitorObj* self, ffi::AnyView value) noexcept {
    auto* me = static_cast<RecordingVisitorObj*>(self);
    const int32_t t = value.type_index();
    if (t == ffi::TypeIndex::kTVMFFIInt || t == ffi::TypeIndex::kTVMFFIStr ||
        t == ffi::TypeIndex::kTVMFFISmallStr) {
      me->seen.push_back(ffi::Any(value));
      return ffi::AnyView(nullptr).CopyToTVMFFIAny();
    }
    return ffi::details::ExpectedUnsafe::MoveToTVMFFIAny(me->DefaultVisitExpected(value));
  }
  static inline const ffi::StructuralVisitorVTable kTable{&VisitAbi};
  TVM_FFI_DECLARE_OBJECT_INFO_FINAL("tvm_structural_maps.RecordingVisitor", RecordingVisitorObj,
                                    ffi::StructuralVisitorObj);
};

AnyArray Visit(const ffi::Any& root) {
  auto visitor = ffi::make_object<RecordingVisitorObj>();
  ffi::Expected<ffi::Optional<ffi::VisitInterrupt>> r = visitor->VisitExpected(root);
  if (r.is_err()) throw r.error();
  return visitor->seen;
}

// The values a visit of a map of n entries (in an Array, beside a nested Array) reaches, in order.
AnyArray VisitValues(int64_t n, bool dict) {
  ffi::Any map = dict ? ffi::Any(Build<ffi::Dict<ffi::String, ffi::Any>>(n))
                      : ffi::Any(Build<ffi::Map<ffi::String, ffi::Any>>(n));
  return Visit(AnyArray{int64_t{-1}, map, AnyArray{int64_t{-2}}});
}

ffi::Expected<ffi::Any> AddTen(int64_t v, ffi::StructuralMutatorObj*) { return ffi::Any(v + 10); }

// What a map of n entries (held twice, so copied on write) is mapped to by adding 10 to every
// int: [same object as the source?, size, each key's value found by lookup, the source's key_0,
// then, after the headers' code grows the result by 20 keys and erases key_0: size, has key_0,
// key_2's and extra_19's values].
template <typename M>
AnyArray MutateCopy(int64_t n) {
  M root = Build<M>(n);
  M keep = root;
  M out = ffi::StructuralMutate(root, AddTen).template cast<M>();
  AnyArray r{out.same_as(keep), static_cast<int64_t>(out.size())};
  for (int64_t i = 0; i < n; ++i) r.push_back(out.at(Key(i)));
  r.push_back(keep.at(Key(0)));
  for (int64_t j = 0; j < 20; ++j) out.Set(ffi::String("extra_" + std::to_string(j)), j);
  out.erase(Key(0));
  r.push_back(static_cast<int64_t>(out.size()));
  r.push_back(static_cast<int64_t>(out.count(Key(0))));
  r.push_back(out.at(Key(2)));
  r.push_back(out.at(ffi::String("extra_19")));
  return r;
}

AnyArray MutateCopyOf(int64_t n, bool dict) {
  return dict ? MutateCopy<ffi::Dict<ffi::String, ffi::Any>>(n)
              : MutateCopy<ffi::Map<ffi::String, ffi::Any>>(n);
}

// A map nobody else holds, whose values are Arrays nobody else holds, mutated in place: [same
// object?, the first item of each value, by key].
template <typename M>
AnyArray MutateInPlace(int64_t n) {
  M root;
  for (int64_t i = 0; i < n; ++i) root.Set(Key(i), AnyArray{i});
  const ffi::Object* before = root.get();
  M out = ffi::StructuralMutate(std::move(root), AddTen).template cast<M>();
  AnyArray r{out.get() == before};
  for (int64_t i = 0; i < n; ++i) r.push_back(out.at(Key(i)).template cast<AnyArray>()[0]);
  return r;
}

AnyArray MutateInPlaceOf(int64_t n, bool dict) {
  return dict ? MutateInPlace<ffi::Dict<ffi::String, ffi::Any>>(n)
              : MutateInPlace<ffi::Map<ffi::String, ffi::Any>>(n);
}

// A callback failing on the value 2 of a map of n entries: [the error's message, key_2's value in
// the source afterwards].
ffi::Array<ffi::Any> MutateError(int64_t n) {
  auto root = Build<ffi::Map<ffi::String, ffi::Any>>(n);
  auto keep = root;
  auto fail = [](int64_t v, ffi::StructuralMutatorObj*) -> ffi::Expected<ffi::Any> {
    if (v == 2) return ffi::Unexpected(ffi::Error("ValueError", "failed on 2", ""));
    return ffi::Any(v + 10);
  };
  ffi::Expected<ffi::Any> r = ffi::StructuralMutateExpected(root, fail);
  return {r.is_err() ? ffi::String(r.error().message()) : ffi::String("no error"), keep.at(Key(2))};
}

// A Dict of n entries whose mutation's callback adds an entry to it when it meets the value 0
// (libtvm_ffi does not guard against that; kffi's shim stops with an error): the error message.
ffi::String MutateChangingDict(int64_t n) {
  auto root = Build<ffi::Dict<ffi::String, ffi::Any>>(n);
  auto grow = [root](int64_t v, ffi::StructuralMutatorObj*) mutable -> ffi::Expected<ffi::Any> {
    if (v == 0) root.Set(ffi::String("added"), int64_t{-1});
    return ffi::Any(v + 10);
  };
  ffi::Expected<ffi::Any> r = ffi::StructuralMutateExpected(root, grow);
  return r.is_err() ? ffi::String(r.error().message()) : ffi::String("no error");
}

// An object with a Map's type index whose fields are not a TVM-FFI map's (which: 0 a small layout
// with more entries than room, 1 a slot count that is not a power of two, 2 a shift that does not
// fit the slots, 3 zeroed blocks, whose slots all look live, 4 blocks whose order list loops).
class FakeMapObj : public ffi::Object {
 public:
  void* data = nullptr;
  uint64_t size = 0;
  uint64_t slots = 0;
  void (*data_deleter)(void*) = nullptr;
  uint32_t fib_shift = 0;
  uint64_t head = 0;
  uint64_t tail = 0;
  alignas(8) unsigned char blocks[784] = {};
  TVM_FFI_DECLARE_OBJECT_INFO_FINAL("tvm_structural_maps.FakeMap", FakeMapObj, ffi::Object);
};

void NoFree(void*) {}

ffi::Any FakeMap(int64_t which) {
  auto fake = ffi::make_object<FakeMapObj>();
  fake->data = fake->blocks;
  fake->data_deleter = &NoFree;
  fake->slots = 16;
  fake->fib_shift = 60;
  if (which == 0) {
    fake->slots = (uint64_t{1} << 63) | 2;
    fake->size = 3;
  } else if (which == 1) {
    fake->slots = 12;
  } else if (which == 2) {
    fake->fib_shift = 59;
  } else if (which == 3) {
    fake->size = 16;  // every metadata byte 0: live
  } else {
    // two live slots, 0 and 1, whose order list goes 0 -> 1 -> 0
    std::memset(fake->blocks, 0xFF, 16);
    fake->blocks[0] = 0;
    fake->blocks[1] = 0;
    uint64_t links[4] = {~uint64_t{0}, 1, 0, 0};  // slot 0: prev none, next 1; slot 1: 0, 0
    std::memcpy(fake->blocks + 16 + 32, links, 16);
    std::memcpy(fake->blocks + 16 + 48 + 32, links + 2, 16);
    fake->size = 2;
    fake->head = 0;
    fake->tail = 1;
  }
  reinterpret_cast<TVMFFIObject*>(fake.get())->type_index = ffi::TypeIndex::kTVMFFIMap;
  return ffi::Any(ffi::ObjectRef(std::move(fake)));
}

// The error a visit (mutate false) or a mutation of an Array holding a FakeMap gives.
ffi::String FakeMapError(int64_t which, bool mutate) {
  AnyArray root{int64_t{1}, FakeMap(which)};
  if (mutate) {
    ffi::Expected<ffi::Any> r = ffi::StructuralMutateExpected(root, AddTen);
    return r.is_err() ? ffi::String(r.error().message()) : ffi::String("no error");
  }
  auto visitor = ffi::make_object<RecordingVisitorObj>();
  ffi::Expected<ffi::Optional<ffi::VisitInterrupt>> r = visitor->VisitExpected(root);
  return r.is_err() ? ffi::String(r.error().message()) : ffi::String("no error");
}

}  // namespace

TVM_FFI_DLL_EXPORT_TYPED_FUNC(visit_values, VisitValues);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(mutate_copy, MutateCopyOf);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(mutate_in_place, MutateInPlaceOf);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(mutate_error, MutateError);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(fake_map_error, FakeMapError);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(mutate_changing_dict, MutateChangingDict);
