// tests/loader_libs/misplaced_code.cc: a kffi library whose export is a function placed in .data
// (issue 29, class 1): the loader refuses it before dlopen, naming the symbol and the section.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/c_api.h>

#include <cstdint>

extern "C" __attribute__((visibility("default"), used, section(".data"))) int __kffi_misplaced(
    void*, const KFFIAny*, int32_t, KFFIAny* result) {
  result->type_index = kKFFIInt;
  result->zero_padding = 0;
  result->v_int64 = 1;
  return 0;
}
