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
// Sequences are visited and mutated as libtvm_ffi does (copy-on-write, or in place when the
// engine says the container is unique; items read borrowed, so a child's uniqueness is what the
// callbacks see); strings, bytes and big integers are leaves. Maps and Dicts a library made have
// TVM-FFI's hash-map layout (kffi's own differ: calls.cc never lets one cross), which tvm_map.h
// reads and checks: their values are visited and mutated in insertion order, keys never, as
// libtvm_ffi does; a copy keeps the source's layout, with the changed values replaced. A map whose
// fields do not fit that layout, or that a callback changes while it is walked, ends the walk with
// an error that says so. A mutator, like a visitor, starts with its dispatch table after the
// object header (mutate, then maybe_inplace_mutate), and a mutate hook returns the replacement,
// the "unchanged" marker (static index 13) or an Error.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/container/array.h>
#include <kffi/container/list.h>
#include <kffi/error.h>

#include <cstring>
#include <string>
#include <vector>

#include "tvm_bridge/bridge_internal.h"
#include "tvm_bridge/tvm_map.h"

namespace kffi {
namespace tvmglue {
namespace {

// The headers' hook type is noexcept; the hooks here whose try blocks run the engine's callbacks
// are not, so that a thread's forced unwind is rethrown (KFFI_CATCH_ALL) rather than swallowed.
using VisitAbi = KFFIAny (*)(void* visitor, KFFIAny value);

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

// The exception being handled as an Error value (the hooks' ABI returns errors, never throws).
// A thread's forced unwind is let through by KFFI_CATCH_ALL (and meets the engine's noexcept
// frame, as it would with libtvm_ffi's own hooks).
KFFIAny CurrentErrorValue() {
  details::SetRaisedFromCurrentException();
  KFFIObjectHandle err = nullptr;
  KFFIErrorMoveFromRaised(&err);
  KFFIAny out{};
  out.type_index = err != nullptr ? kKFFIError : kKFFINone;
  out.v_obj = static_cast<KFFIObject*>(err);
  return out;
}

// Visits each value in turn; the first result that is not None ends the walk and is returned.
template <typename Values>
KFFIAny VisitAll(void* visitor, const Values& values) {
  VisitAbi visit = VisitEntry(visitor);
  if (visit == nullptr) return ErrorValue("RuntimeError", "structural visitor without a visit");
  for (const Any& v : values) {
    KFFIAny r = visit(visitor, *details::AnyUnsafe::Raw(v));
    if (r.type_index != kKFFINone) return r;
  }
  return NoneValue();
}

template <typename Seq>
KFFIAny VisitSeq(void* visitor, KFFIAny value) {
  try {
    Seq seq = reinterpret_cast<const AnyView&>(value).cast<Seq>();
    std::vector<Any> items(seq.begin(), seq.end());  // held: a visit may change the container
    return VisitAll(visitor, items);
  }
  KFFI_CATCH_ALL { return CurrentErrorValue(); }
}

// The error that ends a walk over a map that cannot be read, or changed while it was walked.
KFFIAny MapError(const KFFIAny& value, const char* walk, const std::string& why) {
  const std::string what = std::string("Structural ") + walk + " of a " +
                           (value.type_index == kKFFIDict ? "ffi.Dict" : "ffi.Map") + ": ";
  if (why == kTvmMapChanged) {
    return ErrorValue("RuntimeError", what +
                                          "a callback changed it while it was walked (entries "
                                          "added, removed or moved), so the walk stops");
  }
  return ErrorValue("RuntimeError",
                    what + "it is not laid out as apache-tvm-ffi 0.1.x lays out its hash maps (" +
                        why + "), so kffi's TVM-FFI runtime does not read it");
}

// A map's values, visited in insertion order (held: a visit may change the map).
KFFIAny VisitMap(void* visitor, KFFIAny value) {
  try {
    TvmMapView map;
    std::string why;
    if (!TvmMapView::Read(value.v_obj, &map, &why)) return MapError(value, "visit", why);
    std::vector<Any> values;
    values.reserve(map.size());
    for (size_t i = 0; i < map.size(); ++i) {
      values.emplace_back(reinterpret_cast<const AnyView&>(map.Entry(i)[1]));
    }
    return VisitAll(visitor, values);
  }
  KFFI_CATCH_ALL { return CurrentErrorValue(); }
}

// ---- mutation (StructuralMutatorVTable: mutate, then maybe_inplace_mutate) ----------------------

// TVM-FFI's static index of the "unchanged" marker a mutate hook returns (ffi.Unchanged).
constexpr int32_t kTvmUnchanged = 13;

KFFIAny Unchanged() {
  KFFIAny v{};
  v.type_index = kTvmUnchanged;
  return v;
}

// The mutator's entry: 0 mutates (copy-on-write), 1 may mutate in place.
VisitAbi MutateEntry(void* mutator, int which) {
  const VisitAbi* table = nullptr;
  std::memcpy(&table, static_cast<char*>(mutator) + sizeof(KFFIObject), sizeof(table));
  return table == nullptr ? nullptr : table[which];
}

// What the engine's MutateExpected(item, mode) does: in place only when allowed and the item is
// an object nobody else holds.
KFFIAny MutateItem(void* mutator, const KFFIAny& item, bool allow_inplace) {
  const bool unique = allow_inplace && item.type_index >= kKFFIStaticObjectBegin &&
                      item.v_obj != nullptr && details::HeaderUseCount(item.v_obj) == 1;
  VisitAbi entry = MutateEntry(mutator, unique ? 1 : 0);
  if (entry == nullptr) return ErrorValue("RuntimeError", "structural mutator without a mutate");
  return entry(mutator, item);
}

// TVM-FFI's same_as on values: the same type and the same 8 bytes (and padding word).
bool SameAs(const KFFIAny& a, const KFFIAny& b) {
  return a.type_index == b.type_index && a.zero_padding == b.zero_padding && a.v_int64 == b.v_int64;
}

void Release(const KFFIAny& v) {
  if (v.type_index >= kKFFIStaticObjectBegin && v.v_obj != nullptr) KFFIObjectDecRef(v.v_obj);
}

KFFISeqCell* SeqCellOf(const KFFIAny& v) {
  return static_cast<KFFISeqCell*>(KFFIObjectGetCellPtr(v.v_obj));
}

// The i-th item of a sequence as an owned value (the cell is read afresh: a callback may have
// changed the container).
Any ItemAt(const KFFIAny& seq, int64_t i) {
  const KFFISeqCell* cell = SeqCellOf(seq);
  KFFI_CHECK(i < cell->size, RuntimeError) << "the container shrank while it was mutated";
  return Any(reinterpret_cast<const AnyView&>(static_cast<const KFFIAny*>(cell->data)[i]));
}

// Copy-on-write: the container is returned unchanged unless an item changes; from the first that
// does, a new container of the same kind holds the mapped items (the source is left as it was).
// Items are read borrowed, as the engine does, so a child held only by the container is still
// seen as unique by the callbacks.
template <typename Seq>
KFFIAny MutateSeq(void* mutator, KFFIAny value) {
  try {
    std::vector<Any> out;
    bool changed = false;
    for (int64_t i = 0; i < SeqCellOf(value)->size; ++i) {
      const KFFIAny item = static_cast<const KFFIAny*>(SeqCellOf(value)->data)[i];
      KFFIAny r = MutateItem(mutator, item, false);
      if (r.type_index == kKFFIError) return r;
      if (r.type_index == kTvmUnchanged || SameAs(r, item)) {
        Release(r);
        if (changed) out.push_back(ItemAt(value, i));
        continue;
      }
      if (!changed) {
        changed = true;
        for (int64_t j = 0; j < i; ++j) out.push_back(ItemAt(value, j));
      }
      out.push_back(details::AnyUnsafe::FromOwnedRaw(r));
    }
    if (!changed) return Unchanged();
    Any result(Seq(out.begin(), out.end()));
    KFFIAny raw = *details::AnyUnsafe::Raw(result);
    KFFIObjectIncRef(raw.v_obj);  // the caller owns the result
    return raw;
  }
  KFFI_CATCH_ALL { return CurrentErrorValue(); }
}

// In place (the engine calls this only for a container nobody else holds): each item that
// changes is replaced where it stands; the container itself comes back unchanged.
KFFIAny MaybeInplaceMutateSeq(void* mutator, KFFIAny value) noexcept {
  KFFISeqCell* cell = SeqCellOf(value);
  for (int64_t i = 0; i < cell->size; ++i) {
    KFFIAny item = static_cast<KFFIAny*>(cell->data)[i];  // a copy: the call may replace it
    KFFIAny r = MutateItem(mutator, item, true);
    if (r.type_index == kKFFIError) return r;
    cell = SeqCellOf(value);  // a callback may have resized it
    if (i >= cell->size) return Unchanged();
    if (r.type_index == kTvmUnchanged || SameAs(r, item)) {
      Release(r);
      continue;
    }
    KFFIAny* slot = static_cast<KFFIAny*>(cell->data) + i;
    const KFFIAny old = *slot;
    *slot = r;
    Release(old);
  }
  return Unchanged();
}

// Strings, bytes and big integers are leaves: never changed, never walked.
KFFIAny MutateLeaf(void* /*mutator*/, KFFIAny /*value*/) noexcept { return Unchanged(); }

// A map's entry i, or NULL after the error saying the map changed while it was mutated.
KFFIAny* EntryOrError(const TvmMapView& map, KFFIObject* in, size_t i, const KFFIAny& value,
                      KFFIAny* error) {
  KFFIAny* entry = map.EntryIn(in, i);
  if (entry == nullptr) *error = MapError(value, "mutation", kTvmMapChanged);
  return entry;
}

// Copy-on-write, as for sequences: from the first value that changes, a copy of the map (the same
// keys, where they were) holds the mapped values; keys are never mutated.
KFFIAny MutateMap(void* mutator, KFFIAny value) {
  KFFIObject* out = nullptr;  // owned until returned
  KFFIAny r{};                // owned while not stored
  try {
    TvmMapView map;
    std::string why;
    if (!TvmMapView::Read(value.v_obj, &map, &why)) return MapError(value, "mutation", why);
    KFFIAny error{};
    bool failed = false;
    for (size_t i = 0; i < map.size() && !failed; ++i) {
      const KFFIAny* entry = EntryOrError(map, value.v_obj, i, value, &error);
      if (entry == nullptr) {
        failed = true;
        break;
      }
      const KFFIAny item = entry[1];
      r = MutateItem(mutator, item, false);
      if (r.type_index == kKFFIError) {
        error = r;
        r = KFFIAny{};
        failed = true;
        break;
      }
      if (r.type_index != kTvmUnchanged && !SameAs(r, item)) {
        if (out == nullptr && (out = map.Copy(&why)) == nullptr) {
          error = MapError(value, "mutation", why);
          failed = true;
        }
        KFFIAny* slot = failed ? nullptr : EntryOrError(map, out, i, value, &error);
        if (slot != nullptr) {
          std::swap(slot[1], r);  // r now holds the old value, released below
        } else {
          failed = true;
        }
      }
      Release(r);
      r = KFFIAny{};
    }
    if (failed) {
      if (out != nullptr) KFFIObjectDecRef(out);
      return error;
    }
    if (out == nullptr) return Unchanged();
    KFFIAny result{};
    result.type_index = value.type_index;
    result.v_obj = out;  // the caller owns it
    return result;
  }
  KFFI_CATCH_ALL {
    Release(r);
    if (out != nullptr) KFFIObjectDecRef(out);
    return CurrentErrorValue();
  }
}

// In place (the engine calls this only for a map nobody else holds): each value that changes is
// replaced where it stands; the map itself comes back unchanged.
KFFIAny MaybeInplaceMutateMap(void* mutator, KFFIAny value) {
  try {
    TvmMapView map;
    std::string why;
    if (!TvmMapView::Read(value.v_obj, &map, &why)) return MapError(value, "mutation", why);
    KFFIAny error{};
    for (size_t i = 0; i < map.size(); ++i) {
      const KFFIAny* entry = EntryOrError(map, value.v_obj, i, value, &error);
      if (entry == nullptr) return error;
      const KFFIAny item = entry[1];  // a copy: the call may replace it
      KFFIAny r = MutateItem(mutator, item, true);
      if (r.type_index == kKFFIError) return r;
      KFFIAny* slot = EntryOrError(map, value.v_obj, i, value, &error);
      if (slot == nullptr) {
        Release(r);
        return error;
      }
      if (r.type_index == kTvmUnchanged || SameAs(r, item)) {
        Release(r);
        continue;
      }
      const KFFIAny old = slot[1];
      slot[1] = r;
      Release(old);
    }
    return Unchanged();
  }
  KFFI_CATCH_ALL { return CurrentErrorValue(); }
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
  out->push_back({kKFFIMap, "__s_visit__", Hook(&VisitMap)});
  out->push_back({kKFFIDict, "__s_visit__", Hook(&VisitMap)});
  out->push_back({kKFFIArray, "__s_mutate__", Hook(&MutateSeq<Array<Any>>)});
  out->push_back({kKFFIList, "__s_mutate__", Hook(&MutateSeq<List<Any>>)});
  for (int32_t index : {kKFFIArray, kKFFIList}) {
    out->push_back({index, "__s_maybe_inplace_mutate__", Hook(&MaybeInplaceMutateSeq)});
  }
  for (int32_t index : {kKFFIMap, kKFFIDict}) {
    out->push_back({index, "__s_mutate__", Hook(&MutateMap)});
    out->push_back({index, "__s_maybe_inplace_mutate__", Hook(&MaybeInplaceMutateMap)});
  }
  for (int32_t index : {int32_t{kKFFIStr}, int32_t{kKFFIBytes}, kTvmBigIntIndex}) {
    out->push_back({index, "__s_mutate__", Hook(&MutateLeaf)});
    out->push_back({index, "__s_maybe_inplace_mutate__", Hook(&MutateLeaf)});
  }
}

}  // namespace tvmglue
}  // namespace kffi
