// tests/cpp/core/test_object.cc: ObjectPtr, WeakObjectPtr, ObjectRef, user object types, the type
// registry, opaque objects and reference counting (also from several threads).
// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>
#include <kffi/kffi.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

// Test allocator hooks. make_object takes the aligned operator new for an over-aligned type and
// the plain one otherwise. Replacing the aligned one counts the memory of every over-aligned
// object this binary makes (TrackedObj is over-aligned for that); the plain one counts only while
// a test sets g_count_plain on its thread (everything else allocates through it too). A test
// reads the difference before and after.
namespace {
std::atomic<long> g_object_allocations{0};
std::atomic<long> g_plain_allocations{0};
thread_local bool g_count_plain = false;
}  // namespace

void* operator new(std::size_t size) {
  void* p = std::malloc(size == 0 ? 1 : size);
  if (p == nullptr) throw std::bad_alloc();
  if (g_count_plain) g_plain_allocations.fetch_add(1);
  return p;
}
// Both plain deletes release through one helper: the sized one calling `operator delete(p)` by
// name makes g++ 12 at -O3 pair the inlined malloc with that operator and warn
// (-Wmismatched-new-delete), although the pair is this file's own and matches.
namespace {
void ReleasePlain(void* p) noexcept {
  if (p != nullptr && g_count_plain) g_plain_allocations.fetch_sub(1);
  std::free(p);
}
void ReleaseAligned(void* p) noexcept {
  if (p != nullptr) g_object_allocations.fetch_sub(1);
  std::free(p);
}
}  // namespace

void operator delete(void* p) noexcept { ReleasePlain(p); }
void operator delete(void* p, std::size_t) noexcept { ReleasePlain(p); }

void* operator new(std::size_t size, std::align_val_t align) {
  void* p = nullptr;
  if (posix_memalign(&p, std::max(static_cast<size_t>(align), sizeof(void*)), size + 1) != 0) {
    throw std::bad_alloc();
  }
  g_object_allocations.fetch_add(1);
  return p;
}
void operator delete(void* p, std::align_val_t) noexcept { ReleaseAligned(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { ReleaseAligned(p); }

namespace {

using kffi::details::ObjectUnsafe;

// Live instances of TrackedObj and its subclasses: the destructor is the strong release.
std::atomic<int> g_live_tracked{0};

class alignas(32) TrackedObj : public kffi::Object {
 public:
  KFFI_DECLARE_OBJECT_INFO("test.object.Tracked", TrackedObj, kffi::Object)
  explicit TrackedObj(int64_t v) : value(v) { g_live_tracked.fetch_add(1); }
  ~TrackedObj() { g_live_tracked.fetch_sub(1); }
  int64_t value;
};

class DerivedTrackedObj : public TrackedObj {
 public:
  KFFI_DECLARE_OBJECT_INFO("test.object.DerivedTracked", DerivedTrackedObj, TrackedObj)
  DerivedTrackedObj(int64_t v, std::string t) : TrackedObj(v), tag(std::move(t)) {}
  std::string tag;
};

class LeafTrackedObj final : public DerivedTrackedObj {
 public:
  KFFI_DECLARE_FINAL_OBJECT_INFO("test.object.LeafTracked", LeafTrackedObj, DerivedTrackedObj)
  explicit LeafTrackedObj(int64_t v) : DerivedTrackedObj(v, "leaf") {}
};

class ThrowingObj : public kffi::Object {
 public:
  KFFI_DECLARE_OBJECT_INFO("test.object.Throwing", ThrowingObj, kffi::Object)
  ThrowingObj() { throw std::runtime_error("constructor failed"); }
};

class Tracked : public kffi::ObjectRef {
 public:
  KFFI_DEFINE_OBJECT_REF_METHODS(Tracked, kffi::ObjectRef, TrackedObj)
};

KFFIObjectHandle HandleOf(const kffi::ObjectPtr<TrackedObj>& p) {
  return ObjectUnsafe::GetHandle(p);
}

// Moves the raised error out of this thread's slot.
kffi::Error TakeRaisedError() {
  KFFIObjectHandle h = nullptr;
  KFFIErrorMoveFromRaised(&h);
  if (h == nullptr) return kffi::Error("NoError", "no error was raised");
  return kffi::Error(ObjectUnsafe::FromOwnedHandle<kffi::Object>(h));
}

// Every test checks that it leaves no object alive and no object memory allocated.
class ObjectTest : public ::testing::Test {
 protected:
  void SetUp() override {
    live_before_ = g_live_tracked.load();
    allocations_before_ = g_object_allocations.load();
  }
  void TearDown() override {
    EXPECT_EQ(g_live_tracked.load(), live_before_) << "objects leaked";
    EXPECT_EQ(g_object_allocations.load(), allocations_before_) << "object memory leaked";
  }
  long allocated() const { return g_object_allocations.load() - allocations_before_; }
  int live() const { return g_live_tracked.load() - live_before_; }

 private:
  int live_before_ = 0;
  long allocations_before_ = 0;
};

using ObjectPtrTest = ObjectTest;
using ObjectWeakPtr = ObjectTest;
using ObjectRefTest = ObjectTest;
using ObjectRefCount = ObjectTest;

TEST_F(ObjectPtrTest, MakeObjectStartsWithOneStrongAndOneWeakReference) {
  auto p = kffi::make_object<TrackedObj>(7);
  EXPECT_EQ(live(), 1);
  EXPECT_EQ(allocated(), 1);
  EXPECT_EQ(p->value, 7);
  EXPECT_EQ(p.use_count(), 1u);
  EXPECT_TRUE(p.unique());
  EXPECT_EQ(p->weak_count(), 1u);
  EXPECT_EQ(p->type_index(), TrackedObj::RuntimeTypeIndex());
  EXPECT_GE(p->type_index(), static_cast<int32_t>(kKFFIDynObjectBegin));
  EXPECT_EQ(p->GetTypeKey(), "test.object.Tracked");
  EXPECT_EQ(ObjectUnsafe::Header(p.get())->combined_ref_count, (uint64_t{1} << 32) | 1);
}

TEST_F(ObjectPtrTest, CopyAndMoveAdjustTheStrongCount) {
  auto p = kffi::make_object<TrackedObj>(1);
  kffi::ObjectPtr<TrackedObj> copy = p;
  EXPECT_EQ(p.use_count(), 2u);
  EXPECT_EQ(copy, p);
  kffi::ObjectPtr<TrackedObj> moved = std::move(copy);
  EXPECT_EQ(copy, nullptr);  // NOLINT(bugprone-use-after-move): a moved-from pointer is null
  EXPECT_EQ(copy.use_count(), 0u);
  EXPECT_EQ(p.use_count(), 2u);
  kffi::ObjectPtr<TrackedObj> assigned;
  assigned = moved;
  EXPECT_EQ(p.use_count(), 3u);
  assigned = kffi::ObjectPtr<TrackedObj>();
  EXPECT_EQ(p.use_count(), 2u);
  moved.reset();
  EXPECT_EQ(p.use_count(), 1u);
  kffi::ObjectPtr<TrackedObj>& alias = p;
  p = alias;  // self-assignment keeps the object
  EXPECT_EQ(p.use_count(), 1u);
  auto other = kffi::make_object<TrackedObj>(2);
  p.swap(other);
  EXPECT_EQ(p->value, 2);
  EXPECT_EQ(other->value, 1);
  EXPECT_EQ(live(), 2);
}

TEST_F(ObjectPtrTest, LastReleaseRunsTheDestructorAndFreesTheMemory) {
  auto p = kffi::make_object<TrackedObj>(3);
  auto q = p;
  p.reset();
  EXPECT_EQ(live(), 1);
  q.reset();
  EXPECT_EQ(live(), 0);
  EXPECT_EQ(allocated(), 0);
  EXPECT_FALSE(q);
}

TEST_F(ObjectPtrTest, ConvertsFromSubclassToBaseSharingTheObject) {
  auto d = kffi::make_object<DerivedTrackedObj>(9, "derived");
  kffi::ObjectPtr<TrackedObj> base = d;
  kffi::ObjectPtr<kffi::Object> root = base;
  EXPECT_EQ(d.use_count(), 3u);
  EXPECT_EQ(static_cast<const void*>(root.get()), static_cast<const void*>(d.get()));
  kffi::ObjectPtr<kffi::Object> moved_root = std::move(base);
  EXPECT_FALSE(base);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(d.use_count(), 3u);
  EXPECT_EQ(root->GetTypeKey(), "test.object.DerivedTracked");
}

TEST_F(ObjectPtrTest, ConstructorExceptionFreesTheMemory) {
  EXPECT_THROW(kffi::make_object<ThrowingObj>(), std::runtime_error);
  EXPECT_EQ(allocated(), 0);
}

TEST_F(ObjectPtrTest, OverAlignedTypesGetAlignedMemory) {
  std::vector<kffi::ObjectPtr<TrackedObj>> objs;
  for (int i = 0; i < 16; ++i) objs.push_back(kffi::make_object<TrackedObj>(i));
  for (const auto& o : objs) {
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(o.get()) % alignof(TrackedObj), 0u);
  }
  EXPECT_EQ(allocated(), 16);
}

// A type of default alignment takes the plain operator new and gives its memory back to the
// plain operator delete (a mismatched pair would show in the counts, and under ASan).
class PlainObj : public kffi::Object {
 public:
  KFFI_DECLARE_OBJECT_INFO("test.object.Plain", PlainObj, kffi::Object)
  int64_t value = 7;
};

TEST_F(ObjectPtrTest, DefaultAlignedTypesTakeThePlainAllocator) {
  static_assert(alignof(PlainObj) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__);
  (void)PlainObj::RuntimeTypeIndex();  // registers the type first (the registry allocates)
  const long before = g_plain_allocations.load();
  g_count_plain = true;
  auto p = kffi::make_object<PlainObj>();
  const long during = g_plain_allocations.load() - before;
  kffi::WeakObjectPtr<PlainObj> weak(p);
  p.reset();
  const long after_strong = g_plain_allocations.load() - before;
  weak = kffi::WeakObjectPtr<PlainObj>();
  const long after_weak = g_plain_allocations.load() - before;
  g_count_plain = false;
  EXPECT_EQ(during, 1);
  EXPECT_EQ(after_strong, 1);  // the weak reference keeps the header
  EXPECT_EQ(after_weak, 0);
  EXPECT_EQ(allocated(), 0);  // nothing through the aligned operator new
}

TEST_F(ObjectWeakPtr, LockWorksWhileAliveThenGivesNullAndTheMemoryOutlivesTheValue) {
  auto p = kffi::make_object<TrackedObj>(12);
  kffi::WeakObjectPtr<TrackedObj> weak(p);
  EXPECT_EQ(p->weak_count(), 2u);
  EXPECT_FALSE(weak.expired());
  EXPECT_EQ(weak.lock(), p);
  EXPECT_EQ(p.use_count(), 1u);  // the locked temporary is gone again
  kffi::WeakObjectPtr<TrackedObj> weak_copy = weak;
  p.reset();
  EXPECT_EQ(live(), 0);       // the destructor ran with the last strong reference
  EXPECT_EQ(allocated(), 1);  // the weak references keep the header readable
  EXPECT_TRUE(weak.expired());
  EXPECT_FALSE(weak.lock());
  EXPECT_FALSE(weak_copy.lock());
  { kffi::WeakObjectPtr<TrackedObj> drop = std::move(weak); }
  EXPECT_EQ(allocated(), 1);
  weak_copy = kffi::WeakObjectPtr<TrackedObj>();
  EXPECT_EQ(allocated(), 0);  // the last weak reference freed it
}

TEST_F(ObjectWeakPtr, CApiWeakLockAfterDeathGivesNull) {
  auto p = kffi::make_object<TrackedObj>(13);
  KFFIObjectHandle h = HandleOf(p);
  ASSERT_EQ(KFFIObjectIncWeakRef(h), 0);
  KFFIObjectHandle out = nullptr;
  ASSERT_EQ(KFFIObjectWeakLock(h, &out), 0);
  EXPECT_EQ(out, h);
  EXPECT_EQ(p.use_count(), 2u);
  ASSERT_EQ(KFFIObjectDecRef(out), 0);
  p.reset();
  EXPECT_EQ(live(), 0);
  out = h;
  ASSERT_EQ(KFFIObjectWeakLock(h, &out), 0);
  EXPECT_EQ(out, nullptr);
  EXPECT_EQ(allocated(), 1);
  ASSERT_EQ(KFFIObjectDecWeakRef(h), 0);
  EXPECT_EQ(allocated(), 0);
}

TEST_F(ObjectWeakPtr, ConcurrentLocksNeverResurrectADeadObject) {
  for (int round = 0; round < 50; ++round) {
    auto strong = kffi::make_object<TrackedObj>(round);
    kffi::WeakObjectPtr<TrackedObj> weak(strong);
    std::atomic<bool> go{false};
    std::atomic<int> wrong_value{0}, revived{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&] {
        while (!go.load()) std::this_thread::yield();
        bool seen_dead = false;
        for (int i = 0; i < 2000; ++i) {
          kffi::ObjectPtr<TrackedObj> s = weak.lock();
          if (!s) {
            seen_dead = true;
            continue;
          }
          if (seen_dead) revived.fetch_add(1);
          if (s->value != round) wrong_value.fetch_add(1);
        }
      });
    }
    go.store(true);
    strong.reset();
    for (auto& t : threads) t.join();
    EXPECT_EQ(wrong_value.load(), 0);
    EXPECT_EQ(revived.load(), 0);
    EXPECT_TRUE(weak.expired());
    EXPECT_EQ(live(), 0);
  }
}

TEST_F(ObjectRefTest, NullByDefaultAndTypedWhenSet) {
  kffi::ObjectRef null_ref;
  EXPECT_FALSE(null_ref.defined());
  EXPECT_FALSE(Tracked(kffi::details::UnsafeInit{}).defined());
  EXPECT_EQ(null_ref.get(), nullptr);
  EXPECT_EQ(null_ref.use_count(), 0u);
  Tracked ref(kffi::make_object<TrackedObj>(21));
  EXPECT_TRUE(ref.defined());
  EXPECT_EQ(ref->value, 21);
  EXPECT_EQ(ref.get()->value, 21);
  Tracked copy = ref;
  EXPECT_TRUE(copy.same_as(ref));
  EXPECT_EQ(ref.use_count(), 2u);
  Tracked other(kffi::make_object<TrackedObj>(21));
  EXPECT_FALSE(other.same_as(ref));  // identity, not value
  EXPECT_EQ(live(), 2);
}

TEST_F(ObjectRefTest, AsGivesTheObjectOnlyForMatchingTypes) {
  Tracked plain(kffi::make_object<TrackedObj>(1));
  Tracked derived(kffi::make_object<DerivedTrackedObj>(2, "d"));
  EXPECT_NE(plain.as<TrackedObj>(), nullptr);
  EXPECT_EQ(plain.as<DerivedTrackedObj>(), nullptr);
  ASSERT_NE(derived.as<DerivedTrackedObj>(), nullptr);
  EXPECT_EQ(derived.as<DerivedTrackedObj>()->tag, "d");
  EXPECT_EQ(derived.as<kffi::StrObj>(), nullptr);
  EXPECT_EQ(kffi::ObjectRef().as<TrackedObj>(), nullptr);
}

TEST_F(ObjectRefTest, IsInstanceWalksTheAncestorChain) {
  auto base = kffi::make_object<TrackedObj>(1);
  auto mid = kffi::make_object<DerivedTrackedObj>(2, "mid");
  auto leaf = kffi::make_object<LeafTrackedObj>(3);
  EXPECT_TRUE(base->IsInstance<kffi::Object>());
  EXPECT_TRUE(base->IsInstance<TrackedObj>());
  EXPECT_FALSE(base->IsInstance<DerivedTrackedObj>());
  EXPECT_TRUE(mid->IsInstance<TrackedObj>());
  EXPECT_TRUE(mid->IsInstance<DerivedTrackedObj>());
  EXPECT_FALSE(mid->IsInstance<LeafTrackedObj>());
  EXPECT_TRUE(leaf->IsInstance<kffi::Object>());
  EXPECT_TRUE(leaf->IsInstance<TrackedObj>());
  EXPECT_TRUE(leaf->IsInstance<DerivedTrackedObj>());
  EXPECT_TRUE(leaf->IsInstance<LeafTrackedObj>());
  EXPECT_FALSE(leaf->IsInstance<kffi::FunctionObj>());
  EXPECT_FALSE(leaf->IsInstance<kffi::StrObj>());
  EXPECT_FALSE(leaf->IsInstance<ThrowingObj>());
}

TEST_F(ObjectRefTest, BuiltinObjectsAreInstancesOfTheirStaticTypes) {
  kffi::Function f = [](int64_t x) { return x; };
  EXPECT_TRUE(f->IsInstance<kffi::FunctionObj>());
  EXPECT_FALSE(f->IsInstance<kffi::StrObj>());
  EXPECT_FALSE(f->IsInstance<TrackedObj>());
  kffi::Any s = kffi::String("a string longer than seven bytes");
  auto obj = s.cast<kffi::ObjectPtr<kffi::Object>>();
  EXPECT_TRUE(obj->IsInstance<kffi::StrObj>());
  EXPECT_EQ(obj->GetTypeKey(), "ffi.Str");
}

TEST(ObjectTypeRegistry, BuiltinKeysHaveTheirFixedIndices) {
  // The static object types in index order, from kKFFIObject (64) to kKFFIDict (76).
  const char* keys[] = {"ffi.Object",   "ffi.Str",    "ffi.Bytes",          "ffi.Error",
                        "ffi.Function", "ffi.Shape",  "ffi.Tensor",         "ffi.Array",
                        "ffi.Map",      "ffi.Module", "ffi.OpaquePyObject", "ffi.List",
                        "ffi.Dict"};
  ASSERT_EQ(kKFFIObject + 12, kKFFIDict);
  for (int32_t index = kKFFIObject; index <= kKFFIDict; ++index) {
    const char* key = keys[index - kKFFIObject];
    SCOPED_TRACE(key);
    KFFIByteArray k{key, std::strlen(key)};
    int32_t out = -1;
    ASSERT_EQ(KFFITypeKeyToIndex(&k, &out), 0);
    EXPECT_EQ(out, index);
    const KFFITypeInfo* info = KFFIGetTypeInfo(index);
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(info->type_index, index);
    EXPECT_EQ(std::string(info->type_key.data, info->type_key.size), key);
    EXPECT_EQ(info->type_key.data[info->type_key.size], '\0');
    if (index == kKFFIObject) {
      EXPECT_EQ(info->type_depth, 0);
    } else {
      ASSERT_EQ(info->type_depth, 1);
      EXPECT_EQ(info->type_ancestors[0], kKFFIObject);
    }
  }
}

TEST(ObjectTypeRegistry, UserTypesGetDynamicIndicesAndTheirAncestors) {
  const int32_t base = TrackedObj::RuntimeTypeIndex();
  const int32_t mid = DerivedTrackedObj::RuntimeTypeIndex();
  const int32_t leaf = LeafTrackedObj::RuntimeTypeIndex();
  EXPECT_GE(base, static_cast<int32_t>(kKFFIDynObjectBegin));
  EXPECT_NE(base, mid);
  EXPECT_NE(mid, leaf);
  const KFFITypeInfo* info = KFFIGetTypeInfo(leaf);
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(std::string(info->type_key.data, info->type_key.size), "test.object.LeafTracked");
  ASSERT_EQ(info->type_depth, 3);
  EXPECT_EQ(info->type_ancestors[0], kKFFIObject);
  EXPECT_EQ(info->type_ancestors[1], base);
  EXPECT_EQ(info->type_ancestors[2], mid);
  KFFIByteArray key{"test.object.DerivedTracked", std::strlen("test.object.DerivedTracked")};
  int32_t out = -1;
  ASSERT_EQ(KFFITypeKeyToIndex(&key, &out), 0);
  EXPECT_EQ(out, mid);
  EXPECT_EQ(KFFIGetTypeInfo(mid)->type_depth, 2);
}

TEST(ObjectTypeRegistry, UnknownKeyIsKeyErrorAndUnknownIndexHasNoInfo) {
  KFFIByteArray key{"test.object.NoSuchType", std::strlen("test.object.NoSuchType")};
  int32_t out = 12345;
  EXPECT_EQ(KFFITypeKeyToIndex(&key, &out), -1);
  kffi::Error e = TakeRaisedError();
  EXPECT_EQ(e.kind(), "KeyError");
  EXPECT_EQ(e.message(), "Type key `test.object.NoSuchType` is not registered");
  EXPECT_EQ(KFFIGetTypeInfo(-7), nullptr);
  EXPECT_EQ(KFFIGetTypeInfo(kKFFIDynObjectBegin + 8000), nullptr);
  EXPECT_EQ(KFFIGetTypeInfo(1 << 30), nullptr);
  EXPECT_EQ(kffi::details::TypeIndexToKey(1 << 30), "<unknown type 1073741824>");
}

TEST(ObjectTypeRegistry, RegisteringAKeyAgainWithAnotherParentIsValueError) {
  const int32_t base = TrackedObj::RuntimeTypeIndex();
  KFFIByteArray key{"test.object.Tracked", std::strlen("test.object.Tracked")};
  int32_t out = -1;
  ASSERT_EQ(KFFITypeGetOrAllocIndex(&key, -1, 1, kKFFIObject, &out), 0);
  EXPECT_EQ(out, base);  // same parent: the existing index
  EXPECT_EQ(KFFITypeGetOrAllocIndex(&key, -1, 2, kKFFIStr, &out), -1);
  kffi::Error e = TakeRaisedError();
  EXPECT_EQ(e.kind(), "ValueError");
  EXPECT_EQ(e.message(),
            "Type key `test.object.Tracked` is already registered with parent `ffi.Object` "
            "(index 64), cannot register it again with parent `ffi.Str` (index 65)");
  EXPECT_THROW(kffi::details::GetOrAllocTypeIndex("test.object.BadDepth", -1, 3, kKFFIObject),
               kffi::Error);
}

TEST(ObjectTypeRegistry, ConcurrentRegistrationsOfOneKeyAgree) {
  std::vector<int32_t> indices(8, -1);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&indices, t] {
      indices[t] = kffi::details::GetOrAllocTypeIndex("test.object.Concurrent", -1, 1, kKFFIObject);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_GE(indices[0], static_cast<int32_t>(kKFFIDynObjectBegin));
  for (int32_t i : indices) EXPECT_EQ(i, indices[0]);
}

// An opaque payload and a deleter that counts its calls.
std::atomic<int> g_opaque_deleted{0};
void* g_opaque_deleted_handle = nullptr;
void CountingDeleter(void* handle) {
  g_opaque_deleted.fetch_add(1);
  g_opaque_deleted_handle = handle;
}

TEST(ObjectOpaque, DeleterRunsOnceWhenTheLastStrongReferenceGoes) {
  g_opaque_deleted = 0;
  int payload = 42;
  KFFIObjectHandle h = nullptr;
  ASSERT_EQ(KFFIObjectCreateOpaque(&payload, kKFFIOpaquePyObject, &CountingDeleter, &h), 0);
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(static_cast<KFFIObject*>(h)->type_index, kKFFIOpaquePyObject);
  EXPECT_EQ(static_cast<KFFIOpaqueObjectCell*>(KFFIObjectGetCellPtr(h))->handle, &payload);
  ASSERT_EQ(KFFIObjectIncRef(h), 0);
  ASSERT_EQ(KFFIObjectIncWeakRef(h), 0);
  ASSERT_EQ(KFFIObjectDecRef(h), 0);
  EXPECT_EQ(g_opaque_deleted.load(), 0);
  ASSERT_EQ(KFFIObjectDecRef(h), 0);  // last strong reference: the deleter runs
  EXPECT_EQ(g_opaque_deleted.load(), 1);
  EXPECT_EQ(g_opaque_deleted_handle, &payload);
  ASSERT_EQ(KFFIObjectDecWeakRef(h), 0);  // frees the memory, no second call
  EXPECT_EQ(g_opaque_deleted.load(), 1);
}

TEST(ObjectOpaque, ReleasedThroughTheCppHeaderTooAndNullDeleterIsAllowed) {
  g_opaque_deleted = 0;
  int payload = 1;
  KFFIObjectHandle h = nullptr;
  ASSERT_EQ(KFFIObjectCreateOpaque(&payload, kKFFIOpaquePyObject, &CountingDeleter, &h), 0);
  {
    kffi::ObjectPtr<kffi::Object> owned = ObjectUnsafe::FromOwnedHandle<kffi::Object>(h);
    kffi::ObjectPtr<kffi::Object> copy = owned;
    EXPECT_EQ(owned->GetTypeKey(), "ffi.OpaquePyObject");
    EXPECT_EQ(owned.use_count(), 2u);
  }
  EXPECT_EQ(g_opaque_deleted.load(), 1);
  ASSERT_EQ(KFFIObjectCreateOpaque(nullptr, kKFFIOpaquePyObject, nullptr, &h), 0);
  EXPECT_EQ(KFFIObjectDecRef(h), 0);  // a NULL deleter is allowed
}

TEST(ObjectOpaque, NonObjectTypeIndexIsValueErrorAndTakesNothing) {
  g_opaque_deleted = 0;
  int payload = 0;
  KFFIObjectHandle h = &payload;
  EXPECT_EQ(KFFIObjectCreateOpaque(&payload, kKFFIInt, &CountingDeleter, &h), -1);
  EXPECT_EQ(h, nullptr);
  EXPECT_EQ(g_opaque_deleted.load(), 0);
  kffi::Error e = TakeRaisedError();
  EXPECT_EQ(e.kind(), "ValueError");
  EXPECT_EQ(e.message(),
            "KFFIObjectCreateOpaque: type_index 1 is not an object type index (must be >= 64)");
}

TEST_F(ObjectRefCount, ConcurrentIncRefAndDecRefFromEightThreadsBalance) {
  auto p = kffi::make_object<TrackedObj>(99);
  KFFIObjectHandle h = HandleOf(p);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&p, h, t] {
      for (int i = 0; i < 20000; ++i) {
        const int mode = (i + t) % 3;
        if (mode == 0) {  // C++ copies, also converting to the base
          kffi::ObjectPtr<TrackedObj> copy = p;
          kffi::ObjectPtr<kffi::Object> base = copy;
        } else if (mode == 1) {  // the C API
          KFFIObjectIncRef(h);
          KFFIObjectDecRef(h);
        } else if (!kffi::WeakObjectPtr<TrackedObj>(p).lock()) {  // weak, then strong again
          std::abort();
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(p.use_count(), 1u);
  EXPECT_EQ(p->weak_count(), 1u);
  EXPECT_EQ(live(), 1);
  p.reset();
  EXPECT_EQ(live(), 0);
}

TEST_F(ObjectRefCount, CApiAndCppReferencesInterleave) {
  auto p = kffi::make_object<TrackedObj>(5);
  KFFIObjectHandle h = HandleOf(p);
  ASSERT_EQ(KFFIObjectIncRef(h), 0);
  p.reset();
  EXPECT_EQ(live(), 1);  // the C reference keeps it
  kffi::ObjectPtr<TrackedObj> adopted = ObjectUnsafe::FromOwnedHandle<TrackedObj>(h);
  EXPECT_EQ(adopted->value, 5);
  EXPECT_EQ(adopted.use_count(), 1u);
  ASSERT_EQ(KFFIObjectIncRef(h), 0);
  adopted.reset();
  EXPECT_EQ(live(), 1);
  ASSERT_EQ(KFFIObjectDecRef(h), 0);  // the runtime runs the header's deleter
  EXPECT_EQ(live(), 0);
  EXPECT_EQ(KFFIObjectDecRef(nullptr), 0);
  EXPECT_EQ(KFFIObjectIncRef(nullptr), 0);
}

TEST_F(ObjectRefCount, RuntimeObjectsDieWithTheirLastReference) {
  kffi::WeakObjectPtr<kffi::Object> weak_str, weak_fn;
  {
    kffi::Any s = kffi::String("long enough to need an object");
    kffi::Any f = kffi::Function::FromExternC(
        nullptr, [](void*, const KFFIAny*, int32_t, KFFIAny*) { return 0; });
    auto str_obj = s.cast<kffi::ObjectPtr<kffi::Object>>();
    auto fn_obj = f.cast<kffi::ObjectPtr<kffi::Object>>();
    EXPECT_EQ(str_obj.use_count(), 2u);
    weak_str = kffi::WeakObjectPtr<kffi::Object>(str_obj);
    weak_fn = kffi::WeakObjectPtr<kffi::Object>(fn_obj);
    EXPECT_TRUE(weak_str.lock());
  }
  EXPECT_TRUE(weak_str.expired());
  EXPECT_FALSE(weak_str.lock());
  EXPECT_FALSE(weak_fn.lock());
}

// ---- const-reference object parameters borrow ---------------------------------------------

TEST_F(ObjectRefCount, ConstRefObjectParametersBorrowTheCallersReference) {
  auto obj = kffi::make_object<TrackedObj>(7);
  uint32_t by_value = 0, by_ptr_ref = 0, by_ref_ref = 0;
  kffi::Function f1 = [&](kffi::ObjectPtr<TrackedObj> p) { by_value = p.use_count(); };
  kffi::Function f2 = [&](const kffi::ObjectPtr<TrackedObj>& p) { by_ptr_ref = p.use_count(); };
  kffi::Function f3 = [&](const Tracked& r) { by_ref_ref = r.use_count(); };
  f1(obj);
  f2(obj);
  f3(obj);
  EXPECT_EQ(by_value, 2u);    // the parameter holds a reference of its own
  EXPECT_EQ(by_ptr_ref, 1u);  // borrowed: the caller's is the only one
  EXPECT_EQ(by_ref_ref, 1u);
  EXPECT_EQ(obj.use_count(), 1u);  // and nothing was dropped on the way out

  // A subclass instance, to a base parameter; the object's value reads through the borrow.
  auto derived = kffi::make_object<DerivedTrackedObj>(9, "d");
  int64_t seen = 0;
  kffi::Function read = [&](const kffi::ObjectPtr<TrackedObj>& p) { seen = p->value; };
  read(derived);
  EXPECT_EQ(seen, 9);
  EXPECT_EQ(derived.use_count(), 1u);
}

TEST_F(ObjectRefCount, ACopyOfABorrowedParameterOwnsItsReference) {
  kffi::ObjectPtr<TrackedObj> kept;
  std::optional<Tracked> kept_ref;
  kffi::Function keep = [&](const kffi::ObjectPtr<TrackedObj>& p, const Tracked& r) {
    kept = p;
    kept_ref.emplace(r);
    return p.use_count();
  };
  {
    auto obj = kffi::make_object<TrackedObj>(3);
    EXPECT_EQ(keep(obj, obj).cast<int64_t>(), 3);  // the caller's, kept's and kept_ref's
    EXPECT_EQ(obj.use_count(), 3u);
  }
  ASSERT_TRUE(kept);
  EXPECT_EQ(kept.use_count(), 2u);
  EXPECT_EQ(kept->value, 3);
  kept = nullptr;
  kept_ref.reset();
  EXPECT_EQ(live(), 0);
}

TEST_F(ObjectRefCount, ABorrowedParameterSurvivesAThrowAndNoneStillConverts) {
  auto obj = kffi::make_object<TrackedObj>(4);
  kffi::Function fail = [](const kffi::ObjectPtr<TrackedObj>& p) -> int64_t {
    if (p->value == 4) throw kffi::Error("ValueError", "four");
    return p->value;
  };
  EXPECT_THROW(fail(obj), kffi::Error);
  EXPECT_EQ(obj.use_count(), 1u);
  EXPECT_EQ(obj->value, 4);
  // None takes the converting path (an owned, null ObjectPtr), as for a by-value parameter.
  kffi::Function is_null = [](const kffi::ObjectPtr<TrackedObj>& p) { return p == nullptr; };
  EXPECT_TRUE(is_null(nullptr).cast<bool>());
  kffi::Function ref_null = [](const Tracked& r) { return !r.defined(); };
  EXPECT_TRUE(ref_null(nullptr).cast<bool>());
  // The wrong type is still a TypeError naming the parameter.
  kffi::Function want = [](const kffi::ObjectPtr<DerivedTrackedObj>& p) { return p->tag; };
  EXPECT_THROW(want(obj), kffi::Error);
  EXPECT_EQ(obj.use_count(), 1u);
}

}  // namespace
