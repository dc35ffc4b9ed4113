// tests/cpp/tvm_bridge/structural_maps_checks.h: what tests/tvm_libs/tvm_structural_maps.cc must
// return on any TVM-FFI runtime (kffi's shim: test_tvm_structural_maps.cc; apache-tvm-ffi's:
// tests/tvm_libs/test_tvm_real.cc), so that both runtimes are held to the same results.
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_TESTS_CPP_TVM_BRIDGE_STRUCTURAL_MAPS_CHECKS_H_
#define KFFI_TESTS_CPP_TVM_BRIDGE_STRUCTURAL_MAPS_CHECKS_H_

#include <gtest/gtest.h>
#include <kffi/container/array.h>
#include <kffi/module.h>

#include <cstdint>
#include <string>
#include <vector>

namespace kffi_test {

/// An item of a result: an int, or a string (written "s:<text>"), or a bool ("b:0" / "b:1").
inline std::string Show(const kffi::Any& v) {
  if (auto b = v.try_cast<bool>(); b && v.type_index() == kKFFIBool) return *b ? "b:1" : "b:0";
  if (auto i = v.try_cast<int64_t>()) return std::to_string(*i);
  if (auto s = v.try_cast<std::string>()) return "s:" + *s;
  return "?";
}

/// A result array, shown item by item.
inline std::vector<std::string> Shown(const kffi::Any& result) {
  std::vector<std::string> out;
  for (const kffi::Any& v : result.cast<kffi::Array<kffi::Any>>()) out.push_back(Show(v));
  return out;
}

/// The mapped values of key_0 .. key_{n-1} after adding 10 to every int (key_1 holds "same").
inline std::vector<std::string> MappedValues(int64_t n) {
  std::vector<std::string> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(i == 1 ? "s:same" : std::to_string(i + 10));
  return out;
}

/// Checks visits, copy-on-write and in-place mutations of small (3 entries) and dense (12)
/// Maps and Dicts that the library makes, and an error raised by a callback.
inline void CheckStructuralMaps(kffi::Module mod) {
  kffi::Function visit = mod.GetFunctionRequired("visit_values");
  kffi::Function copy = mod.GetFunctionRequired("mutate_copy");
  kffi::Function in_place = mod.GetFunctionRequired("mutate_in_place");
  for (bool dict : {false, true}) {
    for (int64_t n : {int64_t{3}, int64_t{12}}) {
      SCOPED_TRACE((dict ? "Dict of " : "Map of ") + std::to_string(n));
      // Values in insertion order, keys never.
      std::vector<std::string> visited{"-1", "0", "s:same"};
      for (int64_t i = 2; i < n; ++i) visited.push_back(std::to_string(i));
      visited.push_back("-2");
      EXPECT_EQ(Shown(visit(n, dict)), visited);
      // A copy whose values are found by key, the source left as it was, and the copy then
      // grown and shrunk by the headers' own code.
      std::vector<std::string> copied{"b:0", std::to_string(n)};
      for (const std::string& v : MappedValues(n)) copied.push_back(v);
      copied.push_back("0");                                        // the source's key_0
      copied.push_back(std::to_string(n + 20 - 1));                 // 20 keys added, key_0 erased
      for (const char* v : {"0", "12", "19"}) copied.push_back(v);  // key_0's count, 2 lookups
      EXPECT_EQ(Shown(copy(n, dict)), copied);
      // Unique: changed where it stands.
      std::vector<std::string> mutated{"b:1"};
      for (int64_t i = 0; i < n; ++i) mutated.push_back(std::to_string(i + 10));
      EXPECT_EQ(Shown(in_place(n, dict)), mutated);
    }
  }
  // A callback's error ends the mutation; the source keeps its values.
  for (int64_t n : {int64_t{3}, int64_t{12}}) {
    EXPECT_EQ(Shown(mod.GetFunctionRequired("mutate_error")(n)),
              (std::vector<std::string>{"s:failed on 2", "2"}));
  }
}

}  // namespace kffi_test

#endif  // KFFI_TESTS_CPP_TVM_BRIDGE_STRUCTURAL_MAPS_CHECKS_H_
