// tests/python/kernels/record_contract_kernels.cc: contracts that constrain the fields of record
// parameters: a kffi object type with fields and a KFFI_RECORD struct
// (tests/python/contract/test_record_contracts.py).
// SPDX-License-Identifier: Apache-2.0
#include <kffi/kffi.h>
#include <kffi/reflection.h>

#include <cstdint>
#include <string>

namespace {

class ConfigObj : public kffi::Object {
 public:
  KFFI_DECLARE_OBJECT_INFO("rc.Config", ConfigObj, kffi::Object)
  double alpha = 0.5;
  int64_t n = 1;
  bool flag = false;
  std::string name;
};

KFFI_OBJECT_DEF(ConfigObj)
    .field_rw("alpha", &ConfigObj::alpha)
    .field_rw("n", &ConfigObj::n)
    .field_rw("flag", &ConfigObj::flag)
    .field_rw("name", &ConfigObj::name);

// A subtype: its objects pass where rc.Config is expected.
class SubConfigObj : public ConfigObj {
 public:
  KFFI_DECLARE_OBJECT_INFO("rc.SubConfig", SubConfigObj, ConfigObj)
  int64_t extra = 0;
};

KFFI_OBJECT_DEF(SubConfigObj).field_rw("extra", &SubConfigObj::extra);

struct Blend {
  double alpha;
  int32_t n;
};
KFFI_RECORD(Blend, "rc.Blend", alpha, n);

using Config = kffi::ObjectPtr<ConfigObj>;

double Score(Config cfg, kffi::ConstTensorView x) {
  return cfg->alpha * static_cast<double>(cfg->n) + static_cast<double>(x.size(0));
}
double Mix(Blend b, double y) { return b.alpha * y * b.n; }
int64_t MaybeN(kffi::Optional<Config> cfg) { return cfg.has_value() ? (*cfg)->n : -1; }
bool Flagged(Config cfg) { return cfg->flag; }
Config MakeConfig(double alpha, int64_t n) {
  auto c = kffi::make_object<ConfigObj>();
  c->alpha = alpha;
  c->n = n;
  return Config(c);
}
Config MakeSub(double alpha, int64_t n) {
  auto c = kffi::make_object<SubConfigObj>();
  c->alpha = alpha;
  c->n = n;
  return Config(c);
}

// A contract compiled at run time for Score (its errors are raised here, not at a load).
double ScoreWith(std::string text, Config cfg, kffi::Tensor x) {
  return kffi::FunctionWithContract(Score, "score", text)(cfg, x).cast<double>();
}
// The signature of a contract text, or its error.
std::string Parse(std::string text) { return kffi::Contract::Parse("f", text).signature(); }

}  // namespace

KFFI_EXPORT_CONTRACT(score, Score,
                     "cfg: rc.Config{alpha: float64[0, 1], n: int64[1, 64]}, "
                     "x: Tensor([m], float32)");
KFFI_EXPORT_CONTRACT(mix, Mix, "b: rc.Blend{alpha: float[0.0, 1.0], n: int32[1, 8]}, y: float");
KFFI_EXPORT_CONTRACT(maybe_n, MaybeN, "cfg: Optional[rc.Config{n: int64[0, 8]}]");
KFFI_EXPORT_CONTRACT(flagged, Flagged, "cfg: rc.Config{flag: bool}");
KFFI_EXPORT_DOC(make_config, MakeConfig, "", "alpha, n");
KFFI_EXPORT_DOC(make_sub, MakeSub, "", "alpha, n");
KFFI_EXPORT_DOC(score_with, ScoreWith, "", "text, cfg, x");
KFFI_EXPORT_DOC(parse, Parse, "", "text");
