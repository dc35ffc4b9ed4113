// tests/fuzz/elf_reader_fuzzer.cc: libFuzzer target for the loader's ELF reader
// (src/module_elf.cc).
//
// The reader sees every library file before dlopen does, so any byte string must give a clean
// "readable" or "not readable" answer: no crash, no read outside the input, no allocation larger
// than the input justifies (libFuzzer's -rss_limit_mb / -malloc_limit_mb catch those).
// SPDX-License-Identifier: Apache-2.0
#include <cstddef>
#include <cstdint>
#include <string>

#include "module/module_elf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kffi::details::ElfExports e = kffi::details::ReadElfExportsFromMemory(data, size);
  if (!e.readable) {
    // A refusal always says why.
    if (e.problem.empty()) __builtin_trap();
    return 0;
  }
  // Whatever is read back is bounded by the input.
  size_t total = 0;
  for (const std::string& s : e.functions) total += s.size();
  for (const std::string& s : e.tvm_functions) total += s.size();
  for (const std::string& s : e.tvm_imports) total += s.size();
  for (const std::string& s : e.needed) total += s.size();
  // Metadata text is read from the file, each byte of it once at most (symbols may share bytes).
  size_t text = 0;
  for (const auto& kv : e.metadata) {
    if (kv.second.kind == kffi::details::ElfSymbolUse::kText) text += kv.second.text.size();
  }
  if (text > size) __builtin_trap();
  if (total > size) __builtin_trap();
  return 0;
}
