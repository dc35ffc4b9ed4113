// tests/python/kernels/record_kernels.cc: plain C++ structs declared with KFFI_RECORD, and an
// object type with fields, as parameters (tests/python/core/test_records.py).
// SPDX-License-Identifier: Apache-2.0
#include <kffi/kffi.h>
#include <kffi/reflection.h>

#include <cstdint>
#include <string>

namespace {

struct Config {
  double alpha = 1.0;
  int64_t n = 1;
  bool flag = false;
  std::string name;
};
KFFI_RECORD(Config, "rec.Config", alpha, n, flag, name);

struct Pair {
  double x;
  double y;
};
KFFI_RECORD(Pair, "rec.Pair", x, y);

double Score(Config cfg) { return cfg.alpha * static_cast<double>(cfg.n) + (cfg.flag ? 1 : 0); }
std::string Name(Config cfg) { return cfg.name; }
Config MakeConfig(double alpha, int64_t n) { return Config{alpha, n, true, "made"}; }
double PairSum(Pair p, Pair q) { return p.x + p.y + q.x + q.y; }
// A C++ caller passing the struct to a kffi function (here: one from Python).
double CallWithPair(kffi::Function f, double x, double y) { return f(Pair{x, y}).cast<double>(); }
Pair Swap(Pair p) { return Pair{p.y, p.x}; }
// The address of the object an argument arrives in (test_records.py: record boxes reused).
int64_t BoxAddress(kffi::ObjectRef r) {
  return static_cast<int64_t>(reinterpret_cast<intptr_t>(r.get()));
}
// A callee that changes field y of the object it gets, through reflection, and does not keep it.
void SetY(kffi::ObjectRef r, double y) {
  KFFIAny v{};
  v.type_index = kKFFIFloat;
  v.v_float64 = y;
  const KFFIByteArray name{"y", 1};
  if (KFFIObjectSetField(const_cast<kffi::Object*>(r.get()), &name, &v) != 0) {
    kffi::details::ThrowRaisedError(-1);
  }
}
// A callee that keeps its argument beyond the call (a box it holds must never be reused).
kffi::ObjectRef g_kept;
void Keep(kffi::ObjectRef r) { g_kept = r; }
kffi::ObjectRef Kept() { return g_kept; }

}  // namespace

KFFI_EXPORT_DOC(score, Score, "", "cfg");
KFFI_EXPORT_DOC(name_of, Name, "", "cfg");
KFFI_EXPORT_DOC(make_config, MakeConfig, "", "alpha, n");
KFFI_EXPORT_DOC(pair_sum, PairSum, "", "p, q");
KFFI_EXPORT_DOC(call_with_pair, CallWithPair, "", "f, x, y");
KFFI_EXPORT_DOC(swap, Swap, "", "p");
KFFI_EXPORT_DOC(box_address, BoxAddress, "", "r");
KFFI_EXPORT_DOC(keep, Keep, "", "r");
KFFI_EXPORT_DOC(set_y, SetY, "", "r, y");
KFFI_EXPORT_DOC(kept, Kept, "", "");
