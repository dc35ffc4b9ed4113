// tests/abi/loader_only.cc: a program that only loads and calls modules, through <kffi/kffi.h>.
// It loads the library in argv[1] (one kernel per export macro: export_macros.cc or its CUDA
// twin), calls each export, and exits non-zero on a wrong result. The build checks with nm that
// this program carries no `__kffi__abi_version` (check_abi_record.cmake): including the headers
// adds no symbol; only the export macros emit the record.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/kffi.h>

#include <cstdio>
#include <string>

namespace {

int g_failures = 0;

void Expect(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "FAILED: %s\n", what.c_str());
    ++g_failures;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <library>\n", argv[0]);
    return 2;
  }
  try {
    kffi::Module mod = kffi::Module::Load(argv[1]);
    Expect(mod.GetFunctionRequired("add")(2, 3).cast<int64_t>() == 5, "add(2, 3) == 5");
    Expect(mod.GetFunctionRequired("add_doc")(2, 3).cast<int64_t>() == 5, "add_doc(2, 3) == 5");
    Expect(mod.GetFunctionMetadata("add_doc").value() ==
               R"({"name":"add_doc","params":[{"name":"a","type":"int"},)"
               R"({"name":"b","type":"int"}],"return":"int","doc":"Adds a and b."})",
           "add_doc metadata");
    // The system-library exports registered themselves when the library loaded.
    kffi::Module sys = kffi::Module::SystemLib();
    Expect(sys.GetFunctionRequired("abi_sys_add")(4, 5).cast<int64_t>() == 9, "abi_sys_add");
    Expect(sys.GetFunctionRequired("abi_sys_add_doc")(4, 5).cast<int64_t>() == 9,
           "abi_sys_add_doc");
    float x_data[3] = {1, 2, 3}, y_data[3] = {0, 0, 0};
    int64_t shape[1] = {3};
    DLTensor x{x_data, {kDLCPU, 0}, 1, kffi::dtypes::float32, shape, nullptr, 0};
    DLTensor y{y_data, {kDLCPU, 0}, 1, kffi::dtypes::float32, shape, nullptr, 0};
    for (const char* name : {"scale", "scale_doc"}) {
      mod.GetFunctionRequired(name)(kffi::TensorView(&y), kffi::TensorView(&x), 2.0);
      Expect(y_data[2] == 6.0f, std::string(name) + " writes y");
      y_data[2] = 0;
      try {
        mod.GetFunctionRequired(name)(kffi::TensorView(&y), 1, 2.0);
        Expect(false, std::string(name) + " refuses an int");
      } catch (const kffi::Error& e) {
        Expect(e.kind() == "TypeError" &&
                   e.message().rfind("x: expected Tensor, got int (argument #1 of `", 0) == 0,
               std::string(name) + " message: " + e.message());
      }
    }
    Expect(mod.GetFunctionMetadata("scale_doc")->find("\"mutates\":[\"y\"]") != std::string::npos,
           "scale_doc metadata");
  } catch (const kffi::Error& e) {
    std::fprintf(stderr, "FAILED: %s: %s\n", e.kind().c_str(), e.message().c_str());
    return 1;
  }
  if (g_failures == 0) std::printf("every export macro works from <kffi/kffi.h> alone\n");
  return g_failures == 0 ? 0 : 1;
}
