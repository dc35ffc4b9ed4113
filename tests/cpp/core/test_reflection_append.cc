// tests/cpp/core/test_reflection_append.cc: KFFITypeRegisterReflection fed one record at a time,
// as TVM-FFI's refl::ObjectDef does through the shim (metadata, then each field, then each
// method): each registration that appends to the last replaces it, the earlier records stay
// readable, and a registration that changes what was registered is refused.
// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>
#include <kffi/kffi.h>
#include <kffi/reflection.h>

#include <cstring>
#include <string>
#include <vector>

namespace {

// The layout a TVM-FFI object type has: the header, then its fields.
class AppendObj : public kffi::Object {
 public:
  KFFI_DECLARE_OBJECT_INFO("test.reflection_append.Obj", AppendObj, kffi::Object)
  int64_t a = 1;
  int64_t b = 2;
  int64_t c = 3;
};

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

int Noop(void*, const KFFIAny*, int32_t, KFFIAny* result) {
  result->type_index = kKFFINone;
  result->zero_padding = 0;
  result->v_int64 = 0;
  return 0;
}

// The records of AppendObj as a registration grows them.
struct Records {
  std::vector<KFFIFieldInfo> fields;
  std::vector<KFFIMethodInfo> methods;
  KFFITypeReflection info{};

  void AddField(const char* name, int64_t offset) {
    KFFIFieldInfo f{};
    f.name = Bytes(name);
    f.offset = offset;
    f.size = 8;
    f.type_index = kKFFIInt;
    f.type_str = Bytes("int");
    f.getter = &kffi::details::FieldGetter<int64_t>;
    fields.push_back(f);
  }
  int Register() {
    info.type_index = AppendObj::RuntimeTypeIndex();
    info.object_size = sizeof(AppendObj);
    info.num_fields = static_cast<int32_t>(fields.size());
    info.fields = fields.empty() ? nullptr : fields.data();
    info.num_methods = static_cast<int32_t>(methods.size());
    info.methods = methods.empty() ? nullptr : methods.data();
    return KFFITypeRegisterReflection(&info);
  }
};

int64_t OffsetOf(int64_t AppendObj::*member) {
  auto probe = kffi::make_object<AppendObj>();
  return reinterpret_cast<const char*>(&((*probe).*member)) -
         reinterpret_cast<const char*>(probe.get());
}

std::vector<std::string> FieldNames(const KFFITypeReflection* r) {
  std::vector<std::string> out;
  for (int32_t i = 0; r != nullptr && i < r->num_fields; ++i) {
    out.emplace_back(r->fields[i].name.data, r->fields[i].name.size);
  }
  return out;
}

TEST(ReflectionAppend, FieldsAndMethodsArriveOneByOne) {
  const int32_t index = AppendObj::RuntimeTypeIndex();
  Records r;
  ASSERT_EQ(r.Register(), 0) << RaisedMessage();  // the metadata: no fields yet
  const KFFITypeReflection* first = KFFIGetTypeReflection(index);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->num_fields, 0);

  r.AddField("a", OffsetOf(&AppendObj::a));
  ASSERT_EQ(r.Register(), 0) << RaisedMessage();
  const KFFITypeReflection* one = KFFIGetTypeReflection(index);
  EXPECT_EQ(FieldNames(one), std::vector<std::string>({"a"}));

  r.AddField("b", OffsetOf(&AppendObj::b));
  ASSERT_EQ(r.Register(), 0) << RaisedMessage();
  const KFFITypeReflection* two = KFFIGetTypeReflection(index);
  EXPECT_EQ(FieldNames(two), std::vector<std::string>({"a", "b"}));
  // The records handed out earlier stay readable (promised for the process lifetime).
  EXPECT_EQ(FieldNames(one), std::vector<std::string>({"a"}));
  EXPECT_EQ(first->num_fields, 0);

  // A method appended after the fields (TVM-FFI's `.def` after `.def_ro`).
  KFFIObjectHandle fn = nullptr;
  ASSERT_EQ(KFFIFunctionCreate(nullptr, &Noop, nullptr, &fn), 0);
  r.methods.push_back(KFFIMethodInfo{Bytes("noop"), fn});
  ASSERT_EQ(r.Register(), 0) << RaisedMessage();
  KFFIObjectDecRef(fn);  // the registry keeps its own reference
  const KFFITypeReflection* with_method = KFFIGetTypeReflection(index);
  ASSERT_EQ(with_method->num_methods, 1);
  EXPECT_EQ(std::string(with_method->methods[0].name.data, with_method->methods[0].name.size),
            "noop");
  EXPECT_EQ(FieldNames(with_method), std::vector<std::string>({"a", "b"}));

  // A field after the method still appends.
  r.AddField("c", OffsetOf(&AppendObj::c));
  ASSERT_EQ(r.Register(), 0) << RaisedMessage();
  EXPECT_EQ(FieldNames(KFFIGetTypeReflection(index)), std::vector<std::string>({"a", "b", "c"}));
  EXPECT_EQ(KFFIGetTypeReflection(index)->num_methods, 1);

  // The same registration again (a second library with the same header) changes nothing.
  const KFFITypeReflection* now = KFFIGetTypeReflection(index);
  ASSERT_EQ(r.Register(), 0) << RaisedMessage();
  EXPECT_EQ(KFFIGetTypeReflection(index), now);

  // Fields read through the registry's records.
  auto obj = kffi::make_object<AppendObj>();
  KFFIByteArray name = Bytes("c");
  KFFIAny out;
  ASSERT_EQ(KFFIObjectGetField(kffi::details::ObjectUnsafe::GetHandle(obj), &name, &out), 0)
      << RaisedMessage();
  EXPECT_EQ(out.type_index, kKFFIInt);
  EXPECT_EQ(out.v_int64, 3);
}

TEST(ReflectionAppend, ARegistrationThatChangesEarlierRecordsIsRefused) {
  // Runs after the test above has registered a, b, c and one method, or on its own: register
  // that state first (accepted either way: it appends to or equals what is there).
  Records full;
  full.AddField("a", OffsetOf(&AppendObj::a));
  full.AddField("b", OffsetOf(&AppendObj::b));
  full.AddField("c", OffsetOf(&AppendObj::c));
  if (full.Register() != 0) {
    // The method of the test above makes this one differ: register the same again.
    KFFIObjectHandle fn = KFFIGetTypeReflection(AppendObj::RuntimeTypeIndex())->methods[0].method;
    full.methods.push_back(KFFIMethodInfo{Bytes("noop"), fn});
    RaisedMessage();
    ASSERT_EQ(full.Register(), 0) << RaisedMessage();
  }
  const KFFITypeReflection* before = KFFIGetTypeReflection(AppendObj::RuntimeTypeIndex());

  Records renamed = full;  // another first field: not an append
  renamed.fields[0].name = Bytes("z");
  renamed.AddField("d", OffsetOf(&AppendObj::c));
  EXPECT_NE(renamed.Register(), 0);
  EXPECT_NE(RaisedMessage().find("ValueError"), std::string::npos);

  Records fewer = full;  // a field dropped
  fewer.fields.pop_back();
  EXPECT_NE(fewer.Register(), 0);
  EXPECT_NE(RaisedMessage().find("ValueError"), std::string::npos);

  Records flagged = full;  // appends a field but changes the type's flags
  flagged.AddField("d", OffsetOf(&AppendObj::c));
  flagged.info.flags = kKFFITypeFlagStructuralEq;
  EXPECT_NE(flagged.Register(), 0);
  EXPECT_NE(RaisedMessage().find("ValueError"), std::string::npos);

  EXPECT_EQ(KFFIGetTypeReflection(AppendObj::RuntimeTypeIndex()), before);
}

}  // namespace
