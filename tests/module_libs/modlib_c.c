/* tests/module_libs/modlib_c.c: an export written by hand in C against c_api.h alone, with no
 * ABI version symbol and no metadata (what a code generator might emit). */
/* SPDX-License-Identifier: Apache-2.0 */
#include <kffi/c_api.h>

/* Adds two ints; anything else is a TypeError. */
KFFI_DLL_EXPORT int __kffi_raw_add(void* handle, const KFFIAny* args, int32_t num_args,
                                   KFFIAny* result) {
  (void)handle;
  if (num_args != 2 || args[0].type_index != kKFFIInt || args[1].type_index != kKFFIInt) {
    KFFIErrorSetRaisedFromCStr("TypeError", "raw_add expects two ints");
    return -1;
  }
  result->type_index = kKFFIInt;
  result->zero_padding = 0;
  result->v_int64 = args[0].v_int64 + args[1].v_int64;
  return 0;
}
