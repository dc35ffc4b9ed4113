// tests/cpp/core/test_reflection.cc: KFFI_OBJECT_DEF and the reflection C API (fields, methods,
// hostile records refused at registration, field access from several threads).
// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>
#include <kffi/kffi.h>
#include <kffi/reflection.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

class Vec2Obj : public kffi::Object {
 public:
  KFFI_DECLARE_OBJECT_INFO("test.reflection.Vec2", Vec2Obj, kffi::Object)
  Vec2Obj(double x_, double y_) : x(x_), y(y_) {}
  double Norm() const { return std::sqrt(x * x + y * y); }
  void Scale(double s) {
    x *= s;
    y *= s;
  }
  double x;
  double y;
  kffi::String label{"v"};
  int64_t id = 7;
  bool flag = true;
};

class Vec3Obj : public Vec2Obj {
 public:
  KFFI_DECLARE_OBJECT_INFO("test.reflection.Vec3", Vec3Obj, Vec2Obj)
  Vec3Obj(double x_, double y_, double z_) : Vec2Obj(x_, y_), z(z_) {}
  double z;
};

KFFI_OBJECT_DEF(Vec2Obj)
    .field_ro("x", &Vec2Obj::x)
    .field_rw("y", &Vec2Obj::y)
    .field_rw("label", &Vec2Obj::label)
    .field_ro("id", &Vec2Obj::id)
    .field_rw("flag", &Vec2Obj::flag)
    .compare_off()
    .method("norm", &Vec2Obj::Norm)
    .method("scale", &Vec2Obj::Scale)
    .structural_eq();

KFFI_OBJECT_DEF(Vec3Obj).field_rw("z", &Vec3Obj::z);

class DefaultObj : public kffi::Object {
 public:
  KFFI_DECLARE_OBJECT_INFO("test.reflection.Default", DefaultObj, kffi::Object)
  int64_t n = 42;
};

KFFI_OBJECT_DEF(DefaultObj).field_rw("n", &DefaultObj::n);

KFFIByteArray Bytes(const char* s) { return KFFIByteArray{s, std::strlen(s)}; }

std::string RaisedMessage() {
  KFFIObjectHandle err = nullptr;
  KFFIErrorMoveFromRaised(&err);
  if (err == nullptr) return "<none>";
  const KFFIErrorCell* cell = KFFIErrorGetCellPtr(err);
  std::string out = std::string(cell->kind.data, cell->kind.size) + ": " +
                    std::string(cell->message.data, cell->message.size);
  KFFIObjectDecRef(err);
  return out;
}

KFFIAny GetField(const kffi::ObjectPtr<Vec2Obj>& obj, const char* name) {
  KFFIByteArray n = Bytes(name);
  KFFIAny out;
  EXPECT_EQ(KFFIObjectGetField(kffi::details::ObjectUnsafe::GetHandle(obj), &n, &out), 0)
      << RaisedMessage();
  return out;
}

TEST(Reflection, RecordsDescribeTheDeclaredFields) {
  const KFFITypeReflection* r = KFFIGetTypeReflection(Vec2Obj::RuntimeTypeIndex());
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->type_index, Vec2Obj::RuntimeTypeIndex());
  EXPECT_EQ(r->object_size, static_cast<int64_t>(sizeof(Vec2Obj)));
  EXPECT_EQ(r->flags, kKFFITypeFlagStructuralEq);
  ASSERT_EQ(r->num_fields, 5);
  EXPECT_EQ(std::string(r->fields[0].name.data), "x");
  auto probe = kffi::make_object<Vec2Obj>(0.0, 0.0);
  EXPECT_EQ(r->fields[0].offset,
            reinterpret_cast<const char*>(&probe->x) - reinterpret_cast<const char*>(probe.get()));
  EXPECT_EQ(r->fields[0].type_index, kKFFIFloat);
  EXPECT_EQ(r->fields[0].flags, 0);
  EXPECT_EQ(r->fields[0].setter, nullptr);
  EXPECT_EQ(r->fields[1].flags, kKFFIFieldFlagWritable);
  EXPECT_EQ(r->fields[2].type_index, kKFFIStr);
  EXPECT_EQ(std::string(r->fields[2].type_str.data, r->fields[2].type_str.size), "str");
  EXPECT_EQ(r->fields[3].type_index, kKFFIInt);
  EXPECT_EQ(r->fields[4].type_index, kKFFIBool);
  EXPECT_EQ(r->fields[4].flags, kKFFIFieldFlagWritable | kKFFIFieldFlagCompareOff);
  ASSERT_EQ(r->num_methods, 2);
  EXPECT_EQ(std::string(r->methods[0].name.data), "norm");
  // A subclass declares only its own fields; lookups by name walk the ancestors.
  const KFFITypeReflection* r3 = KFFIGetTypeReflection(Vec3Obj::RuntimeTypeIndex());
  ASSERT_NE(r3, nullptr);
  EXPECT_EQ(r3->num_fields, 1);
  EXPECT_EQ(r3->flags, 0);
  EXPECT_EQ(KFFIGetTypeReflection(kKFFIArray), nullptr);
  EXPECT_EQ(KFFIGetTypeReflection(-5), nullptr);
  EXPECT_EQ(KFFIGetTypeReflection(1 << 30), nullptr);
}

TEST(Reflection, GetAndSetThroughTheCApi) {
  auto v = kffi::make_object<Vec3Obj>(3.0, 4.0, 5.0);
  kffi::ObjectPtr<Vec2Obj> base(v);
  KFFIAny x = GetField(base, "x");
  EXPECT_EQ(x.type_index, kKFFIFloat);
  EXPECT_EQ(x.v_float64, 3.0);
  KFFIAny z = GetField(base, "z");
  EXPECT_EQ(z.v_float64, 5.0);
  KFFIObjectHandle h = kffi::details::ObjectUnsafe::GetHandle(base);
  KFFIByteArray name = Bytes("y");
  kffi::Any nine(9.0);
  ASSERT_EQ(KFFIObjectSetField(h, &name, kffi::details::AnyUnsafe::Raw(nine)), 0);
  EXPECT_EQ(v->y, 9.0);
  kffi::Any text("a string, not a float");
  EXPECT_EQ(KFFIObjectSetField(h, &name, kffi::details::AnyUnsafe::Raw(text)), -1);
  EXPECT_EQ(RaisedMessage(), "TypeError: test.reflection.Vec3.y: expected float, got str");
  name = Bytes("x");
  EXPECT_EQ(KFFIObjectSetField(h, &name, kffi::details::AnyUnsafe::Raw(nine)), -1);
  EXPECT_EQ(RaisedMessage(), "AttributeError: field `test.reflection.Vec3.x` is read-only");
  name = Bytes("nope");
  KFFIAny out;
  EXPECT_EQ(KFFIObjectGetField(h, &name, &out), -1);
  EXPECT_EQ(RaisedMessage(), "AttributeError: `test.reflection.Vec3` object has no field `nope`");
  name = Bytes("label");
  kffi::Any label(kffi::String("a label longer than seven bytes"));
  ASSERT_EQ(KFFIObjectSetField(h, &name, kffi::details::AnyUnsafe::Raw(label)), 0);
  EXPECT_EQ(std::string(v->label.c_str()), "a label longer than seven bytes");
  KFFIAny got = GetField(base, "label");
  kffi::Any owned = kffi::details::AnyUnsafe::FromOwnedRaw(got);
  EXPECT_EQ(owned.cast<std::string>(), "a label longer than seven bytes");
}

TEST(Reflection, CreatorMakesADefaultObject) {
  EXPECT_EQ(KFFIGetTypeReflection(Vec2Obj::RuntimeTypeIndex())->creator, nullptr);
  const KFFITypeReflection* r = KFFIGetTypeReflection(DefaultObj::RuntimeTypeIndex());
  ASSERT_NE(r, nullptr);
  ASSERT_NE(r->creator, nullptr);
  KFFIObjectHandle h = nullptr;
  ASSERT_EQ(r->creator(&h), 0);
  auto obj = kffi::details::ObjectUnsafe::FromOwnedHandle<DefaultObj>(h);
  EXPECT_EQ(obj->type_index(), DefaultObj::RuntimeTypeIndex());
  EXPECT_EQ(obj->n, 42);
  EXPECT_EQ(obj->use_count(), 1u);
}

// Objects the creator makes: their memory goes back to the creator (one block per thread), and
// each one is constructed afresh whether its memory is new or kept.
class CountedObj : public kffi::Object {
 public:
  KFFI_DECLARE_OBJECT_INFO("test.reflection.Counted", CountedObj, kffi::Object)
  CountedObj() { live.fetch_add(1); }
  ~CountedObj() { live.fetch_sub(1); }
  int64_t n = 5;
  kffi::String label{"a default label longer than seven bytes"};
  static std::atomic<int> live;
};
std::atomic<int> CountedObj::live{0};

KFFI_OBJECT_DEF(CountedObj).field_rw("n", &CountedObj::n).field_rw("label", &CountedObj::label);

KFFIObjectHandle Create(int32_t type_index) {
  KFFIObjectHandle h = nullptr;
  EXPECT_EQ(KFFIGetTypeReflection(type_index)->creator(&h), 0);
  return h;
}

TEST(Reflection, CreatorReusesTheMemoryOfItsLastObjectAndConstructsItAgain) {
  const int32_t index = CountedObj::RuntimeTypeIndex();
  KFFIObjectHandle first = Create(index);
  auto* obj = static_cast<CountedObj*>(static_cast<kffi::Object*>(first));
  obj->n = 99;
  obj->label = kffi::String("changed by the callee, and long enough to allocate");
  EXPECT_EQ(CountedObj::live.load(), 1);
  ASSERT_EQ(KFFIObjectDecRef(first), 0);
  EXPECT_EQ(CountedObj::live.load(), 0);  // destroyed at once; only the memory is kept

  KFFIObjectHandle second = Create(index);
  EXPECT_EQ(second, first);  // the same block
  auto* again = static_cast<CountedObj*>(static_cast<kffi::Object*>(second));
  EXPECT_EQ(again->n, 5);  // constructed afresh: nothing of the last object shows
  EXPECT_EQ(std::string(again->label.c_str()), "a default label longer than seven bytes");
  EXPECT_EQ(again->use_count(), 1u);
  EXPECT_EQ(again->weak_count(), 1u);

  // With the block taken, another object gets new memory; of two freed, one is kept.
  KFFIObjectHandle third = Create(index);
  EXPECT_NE(third, second);
  EXPECT_EQ(CountedObj::live.load(), 2);
  ASSERT_EQ(KFFIObjectDecRef(second), 0);
  ASSERT_EQ(KFFIObjectDecRef(third), 0);
  EXPECT_EQ(CountedObj::live.load(), 0);
}

TEST(Reflection, CreatorMemoryHeldByAWeakReferenceComesBackWhenItGoes) {
  const int32_t index = CountedObj::RuntimeTypeIndex();
  KFFIObjectHandle h = Create(index);
  ASSERT_EQ(KFFIObjectIncWeakRef(h), 0);
  ASSERT_EQ(KFFIObjectDecRef(h), 0);
  EXPECT_EQ(CountedObj::live.load(), 0);
  KFFIObjectHandle locked = h;
  ASSERT_EQ(KFFIObjectWeakLock(h, &locked), 0);
  EXPECT_EQ(locked, nullptr);  // dead, though its memory is still held
  KFFIObjectHandle other = Create(index);
  EXPECT_NE(other, h);                    // the weak reference still holds h's memory
  ASSERT_EQ(KFFIObjectDecWeakRef(h), 0);  // h's memory is kept (`other` took the kept block)
  ASSERT_EQ(KFFIObjectDecRef(other), 0);  // one block is kept already: this one is freed
  KFFIObjectHandle next = Create(index);
  EXPECT_EQ(next, h);
  EXPECT_EQ(static_cast<CountedObj*>(static_cast<kffi::Object*>(next))->n, 5);
  // The block kept by a thread is freed when it ends (LeakSanitizer checks the threads of the
  // next test; the main thread's is freed at exit).
  ASSERT_EQ(KFFIObjectDecRef(next), 0);
}

TEST(Reflection, CreatorObjectsMadeAndFreedOnManyThreads) {
  const int32_t index = CountedObj::RuntimeTypeIndex();
  // Objects made on one thread and freed on another: each thread keeps at most one block, and
  // frees it when it ends.
  std::vector<KFFIObjectHandle> handed(64, nullptr);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 1000; ++i) {
        KFFIObjectHandle h = Create(index);
        auto* obj = static_cast<CountedObj*>(static_cast<kffi::Object*>(h));
        EXPECT_EQ(obj->n, 5);
        obj->n = t;
        if (i % 100 == 0) {
          handed[static_cast<size_t>(t * 16 + i / 100)] = h;  // freed by the main thread
        } else {
          EXPECT_EQ(KFFIObjectDecRef(h), 0);
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (KFFIObjectHandle h : handed) {
    if (h != nullptr) {
      EXPECT_EQ(KFFIObjectDecRef(h), 0);
    }
  }
  EXPECT_EQ(CountedObj::live.load(), 0);
}

TEST(Reflection, MethodsTakeTheObjectFirst) {
  const KFFITypeReflection* r = KFFIGetTypeReflection(Vec2Obj::RuntimeTypeIndex());
  ASSERT_NE(r, nullptr);
  auto v = kffi::make_object<Vec2Obj>(3.0, 4.0);
  kffi::Function norm(
      kffi::details::ObjectUnsafe::FromBorrowedHandle<kffi::FunctionObj>(r->methods[0].method));
  kffi::Function scale(
      kffi::details::ObjectUnsafe::FromBorrowedHandle<kffi::FunctionObj>(r->methods[1].method));
  EXPECT_EQ(norm(v).cast<double>(), 5.0);
  scale(v, 2.0);
  EXPECT_EQ(norm(v).cast<double>(), 10.0);
  EXPECT_THROW(norm(kffi::String("not a vector")), kffi::Error);
}

// ---- hostile records ---------------------------------------------------------------------------

class HostileObj : public kffi::Object {
 public:
  KFFI_DECLARE_OBJECT_INFO("test.reflection.Hostile", HostileObj, kffi::Object)
  int64_t a = 0;
};

struct HostileRecord {
  KFFIFieldInfo field{};
  KFFITypeReflection info{};
  HostileRecord() {
    field.name = Bytes("a");
    auto probe = kffi::make_object<HostileObj>();
    field.offset =
        reinterpret_cast<const char*>(&probe->a) - reinterpret_cast<const char*>(probe.get());
    field.size = 8;
    field.type_index = kKFFIInt;
    field.type_str = Bytes("int");
    field.getter = &kffi::details::FieldGetter<int64_t>;
    info.type_index = HostileObj::RuntimeTypeIndex();
    info.object_size = sizeof(HostileObj);
    info.num_fields = 1;
    info.fields = &field;
  }
  std::string Refusal() {
    if (KFFITypeRegisterReflection(&info) == 0) return "accepted";
    return RaisedMessage();
  }
};

TEST(Reflection, HostileRecordsAreRefusedClearly) {
  {
    HostileRecord r;
    r.field.offset = 4096;
    EXPECT_NE(r.Refusal().find("offset 4096 and size 8 do not lie inside the object"),
              std::string::npos);
  }
  {
    HostileRecord r;
    r.field.offset = INT64_MAX - 2;
    r.field.size = INT64_MAX;  // the sum would overflow
    EXPECT_NE(r.Refusal().find("do not lie inside the object"), std::string::npos);
  }
  {
    HostileRecord r;
    r.field.offset = 8;  // inside the header
    EXPECT_NE(r.Refusal().find("do not lie inside"), std::string::npos);
  }
  {
    HostileRecord r;
    r.field.name = Bytes("\xff\xfe");
    EXPECT_NE(r.Refusal().find("name is not UTF-8"), std::string::npos);
  }
  {
    HostileRecord r;
    r.field.getter = nullptr;
    EXPECT_NE(r.Refusal().find("getter is NULL"), std::string::npos);
  }
  {
    HostileRecord r;
    r.field.flags = kKFFIFieldFlagWritable;  // no setter
    EXPECT_NE(r.Refusal().find("writable but setter is NULL"), std::string::npos);
  }
  {
    HostileRecord r;
    KFFIFieldInfo two[2] = {r.field, r.field};
    r.info.fields = two;
    r.info.num_fields = 2;
    EXPECT_NE(r.Refusal().find("repeats an earlier name"), std::string::npos);
  }
  {
    HostileRecord r;
    r.info.num_fields = -1;
    EXPECT_NE(r.Refusal().find("out of range"), std::string::npos);
  }
  {
    HostileRecord r;
    r.info.type_index = kKFFIArray;
    EXPECT_NE(r.Refusal().find("not a registered dynamic object type"), std::string::npos);
  }
  {
    HostileRecord r;
    r.info.object_size = 4;
    EXPECT_NE(r.Refusal().find("object_size 4"), std::string::npos);
  }
  {
    HostileRecord r;
    r.info.flags = 4;  // no such flag (1 and 2 are known)
    EXPECT_NE(r.Refusal().find("unknown type flags 4"), std::string::npos);
  }
  {
    HostileRecord r;
    r.field.flags = 4;  // no such field flag (1 and 2 are known)
    EXPECT_NE(r.Refusal().find("unknown flags 4"), std::string::npos);
  }
  // A type key that is not UTF-8 is refused (no binding could name the type).
  {
    const char bad_key[] = "test.reflection.\xc3\x28";
    KFFIByteArray key{bad_key, sizeof(bad_key) - 1};
    int32_t index = -1;
    ASSERT_EQ(KFFITypeGetOrAllocIndex(&key, -1, 1, kKFFIObject, &index), 0);
    HostileRecord r;
    r.info.type_index = index;
    EXPECT_NE(r.Refusal().find("type key is not UTF-8"), std::string::npos);
  }
  // A parent chain cannot loop: a type whose parent is itself is refused when it is made.
  {
    KFFIByteArray key = Bytes("test.reflection.SelfParent");
    int32_t index = -1;
    EXPECT_EQ(KFFITypeGetOrAllocIndex(&key, 7000, 1, 7000, &index), -1);
    EXPECT_NE(RaisedMessage().find("does not match parent"), std::string::npos);
  }
  EXPECT_EQ(KFFITypeRegisterReflection(nullptr), -1);
  EXPECT_NE(RaisedMessage().find("info is NULL"), std::string::npos);
  // The good record registers; the same again is accepted, a different one refused.
  HostileRecord good;
  EXPECT_EQ(good.Refusal(), "accepted");
  EXPECT_EQ(good.Refusal(), "accepted");
  HostileRecord other;
  other.field.name = Bytes("b");
  EXPECT_NE(other.Refusal().find("registered already with other fields"), std::string::npos);
}

TEST(Reflection, FieldsFromManyThreads) {
  auto v = kffi::make_object<Vec2Obj>(1.0, 2.0);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) {
        KFFIAny x = GetField(v, "x");
        KFFIAny label = GetField(v, "label");
        if (x.v_float64 != 1.0 || label.type_index != kKFFISmallStr) failures.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
