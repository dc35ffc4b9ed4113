// src/tvm_bridge/tvm_map.cc: TVM-FFI's Map and Dict layout, read and copied (tvm_map.h).
//
// The facts used, from apache-tvm-ffi 0.1.x (container/map_base.h), the same through 0.1.15.post2:
//   - after the object header: data, size, slots and data_deleter (TvmMapFields); bit 63 of slots
//     set means the small layout, whose other bits count the pairs data has room for;
//   - small layout: `size` key/value pairs (two TVMFFIAny each, 32 bytes) from data, in order;
//     data lies just after those four fields, inside the object, and data_deleter is NULL (until
//     the map is switched to another's storage, when data_deleter releases that);
//   - dense layout: then the Fibonacci shift (64 minus log2 of slots), the first and last slot of
//     the list that keeps insertion order; data is blocks of 16 slots, each 16 metadata bytes
//     (0xFF empty, 0xFE reserved mid-insertion, else a live entry) followed by 16 items of 48
//     bytes: the pair, then the previous and the next slot in insertion order (all ones: none);
//     data_deleter frees the blocks.
// A copy keeps every slot where it was (metadata bytes included), so the hash chains, which
// depend only on the keys, stay valid in it; only values are ever replaced, never keys.
// SPDX-License-Identifier: Apache-2.0
#include "tvm_bridge/tvm_map.h"

#include <kffi/object.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <utility>

namespace kffi {
namespace tvmglue {
namespace {

static_assert(sizeof(TvmMapFields) == 32 && sizeof(TvmDenseMapFields) == 56,
              "TVM-FFI's map fields are four and seven 8-byte words");
static_assert(sizeof(KFFIObject) == 24 && sizeof(KFFIAny) == 16, "TVM-FFI's header and value");

constexpr uint64_t kSmallTag = uint64_t{1} << 63;
constexpr uint64_t kNoSlot = ~uint64_t{0};
constexpr size_t kPairBytes = 2 * sizeof(KFFIAny);
constexpr size_t kItemBytes = kPairBytes + 2 * sizeof(uint64_t);
constexpr uint64_t kBlockSlots = 16;
constexpr size_t kBlockBytes = kBlockSlots + kBlockSlots * kItemBytes;
constexpr uint8_t kEmptySlot = 0xFF;
constexpr uint8_t kReservedSlot = 0xFE;
constexpr size_t kSmallObjectBytes = sizeof(KFFIObject) + sizeof(TvmMapFields);
constexpr size_t kDenseObjectBytes = sizeof(KFFIObject) + sizeof(TvmDenseMapFields);
// A small map's room is 2 to 4 pairs in TVM-FFI; anything near these bounds is not a map of it.
constexpr uint64_t kMaxSmallSlots = uint64_t{1} << 16;
constexpr uint64_t kMaxDenseSlots = uint64_t{1} << 40;
// A small map has room for at least 2 pairs, which makes it as large as a dense map's fields, so
// that TVM-FFI's inline code can turn it into a dense one where it stands.
constexpr uint64_t kMinSmallSlots = 2;
static_assert(kSmallObjectBytes + kMinSmallSlots * kPairBytes >= kDenseObjectBytes,
              "a small map can become dense in place");

char* Cell(KFFIObject* obj) { return reinterpret_cast<char*>(obj) + sizeof(KFFIObject); }

TvmDenseMapFields ReadFields(KFFIObject* obj) {
  TvmDenseMapFields f{};
  std::memcpy(&f.base, Cell(obj), sizeof(TvmMapFields));
  if ((f.base.slots & kSmallTag) == 0) std::memcpy(&f, Cell(obj), sizeof(f));
  return f;
}

// A dense slot's metadata byte and item.
uint8_t* Meta(void* data, uint64_t slot) {
  return static_cast<uint8_t*>(data) + (slot / kBlockSlots) * kBlockBytes + slot % kBlockSlots;
}
char* Item(void* data, uint64_t slot) {
  return static_cast<char*>(data) + (slot / kBlockSlots) * kBlockBytes + kBlockSlots +
         (slot % kBlockSlots) * kItemBytes;
}
uint64_t Link(const char* item, int which) {  // 0: previous, 1: next
  uint64_t v;
  std::memcpy(&v, item + kPairBytes + static_cast<size_t>(which) * sizeof(uint64_t), sizeof(v));
  return v;
}
bool Live(uint8_t meta) { return meta != kEmptySlot && meta != kReservedSlot; }

bool HoldsObject(const KFFIAny& v) {
  return v.type_index >= kKFFIStaticObjectBegin && v.v_obj != nullptr;
}
void Retain(const KFFIAny* pair) {
  for (int i = 0; i < 2; ++i) {
    if (HoldsObject(pair[i])) KFFIObjectIncRef(pair[i].v_obj);
  }
}
void Drop(const KFFIAny* pair) {
  for (int i = 0; i < 2; ++i) {
    if (HoldsObject(pair[i])) KFFIObjectDecRef(pair[i].v_obj);
  }
}

// The blocks of a dense map this file made.
void FreeBlocks(void* data) { ::operator delete(data); }

// The number of dense blocks' bytes for slots (a power of two up to kMaxDenseSlots), checked.
bool BlockBytes(uint64_t slots, size_t* out) {
  const uint64_t blocks = slots / kBlockSlots + (slots % kBlockSlots != 0 ? 1 : 0);
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(blocks, uint64_t{kBlockBytes}, &bytes) || bytes > SIZE_MAX) {
    return false;
  }
  *out = static_cast<size_t>(bytes);
  return true;
}

// The deleter of the maps Copy makes. TVM-FFI's inline code may change them afterwards (a Dict's
// insert can move it to other storage, even from the small layout to the dense one), so their
// contents are released as that code releases its own: as the fields say now.
void CopiedMapDeleter(void* self, int flags) {
  auto* obj = static_cast<KFFIObject*>(self);
  if ((flags & kKFFIObjectDeleterFlagStrong) != 0) {
    TvmDenseMapFields f = ReadFields(obj);
    if ((f.base.slots & kSmallTag) != 0) {
      for (uint64_t i = 0; i < f.base.size; ++i) {
        Drop(reinterpret_cast<const KFFIAny*>(static_cast<char*>(f.base.data) + i * kPairBytes));
      }
    } else if (f.base.data != nullptr) {
      const uint64_t blocks = f.base.slots / kBlockSlots + (f.base.slots % kBlockSlots != 0);
      for (uint64_t s = 0; s < blocks * kBlockSlots; ++s) {
        if (Live(*Meta(f.base.data, s))) {
          Drop(reinterpret_cast<const KFFIAny*>(Item(f.base.data, s)));
        }
      }
    }
    if (f.base.data_deleter != nullptr) f.base.data_deleter(f.base.data);
  }
  if ((flags & kKFFIObjectDeleterFlagWeak) != 0) ::operator delete(self);
}

struct FreeRaw {
  void operator()(void* p) const { ::operator delete(p); }
};
using RawPtr = std::unique_ptr<void, FreeRaw>;

}  // namespace

bool TvmMapView::Read(KFFIObject* obj, TvmMapView* out, std::string* why) {
  if (obj == nullptr || (obj->type_index != kKFFIMap && obj->type_index != kKFFIDict)) {
    *why = "not a Map or Dict object";
    return false;
  }
  TvmMapView v;
  v.obj_ = obj;
  v.fields_ = ReadFields(obj);
  const TvmMapFields& b = v.fields_.base;
  v.small_ = (b.slots & kSmallTag) != 0;
  if (v.small_) {
    const uint64_t room = b.slots & ~kSmallTag;
    if (room > kMaxSmallSlots || b.size > room || (b.size != 0 && b.data == nullptr)) {
      *why = "its small layout's fields are out of range (" + std::to_string(b.size) +
             " entries, room for " + std::to_string(room) + ")";
      return false;
    }
    v.positions_.reserve(static_cast<size_t>(b.size));
    for (uint64_t i = 0; i < b.size; ++i) v.positions_.push_back(i);
    *out = std::move(v);
    return true;
  }
  if (b.slots == 0) {  // the state of a map whose storage moved to another: no entries
    if (b.size != 0) {
      *why = "it has entries but no slots";
      return false;
    }
    *out = std::move(v);
    return true;
  }
  const TvmDenseMapFields& d = v.fields_;
  size_t block_bytes = 0;
  if ((b.slots & (b.slots - 1)) != 0 || b.slots < 2 || b.slots > kMaxDenseSlots ||
      d.fib_shift != 64u - static_cast<uint32_t>(__builtin_ctzll(b.slots)) || b.size > b.slots ||
      b.data == nullptr || b.data_deleter == nullptr || !BlockBytes(b.slots, &block_bytes)) {
    *why = "its dense layout's fields are inconsistent (" + std::to_string(b.size) + " entries, " +
           std::to_string(b.slots) + " slots, shift " + std::to_string(d.fib_shift) + ")";
    return false;
  }
  // Every metadata byte: live slots only below `slots`, none reserved, `size` of them.
  uint64_t live = 0;
  for (uint64_t s = 0; s < block_bytes / kBlockBytes * kBlockSlots; ++s) {
    const uint8_t meta = *Meta(b.data, s);
    if (meta == kReservedSlot || (Live(meta) && s >= b.slots)) {
      *why = "slot " + std::to_string(s) + " is reserved or out of range";
      return false;
    }
    live += Live(meta) ? 1 : 0;
  }
  if (live != b.size) {
    *why = std::to_string(live) + " live slots for " + std::to_string(b.size) + " entries";
    return false;
  }
  // The insertion-order list: `size` live slots, each naming the one before it, then the end.
  // (Each slot names one predecessor, so the list cannot repeat a slot without failing that.)
  v.positions_.reserve(static_cast<size_t>(b.size));
  uint64_t prev = kNoSlot;
  uint64_t slot = d.head;
  for (uint64_t i = 0; i < b.size; ++i) {
    if (slot >= b.slots || !Live(*Meta(b.data, slot)) || Link(Item(b.data, slot), 0) != prev) {
      *why = "its insertion-order list is broken at entry " + std::to_string(i);
      return false;
    }
    v.positions_.push_back(slot);
    prev = slot;
    slot = Link(Item(b.data, slot), 1);
  }
  if (slot != kNoSlot || d.tail != prev) {
    *why = "its insertion-order list does not end after " + std::to_string(b.size) + " entries";
    return false;
  }
  *out = std::move(v);
  return true;
}

KFFIAny* TvmMapView::EntryIn(KFFIObject* map, size_t i) const {
  if (map == nullptr || i >= positions_.size()) return nullptr;
  const TvmDenseMapFields now = ReadFields(map);
  if (now.base.size != fields_.base.size || now.base.slots != fields_.base.slots ||
      now.base.data == nullptr || (map == obj_ && now.base.data != fields_.base.data)) {
    return nullptr;
  }
  const uint64_t pos = positions_[i];
  if (small_)
    return reinterpret_cast<KFFIAny*>(static_cast<char*>(now.base.data) + pos * kPairBytes);
  if (!Live(*Meta(now.base.data, pos))) return nullptr;
  return reinterpret_cast<KFFIAny*>(Item(now.base.data, pos));
}

KFFIObject* TvmMapView::Copy(std::string* why) const {
  TvmMapView now;
  if (!Read(obj_, &now, why)) return nullptr;
  if (now.small_ != small_ || now.positions_ != positions_ ||
      now.fields_.base.data != fields_.base.data) {
    *why = kTvmMapChanged;
    return nullptr;
  }
  const TvmMapFields& b = fields_.base;
  if (small_) {
    const uint64_t room = std::max(b.slots & ~kSmallTag, kMinSmallSlots);  // <= kMaxSmallSlots
    RawPtr raw(::operator new(kSmallObjectBytes + static_cast<size_t>(room) * kPairBytes));
    std::memset(raw.get(), 0, kSmallObjectBytes + static_cast<size_t>(room) * kPairBytes);
    auto* obj = static_cast<KFFIObject*>(raw.get());
    TvmMapFields f{Cell(obj) + sizeof(TvmMapFields), b.size, room | kSmallTag, nullptr};
    std::memcpy(f.data, b.data, static_cast<size_t>(b.size) * kPairBytes);
    for (uint64_t i = 0; i < b.size; ++i) {
      Retain(reinterpret_cast<const KFFIAny*>(static_cast<char*>(f.data) + i * kPairBytes));
    }
    std::memcpy(Cell(obj), &f, sizeof(f));
    details::InitObjectHeader(obj, obj_->type_index, &CopiedMapDeleter);
    return static_cast<KFFIObject*>(raw.release());
  }
  RawPtr raw(::operator new(kDenseObjectBytes));
  std::memset(raw.get(), 0, kDenseObjectBytes);
  auto* obj = static_cast<KFFIObject*>(raw.get());
  TvmDenseMapFields f = now.fields_;
  f.base.data = nullptr;
  f.base.data_deleter = nullptr;
  if (b.slots != 0) {
    size_t bytes = 0;
    if (!BlockBytes(b.slots, &bytes)) throw std::bad_alloc();  // Read checked it already
    RawPtr blocks(::operator new(bytes));
    std::memset(blocks.get(), 0, bytes);
    for (uint64_t s = 0; s < bytes / kBlockBytes * kBlockSlots; ++s) {
      const uint8_t meta = *Meta(b.data, s);
      *Meta(blocks.get(), s) = meta;
      if (!Live(meta)) continue;
      std::memcpy(Item(blocks.get(), s), Item(b.data, s), kItemBytes);
      Retain(reinterpret_cast<const KFFIAny*>(Item(blocks.get(), s)));
    }
    f.base.data = blocks.release();
    f.base.data_deleter = &FreeBlocks;
  }
  std::memcpy(Cell(obj), &f, sizeof(f));
  details::InitObjectHeader(obj, obj_->type_index, &CopiedMapDeleter);
  return static_cast<KFFIObject*>(raw.release());
}

}  // namespace tvmglue
}  // namespace kffi
