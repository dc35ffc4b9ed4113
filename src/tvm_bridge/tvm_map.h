// src/tvm_bridge/tvm_map.h: reading and copying the Map and Dict objects TVM-FFI code makes.
//
// A TVM-FFI library makes its hash maps with apache-tvm-ffi's inline header code, in that
// project's layout (kffi's own maps are laid out differently: include/kffi/container/
// map_details.h). The shim's structural hooks walk and copy-on-write such maps, so they read that
// layout here, as apache-tvm-ffi 0.1.x defines it (its container/map_base.h), and check it before
// reading anything: a map whose fields do not fit it is refused with the reason, never misread.
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_TVM_BRIDGE_TVM_MAP_H_
#define KFFI_TVM_BRIDGE_TVM_MAP_H_

#include <kffi/c_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kffi {
namespace tvmglue {

/// The object fields after the header that TVM-FFI's two map layouts share (MapBaseObj):
/// data, the number of entries, the number of slots (bit 63 set: the small layout) and the
/// function that frees data (NULL where data lives inside the object).
struct TvmMapFields {
  void* data;
  uint64_t size;
  uint64_t slots;
  void (*data_deleter)(void*);
};

/// The dense layout's further fields (DenseMapBaseObj): the Fibonacci hashing shift and the ends
/// of the list that keeps insertion order.
struct TvmDenseMapFields {
  TvmMapFields base;
  uint32_t fib_shift;
  uint32_t padding;
  uint64_t head;
  uint64_t tail;
};

/// What TvmMapView::Copy's *why says when the map is no longer as read (a callback changed it).
inline constexpr const char kTvmMapChanged[] = "it changed while it was walked";

/// A TVM-FFI Map or Dict, checked: the place of each entry, in the map's iteration order.
/// Entries are read from the map itself each time (a callback may have changed it since).
class TvmMapView {
 public:
  /// Reads obj (a Map or Dict object) as TVM-FFI's layout. False, with *why saying what did not
  /// fit, when it is not one (or is damaged). Throws only std::bad_alloc.
  static bool Read(KFFIObject* obj, TvmMapView* out, std::string* why);

  /// The number of entries when read.
  size_t size() const { return positions_.size(); }

  /// The i-th entry's key (its value follows it), or NULL when the map is no longer as read
  /// (its fields changed, or that entry is gone).
  KFFIAny* Entry(size_t i) const { return EntryIn(obj_, i); }

  /// A new map of the same type and layout holding the same keys and values (references
  /// taken), so that its i-th entry is EntryIn(copy, i); NULL with *why set when the map is no
  /// longer as read. Owned by the caller. Throws only std::bad_alloc.
  KFFIObject* Copy(std::string* why) const;

  /// The i-th entry of map (this map, or a Copy of it), or NULL when map no longer has the
  /// layout read (number of entries and slots, and for this map its data) or that entry.
  KFFIAny* EntryIn(KFFIObject* map, size_t i) const;

 private:
  KFFIObject* obj_ = nullptr;
  TvmDenseMapFields fields_{};  // base only, for the small layout
  bool small_ = false;
  std::vector<uint64_t> positions_;  // small: index in data; dense: slot number
};

}  // namespace tvmglue
}  // namespace kffi

#endif  // KFFI_TVM_BRIDGE_TVM_MAP_H_
