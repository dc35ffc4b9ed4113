/* tests/module_libs/plainlib.c: an ordinary shared library with no kffi symbols. Its constructor
 * sets an environment variable, so a test can tell the loader refused it without running it. */
/* SPDX-License-Identifier: Apache-2.0 */
#include <stdlib.h>

__attribute__((constructor)) static void MarkInitialised(void) {
  setenv("KFFI_TEST_PLAINLIB_INITIALISED", "1", 1);
}

__attribute__((visibility("default"))) int plain_add(int a, int b) { return a + b; }
