// tests/abi/macros_alone/error_h.cc: every macro of <kffi/error.h> (and base.h's, which it
// includes), with that header alone.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/error.h>

extern "C" int kffi_alone_safe_call(int x) {
  KFFI_SAFE_CALL_BEGIN();
  KFFI_CHECK(x >= 0, ValueError) << "x must be non-negative, got " << x;
  KFFI_ICHECK(x < 1000);
  if (KFFI_UNLIKELY(x == 7)) KFFI_THROW(ValueError) << "seven";
  if (KFFI_LIKELY(x != 8)) return 0;
  KFFI_SAFE_CALL_END();
}
