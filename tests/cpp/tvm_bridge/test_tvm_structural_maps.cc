// tests/cpp/tvm_bridge/test_tvm_structural_maps.cc: the structural visitor and mutator over the
// Maps and Dicts a TVM-FFI library makes, on kffi's shim (no libtvm_ffi loaded): values walked and
// mutated in insertion order, copies that the headers' own code can look up, grow and shrink, and
// maps whose fields are not TVM-FFI's (a hostile object, or one of kffi's own maps) refused with
// an error, never read.
// SPDX-License-Identifier: Apache-2.0
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <kffi/container/map.h>
#include <kffi/module.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "tvm_bridge/structural_maps_checks.h"

namespace {

#ifdef KFFI_TEST_TVM_STRUCTURAL_MAPS
#define SKIP_WITHOUT_TVM_LIBS() (void)0
#else
#define SKIP_WITHOUT_TVM_LIBS() GTEST_SKIP() << "apache-tvm-ffi not installed at build time"
#define KFFI_TEST_TVM_STRUCTURAL_MAPS ""
#endif

bool LibTvmFfiMapped() { return dlopen("libtvm_ffi.so", RTLD_LAZY | RTLD_NOLOAD) != nullptr; }

kffi::Module Lib() {
  EXPECT_FALSE(LibTvmFfiMapped());
  return kffi::Module::Load(KFFI_TEST_TVM_STRUCTURAL_MAPS);
}

TEST(TvmStructuralMaps, VisitedAndMutatedAsLibtvmFfiDoes) {
  SKIP_WITHOUT_TVM_LIBS();
  kffi_test::CheckStructuralMaps(Lib());
  EXPECT_FALSE(LibTvmFfiMapped());
}

TEST(TvmStructuralMaps, ObjectsThatAreNotTvmMapsAreRefused) {
  SKIP_WITHOUT_TVM_LIBS();
  kffi::Function fake = Lib().GetFunctionRequired("fake_map_error");
  const char* reasons[] = {"small layout's fields are out of range",
                           "dense layout's fields are inconsistent",
                           "dense layout's fields are inconsistent",
                           "insertion-order list is broken", "insertion-order list does not end"};
  for (int64_t which = 0; which < 5; ++which) {
    for (bool mutate : {false, true}) {
      SCOPED_TRACE(std::to_string(which) + (mutate ? " mutated" : " visited"));
      std::string message = fake(which, mutate).cast<std::string>();
      EXPECT_NE(message.find(std::string("Structural ") + (mutate ? "mutation" : "visit") +
                             " of a ffi.Map: it is not laid out as apache-tvm-ffi 0.1.x"),
                std::string::npos)
          << message;
      EXPECT_NE(message.find(reasons[which]), std::string::npos) << message;
    }
  }
}

TEST(TvmStructuralMaps, ADictChangedByACallbackStopsTheMutation) {
  SKIP_WITHOUT_TVM_LIBS();
  kffi::Function mutate = Lib().GetFunctionRequired("mutate_changing_dict");
  for (int64_t n : {int64_t{3}, int64_t{12}}) {
    EXPECT_EQ(mutate(n).cast<std::string>(),
              "Structural mutation of a ffi.Dict: a callback changed it while it was walked "
              "(entries added, removed or moved), so the walk stops")
        << n;
  }
}

// The shim's `__s_visit__` hook for ffi.Map, from its type attribute column.
struct Column {
  const KFFIAny* data;
  int32_t size;
  int32_t begin_index;
};
using Hook = KFFIAny (*)(void* visitor, KFFIAny value);

Hook MapVisitHook() {
  void* bridge = dlopen(KFFI_TEST_BINARY_DIR "/libkffi_tvm.so", RTLD_LAZY | RTLD_NOLOAD);
  if (bridge == nullptr) return nullptr;
  auto get = reinterpret_cast<const Column* (*)(const KFFIByteArray*)>(
      dlsym(bridge, "TVMFFIGetTypeAttrColumn"));
  dlclose(bridge);
  KFFIByteArray name{"__s_visit__", 11};
  const Column* column = get != nullptr ? get(&name) : nullptr;
  const int32_t at = kKFFIMap - (column != nullptr ? column->begin_index : 0);
  if (column == nullptr || at < 0 || at >= column->size) return nullptr;
  return reinterpret_cast<Hook>(column->data[at].v_ptr);
}

// A visitor object as the hooks see one: the header, then its dispatch table.
int visits = 0;
KFFIAny CountVisit(void*, KFFIAny) {
  ++visits;
  return KFFIAny{};
}
const Hook kTable[1] = {&CountVisit};
struct FakeVisitor {
  KFFIObject header;
  const Hook* table;
};

// kffi's own maps are laid out differently: the hook must refuse them (they never reach TVM-FFI
// code, as calls.cc refuses them at every crossing; this checks the hook does not rely on that).
TEST(TvmStructuralMaps, KffisOwnMapsAreNotReadAsTvmMaps) {
  SKIP_WITHOUT_TVM_LIBS();
  kffi::Module mod = Lib();  // loads the bridge
  Hook hook = MapVisitHook();
  ASSERT_NE(hook, nullptr);
  FakeVisitor visitor{{}, kTable};
  for (int n : {1, 3}) {
    kffi::Map<int64_t, int64_t> m;
    for (int i = 0; i < n; ++i) m.Set(i, i);
    kffi::Any value = m;
    visits = 0;
    KFFIAny r = hook(&visitor, *kffi::details::AnyUnsafe::Raw(value));
    ASSERT_EQ(r.type_index, kKFFIError) << n;
    kffi::Error err(kffi::details::AnyUnsafe::FromOwnedRaw(r).cast<kffi::Error>());
    EXPECT_NE(std::string(err.message()).find("not laid out as apache-tvm-ffi"), std::string::npos)
        << err.message();
    EXPECT_EQ(visits, 0);
  }
}

}  // namespace
