// tests/abi/add_library_project/kernel.cc: a one-function kernel library for the helper check.
#include <kffi/c_api.h>

extern "C" int kernel_probe() { return KFFI_ABI_VERSION; }
