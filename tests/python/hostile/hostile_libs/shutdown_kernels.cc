// tests/python/hostile/hostile_libs/shutdown_kernels.cc: exports whose calls run Python callbacks,
// for test_hostile_shutdown.py (daemon threads inside them when the interpreter exits).
// SPDX-License-Identifier: Apache-2.0
#include <kffi/contract.h>
#include <kffi/kffi.h>

#include <cstdint>

namespace {

// f(i) for i in [0, n): a plain export (CallExported, the typed safe call).
int64_t CallBack(kffi::Function f, int64_t n) {
  int64_t last = 0;
  for (int64_t i = 0; i < n; ++i) last = f(i).cast<int64_t>();
  return last;
}

// The global function `hostile.callback`, n times: through a contract export.
int64_t CallGlobal(int64_t n) {
  kffi::Function f = kffi::Function::GetGlobalRequired("hostile.callback");
  int64_t last = 0;
  for (int64_t i = 0; i < n; ++i) last = f(i).cast<int64_t>();
  return last;
}

}  // namespace

KFFI_EXPORT(call_back, CallBack);
KFFI_EXPORT_CONTRACT(call_global, CallGlobal, "n: int64");
