// tests/fuzz/tvm_metadata_fuzzer.cc: libFuzzer target for the TVM-FFI metadata converter
// (src/tvm_bridge/metadata.cc), which reads JSON that a library file supplies.
//
// Any input gives kffi's metadata JSON, nothing, or a reason (a ValueError naming the function,
// from the loader's entry point): never a crash, and no recursion deeper than the reader's limit
// however deeply the input nests.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/error.h>
#include <kffi/export.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/json_writer.h"
#include "tvm_bridge/bridge_internal.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  // The same bytes as the whole document and as the embedded type_schema string.
  kffi::details::JsonWriter w;
  w.BeginObject().Field("type_schema", text).EndObject();
  std::string wrapped = w.Take();
  for (const std::string* input : {&text, &wrapped}) {
    std::string out, why;
    if (kffi::tvmglue::TryConvertMetadata("f", *input, "doc", &out, &why)) {
      if (!out.empty() && out.compare(0, 14, "{\"name\":\"f\",\"p") != 0) __builtin_trap();
    } else if (why.empty()) {
      __builtin_trap();  // a refusal always says why
    }
  }
  // The throwing entry point the loader uses, on one input in 64 (exceptions are slow).
  if (size > 0 && data[0] % 64 == 0) {
    try {
      kffi::tvmglue::ConvertMetadata("f", text, "");
    } catch (const kffi::Error& e) {
      if (e.kind() != "ValueError" || e.message().find("function `f`") == std::string::npos) {
        __builtin_trap();
      }
    }
  }
  return 0;
}
