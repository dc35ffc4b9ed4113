/* tests/abi/layout_freeze.c: the layout pins compiled as C (built once as C99 and once as C11).
 *
 * The static asserts in layout_freeze.h do the real work at compile time; main() only checks
 * that the header's inline cell accessors agree with the pinned header size, and gives CTest a
 * test to show. */
/* SPDX-License-Identifier: Apache-2.0 */
#include "layout_freeze.h"

#include <stdio.h>

#include "kffi/c_api.h" /* first, so the header is proven self-contained in C */

int main(void) {
  /* A stand-in object: header plus the largest cell these accessors return (a DLTensor). */
  union {
    KFFIObject header;
    unsigned char bytes[sizeof(KFFIObject) + sizeof(DLTensor)];
  } storage;
  char* base = (char*)&storage;
  int failures = 0;

  if ((char*)KFFIObjectGetCellPtr(&storage) != base + 24) {
    fprintf(stderr, "KFFIObjectGetCellPtr does not point 24 bytes past the header\n");
    ++failures;
  }
  if ((char*)KFFIErrorGetCellPtr(&storage) != base + 24) {
    fprintf(stderr, "KFFIErrorGetCellPtr does not point 24 bytes past the header\n");
    ++failures;
  }
  if ((char*)KFFITensorGetDLTensorPtr(&storage) != base + 24) {
    fprintf(stderr, "KFFITensorGetDLTensorPtr does not point 24 bytes past the header\n");
    ++failures;
  }
  if (failures != 0) return 1;
#if defined(__STDC_VERSION__)
  printf("abi layout_freeze (C, __STDC_VERSION__=%ldL): layout pinned\n", (long)__STDC_VERSION__);
#else
  printf("abi layout_freeze (C): layout pinned\n");
#endif
  return 0;
}
