// tests/python/kernels/object_kernels.cc: object types with fields and methods (KFFI_OBJECT_DEF)
// for test_objects_fields.py and bench/python/object_fields.py.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/kffi.h>
#include <kffi/reflection.h>

#include <cmath>
#include <string>

namespace {

class PointObj : public kffi::Object {
 public:
  KFFI_DECLARE_OBJECT_INFO("test.Point", PointObj, kffi::Object)
  PointObj(double x_, double y_) : x(x_), y(y_) {}
  double Norm() const { return std::sqrt(x * x + y * y); }
  void Shift(double dx, double dy) {
    x += dx;
    y += dy;
  }
  double x;
  double y;
  int64_t id = 0;
  kffi::String label{"p"};
};

class Point3Obj : public PointObj {
 public:
  KFFI_DECLARE_OBJECT_INFO("test.Point3", Point3Obj, PointObj)
  Point3Obj(double x_, double y_, double z_) : PointObj(x_, y_), z(z_) {}
  double z;
};

// A plan object holding other objects: a tensor, a point, and an opaque value.
class PlanObj : public kffi::Object {
 public:
  KFFI_DECLARE_OBJECT_INFO("test.Plan", PlanObj, kffi::Object)
  kffi::String name{"plan"};
  kffi::Tensor weight;
  kffi::ObjectPtr<PointObj> origin;
  kffi::Any extra;
  int64_t tiles = 4;
};

// A configuration built from a Python record (dataclass / NamedTuple): default-constructible.
class ConfigObj : public kffi::Object {
 public:
  KFFI_DECLARE_OBJECT_INFO("test.Config", ConfigObj, kffi::Object)
  int64_t tile_m = 1;
  int64_t tile_n = 1;
  double alpha = 1.0;
  double beta = 0.0;
  kffi::String name{"default"};
  int64_t fixed = 3;
};

KFFI_OBJECT_DEF(ConfigObj)
    .field_rw("tile_m", &ConfigObj::tile_m)
    .field_rw("tile_n", &ConfigObj::tile_n)
    .field_rw("alpha", &ConfigObj::alpha)
    .field_rw("beta", &ConfigObj::beta)
    .field_rw("name", &ConfigObj::name)
    .field_ro("fixed", &ConfigObj::fixed);

KFFI_OBJECT_DEF(PointObj)
    .field_ro("x", &PointObj::x)
    .field_rw("y", &PointObj::y)
    .field_ro("id", &PointObj::id)
    .field_rw("label", &PointObj::label)
    .compare_off()  // a name for people: == and hash leave it out
    .method("norm", &PointObj::Norm)
    .method("shift", &PointObj::Shift)
    .structural_eq();

KFFI_OBJECT_DEF(Point3Obj).field_rw("z", &Point3Obj::z);

KFFI_OBJECT_DEF(PlanObj)
    .field_rw("name", &PlanObj::name)
    .field_rw("weight", &PlanObj::weight)
    .field_rw("origin", &PlanObj::origin)
    .field_rw("extra", &PlanObj::extra)
    .field_ro("tiles", &PlanObj::tiles);

kffi::ObjectPtr<PointObj> MakePoint(double x, double y, int64_t id) {
  auto p = kffi::make_object<PointObj>(x, y);
  p->id = id;
  return p;
}

kffi::ObjectPtr<Point3Obj> MakePoint3(double x, double y, double z) {
  return kffi::make_object<Point3Obj>(x, y, z);
}

double PointSum(kffi::ObjectPtr<PointObj> p) { return p->x + p->y; }

kffi::Array<kffi::ObjectPtr<PointObj>> MakePoints(int64_t n) {
  kffi::Array<kffi::ObjectPtr<PointObj>> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(MakePoint(double(i), double(2 * i), i));
  return out;
}

kffi::ObjectPtr<PlanObj> MakePlan(kffi::Tensor weight) {
  auto p = kffi::make_object<PlanObj>();
  p->weight = std::move(weight);
  p->origin = MakePoint(1.0, 2.0, 9);
  return p;
}

double PointX(kffi::ObjectPtr<PointObj> p) { return p->x; }

double ConfigScore(kffi::ObjectPtr<ConfigObj> c) {
  return double(c->tile_m * c->tile_n) * c->alpha + c->beta;
}

double ConfigScore4(int64_t tile_m, int64_t tile_n, double alpha, double beta) {
  return double(tile_m * tile_n) * alpha + beta;
}

// Borrowed: a const-reference object parameter takes no reference count of its own.
double ConfigScoreRef(const kffi::ObjectPtr<ConfigObj>& c) {
  return double(c->tile_m * c->tile_n) * c->alpha + c->beta;
}

// A copy of a borrowed parameter, kept past the call (None clears it).
kffi::ObjectPtr<ConfigObj> g_kept_config;
void ConfigKeep(const kffi::ObjectPtr<ConfigObj>& c) { g_kept_config = c; }
kffi::ObjectPtr<ConfigObj> ConfigKept() { return g_kept_config; }

kffi::String ConfigName(kffi::ObjectPtr<ConfigObj> c) { return c->name; }

kffi::ObjectPtr<ConfigObj> ConfigEcho(kffi::ObjectPtr<ConfigObj> c) { return c; }

double Sum4(double a, double b, double c, double d) { return a + b + c + d; }

// A plain struct declared with KFFI_RECORD (bench/python/object_fields.py's record rows).
struct Tiles {
  int64_t tile_m = 1;
  int64_t tile_n = 1;
  double alpha = 1.0;
  double beta = 0.0;
};
KFFI_RECORD(Tiles, "test.Tiles", tile_m, tile_n, alpha, beta);

double TilesScore(Tiles t) { return double(t.tile_m * t.tile_n) * t.alpha + t.beta; }

}  // namespace

KFFI_EXPORT(make_point, MakePoint);
KFFI_EXPORT(make_point3, MakePoint3);
KFFI_EXPORT(point_sum, PointSum);
KFFI_EXPORT(make_points, MakePoints);
KFFI_EXPORT(make_plan, MakePlan);
KFFI_EXPORT(point_x, PointX);
KFFI_EXPORT(sum4, Sum4);
KFFI_EXPORT(config_score, ConfigScore);
KFFI_EXPORT(config_score4, ConfigScore4);
KFFI_EXPORT(config_score_ref, ConfigScoreRef);
KFFI_EXPORT(config_keep, ConfigKeep);
KFFI_EXPORT(config_kept, ConfigKept);
KFFI_EXPORT(config_name, ConfigName);
KFFI_EXPORT(config_echo, ConfigEcho);
KFFI_EXPORT_DOC(tiles_score, TilesScore, "", "t");
