// tests/abi/add_library_project/kernel.cc: a one-function kernel library for the helper check.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/c_api.h>

extern "C" int kernel_probe() { return KFFI_ABI_VERSION; }
