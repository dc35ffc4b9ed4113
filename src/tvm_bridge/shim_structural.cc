// src/tvm_bridge/shim_structural.cc: the containers' hooks for TVM-FFI's structural visitor and
// mutator (type attributes `__s_visit__`, `__s_mutate__`, `__s_maybe_inplace_mutate__`).
//
// The visitor and mutator engines live in apache-tvm-ffi's headers, inline in the library that
// uses them; how they descend into an Array, List, Map or Dict is a hook its runtime registers
// for each container type. Without one a container is a leaf: a visit would skip everything in
// it. The hooks are native functions (an opaque pointer in the column) with the ABI the headers
// fix: TVMFFIAny hook(visitor, AnyView value) noexcept, returning None to go on, or the interrupt
// or Error that ends the walk. A visitor object starts with its dispatch table after the object
// header (StructuralVisitorObj::vtable_, the ABI the headers call stable), whose first entry
// visits a value.
//
// Visiting sequences is provided; maps are refused, as kffi lays them out differently from
// TVM-FFI (calls.cc). Mutation is not provided: its copy-on-write and in-place rules are the
// engine's, and a hook that got them slightly wrong would change what a caller shares. The mutate
// hooks return an Error that says so, rather than leave the containers unchanged without a word.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/container/array.h>
#include <kffi/container/list.h>

#include <cstring>
#include <string>
#include <vector>

#include "tvm_bridge/bridge_internal.h"

namespace kffi {
namespace tvmglue {
namespace {

using VisitAbi = KFFIAny (*)(void* visitor, KFFIAny value) noexcept;

// The visitor's dispatch table: the first field after the object header; its first entry visits.
VisitAbi VisitEntry(void* visitor) {
  const VisitAbi* table = nullptr;
  std::memcpy(&table, static_cast<char*>(visitor) + sizeof(KFFIObject), sizeof(table));
  return table == nullptr ? nullptr : table[0];
}

KFFIAny NoneValue() {
  KFFIAny none{};
  none.type_index = kKFFINone;
  return none;
}

KFFIAny ErrorValue(const char* kind, const std::string& message) {
  KFFIByteArray k{kind, std::strlen(kind)};
  KFFIByteArray m{message.data(), message.size()};
  KFFIByteArray bt{"", 0};
  KFFIAny out{};
  KFFIObjectHandle err = nullptr;
  if (KFFIErrorCreate(&k, &m, &bt, &err) != 0) {
    KFFIObjectHandle raised = nullptr;  // out of memory: take the error that says so instead
    KFFIErrorMoveFromRaised(&raised);
    err = raised;
  }
  out.type_index = err != nullptr ? kKFFIError : kKFFINone;
  out.v_obj = static_cast<KFFIObject*>(err);
  return out;
}

// Visits each value in turn; the first result that is not None ends the walk and is returned.
template <typename Values>
KFFIAny VisitAll(void* visitor, const Values& values) noexcept {
  VisitAbi visit = VisitEntry(visitor);
  if (visit == nullptr) return ErrorValue("RuntimeError", "structural visitor without a visit");
  for (const Any& v : values) {
    KFFIAny r = visit(visitor, *details::AnyUnsafe::Raw(v));
    if (r.type_index != kKFFINone) return r;
  }
  return NoneValue();
}

template <typename Seq>
KFFIAny VisitSeq(void* visitor, KFFIAny value) noexcept {
  try {
    Seq seq = reinterpret_cast<const AnyView&>(value).cast<Seq>();
    std::vector<Any> items(seq.begin(), seq.end());  // held: a visit may change the container
    return VisitAll(visitor, items);
  } catch (const std::exception& e) {
    return ErrorValue("RuntimeError", e.what());
  } catch (...) {
    return ErrorValue("RuntimeError", "structural visit of a container failed");
  }
}

// A Map or Dict a library made has TVM-FFI's hash-map layout, which kffi's differs from
// (calls.cc): it is not read, and the visit ends with an error that says so.
KFFIAny RefuseMapVisit(void* /*visitor*/, KFFIAny value) noexcept {
  return ErrorValue("RuntimeError",
                    std::string("Structural visit of a ") +
                        (value.type_index == kKFFIDict ? "ffi.Dict" : "ffi.Map") +
                        ": kffi's TVM-FFI runtime does not read TVM-FFI's hash maps (the two lay "
                        "them out differently); load apache-tvm-ffi (`import tvm_ffi`) to walk "
                        "one");
}

KFFIAny RefuseMutate(void* /*mutator*/, KFFIAny value) noexcept {
  const char* key = value.type_index == kKFFIArray  ? "ffi.Array"
                    : value.type_index == kKFFIList ? "ffi.List"
                    : value.type_index == kKFFIMap  ? "ffi.Map"
                                                    : "ffi.Dict";
  return ErrorValue("RuntimeError", std::string("Structural mutation of a container (") + key +
                                        ") is not provided by kffi's TVM-FFI runtime (visiting "
                                        "is); load apache-tvm-ffi (`import tvm_ffi`, or "
                                        "KFFI_TVM_RUNTIME=<its libtvm_ffi.so>) to mutate one");
}

KFFIAny Hook(VisitAbi fn) {
  KFFIAny v{};
  v.type_index = kKFFIOpaquePtr;
  v.v_ptr = reinterpret_cast<void*>(fn);
  return v;
}

}  // namespace

void StructuralTypeAttrs(std::vector<RuntimeTypeAttr>* out) {
  out->push_back({kKFFIArray, "__s_visit__", Hook(&VisitSeq<Array<Any>>)});
  out->push_back({kKFFIList, "__s_visit__", Hook(&VisitSeq<List<Any>>)});
  out->push_back({kKFFIMap, "__s_visit__", Hook(&RefuseMapVisit)});
  out->push_back({kKFFIDict, "__s_visit__", Hook(&RefuseMapVisit)});
  for (int32_t index : {kKFFIArray, kKFFIList, kKFFIMap, kKFFIDict}) {
    out->push_back({index, "__s_mutate__", Hook(&RefuseMutate)});
    out->push_back({index, "__s_maybe_inplace_mutate__", Hook(&RefuseMutate)});
  }
}

}  // namespace tvmglue
}  // namespace kffi
