// include/kffi/object.h: the object model: Object, ObjectPtr, WeakObjectPtr, ObjectRef, types.
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_OBJECT_H_
#define KFFI_OBJECT_H_

#include <kffi/base.h>

#include <cstddef>
#include <new>
#include <string>
#include <type_traits>
#include <utility>

namespace kffi {

class Object;
class ObjectRef;
template <typename T>
class ObjectPtr;

namespace details {
struct ObjectUnsafe;
/// Registers (once) a type key under a parent and returns its index; throws on conflict.
int32_t GetOrAllocTypeIndex(const char* type_key, int32_t static_index, int32_t depth,
                            int32_t parent_index);
/// The key of a type index ("ffi.Str", "int", ...), or "<unknown type N>".
std::string TypeIndexToKey(int32_t type_index);
/// Throws MemoryError for an allocation of count elements of elem_size bytes that no object can
/// span (error.h).
[[noreturn]] inline void ThrowAllocSizeError(size_t count, size_t elem_size);
}  // namespace details

namespace details {

// ---------------------------------------------------------------------------------------------
// Reference counting on the KFFIObject header: the one implementation of the protocol that
// c_api.h describes, used by ObjectPtr here and by libkffi's own sources (src/). Strong count in
// the low 32 bits, weak count in the high 32 bits of combined_ref_count.
// ---------------------------------------------------------------------------------------------

constexpr uint64_t kRefStrongOne = 1;
constexpr uint64_t kRefWeakOne = uint64_t{1} << 32;
constexpr uint64_t kRefStrongMask = 0xFFFFFFFFull;
/// A new object: one strong reference plus the weak reference all strong ones share.
constexpr uint64_t kRefCountInit = kRefWeakOne | kRefStrongOne;

/// Fills a new object's header: strong 1, weak 1, the type index and the deleter.
KFFI_INLINE void InitObjectHeader(KFFIObject* h, int32_t type_index,
                                  void (*deleter)(void*, int)) noexcept {
  h->combined_ref_count = kRefCountInit;
  h->type_index = type_index;
  h->padding = 0;
  h->deleter = deleter;
}

/// Orders the deleter after every other owner's release decrement. ThreadSanitizer does not
/// model fences, so under it an acquire load of the count (the same effect here) stands in.
KFFI_INLINE void AcquireBeforeDelete(KFFIObject* obj) noexcept {
#if defined(__SANITIZE_THREAD__)
  (void)__atomic_load_n(&obj->combined_ref_count, __ATOMIC_ACQUIRE);
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
  (void)__atomic_load_n(&obj->combined_ref_count, __ATOMIC_ACQUIRE);
#else
  (void)obj;
  __atomic_thread_fence(__ATOMIC_ACQUIRE);
#endif
#else
  (void)obj;
  __atomic_thread_fence(__ATOMIC_ACQUIRE);
#endif
}

/// Adds a strong reference. Relaxed: the caller holds one already, so the object cannot die
/// meanwhile, and nothing is published by the increment.
KFFI_INLINE void HeaderIncRef(KFFIObject* obj) noexcept {
  __atomic_fetch_add(&obj->combined_ref_count, kRefStrongOne, __ATOMIC_RELAXED);
}

/// Adds a weak reference (relaxed, as HeaderIncRef).
KFFI_INLINE void HeaderIncWeakRef(KFFIObject* obj) noexcept {
  __atomic_fetch_add(&obj->combined_ref_count, kRefWeakOne, __ATOMIC_RELAXED);
}

/// Drops a weak reference; the last one frees the memory (deleter(Weak)). A deleter is foreign
/// code, so this is not noexcept; the C API's wrappers catch what one throws.
inline void HeaderDecWeakRef(KFFIObject* obj) {
  // Release: this owner's writes happen before the free that another owner may run.
  uint64_t old = __atomic_fetch_sub(&obj->combined_ref_count, kRefWeakOne, __ATOMIC_RELEASE);
  if ((old >> 32) == 1) {
    AcquireBeforeDelete(obj);
    if (obj->deleter != nullptr) obj->deleter(obj, kKFFIObjectDeleterFlagWeak);
  }
}

/// Drops a strong reference; the last one runs deleter(Strong) and drops the weak reference all
/// strong ones share, or runs deleter(Both) when no other weak reference exists.
inline void HeaderDecRef(KFFIObject* obj) {
  // Sole owner (strong 1 and only the shared weak reference): nobody else can reach the object,
  // not even through a weak reference, so one Both call replaces two atomic updates. Acquire
  // pairs with the release decrements of earlier owners.
  if (__atomic_load_n(&obj->combined_ref_count, __ATOMIC_ACQUIRE) == kRefCountInit) {
    if (obj->deleter != nullptr) obj->deleter(obj, kKFFIObjectDeleterFlagBoth);
    return;
  }
  uint64_t old = __atomic_fetch_sub(&obj->combined_ref_count, kRefStrongOne, __ATOMIC_RELEASE);
  if ((old & kRefStrongMask) == 1) {
    AcquireBeforeDelete(obj);
    if (obj->deleter != nullptr) obj->deleter(obj, kKFFIObjectDeleterFlagStrong);
    HeaderDecWeakRef(obj);
  }
}

/// Turns a weak reference into a new strong one; false when the object is dead. Once the strong
/// count reached 0 the destructor may be running, so the object never comes back.
inline bool HeaderTryPromoteWeak(KFFIObject* obj) noexcept {
  uint64_t old = __atomic_load_n(&obj->combined_ref_count, __ATOMIC_RELAXED);
  while ((old & kRefStrongMask) != 0) {
    // Acquire on success: what the last writer published is visible to the new owner.
    if (__atomic_compare_exchange_n(&obj->combined_ref_count, &old, old + kRefStrongOne,
                                    /*weak=*/true, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
      return true;
    }
  }
  return false;
}

/// The strong count (a snapshot; for tests and diagnostics).
KFFI_INLINE uint32_t HeaderUseCount(const KFFIObject* obj) noexcept {
  return static_cast<uint32_t>(__atomic_load_n(&obj->combined_ref_count, __ATOMIC_RELAXED));
}
/// The weak count, including the one all strong references hold together (a snapshot).
KFFI_INLINE uint32_t HeaderWeakCount(const KFFIObject* obj) noexcept {
  return static_cast<uint32_t>(__atomic_load_n(&obj->combined_ref_count, __ATOMIC_RELAXED) >> 32);
}

}  // namespace details

/// Declares the type information of an object class: its key, its parent and (optionally) a
/// fixed static index. Put it in the public section of every Object subclass.
// [[maybe_unused]]: a class in an anonymous namespace may not read every field, and clang warns.
#define KFFI_DECLARE_OBJECT_INFO_(TypeKey, ParentType, IsFinal)        \
  static constexpr const char* _type_key = TypeKey;                    \
  static constexpr int32_t _type_depth = ParentType::_type_depth + 1;  \
  [[maybe_unused]] static constexpr bool _type_final = IsFinal;        \
  using _type_parent = ParentType;                                     \
  static int32_t RuntimeTypeIndex() {                                  \
    static const int32_t index = ::kffi::details::GetOrAllocTypeIndex( \
        _type_key, -1, _type_depth, ParentType::RuntimeTypeIndex());   \
    return index;                                                      \
  }

/// A dynamic object type (index allocated at run time) that can have subclasses.
#define KFFI_DECLARE_OBJECT_INFO(TypeKey, TypeName, ParentType) \
  KFFI_DECLARE_OBJECT_INFO_(TypeKey, ParentType, false)
/// A dynamic object type with no subclasses (enables an exact-index instance check).
#define KFFI_DECLARE_FINAL_OBJECT_INFO(TypeKey, TypeName, ParentType) \
  KFFI_DECLARE_OBJECT_INFO_(TypeKey, ParentType, true)

/// A built-in type with a fixed index from the C ABI (registered by the runtime).
#define KFFI_DECLARE_STATIC_OBJECT_INFO(TypeKey, TypeName, ParentType, StaticIndex, IsFinal) \
  static constexpr const char* _type_key = TypeKey;                                          \
  static constexpr int32_t _type_depth = ParentType::_type_depth + 1;                        \
  [[maybe_unused]] static constexpr bool _type_final = IsFinal;                              \
  [[maybe_unused]] static constexpr int32_t _type_static_index = StaticIndex;                \
  using _type_parent = ParentType;                                                           \
  static constexpr int32_t RuntimeTypeIndex() { return StaticIndex; }

/// Base of every object. Its layout is exactly the KFFIObject header; a subclass's fields are the
/// cell that follows. Objects are never copied; they live behind ObjectPtr.
class Object {
 public:
  static constexpr const char* _type_key = "ffi.Object";
  static constexpr int32_t _type_depth = 0;
  static constexpr bool _type_final = false;
  static constexpr int32_t _type_static_index = kKFFIObject;
  static constexpr int32_t RuntimeTypeIndex() { return kKFFIObject; }

  /// A header with no references and no deleter yet: make_object fills them in.
  Object() {
    details::InitObjectHeader(&header_, kKFFIObject, nullptr);
    header_.combined_ref_count = 0;
  }
  Object(const Object&) = delete;
  Object& operator=(const Object&) = delete;

  /// The runtime type index of this object.
  int32_t type_index() const { return header_.type_index; }
  /// The type key of this object, e.g. "ffi.Str".
  std::string GetTypeKey() const { return details::TypeIndexToKey(header_.type_index); }
  /// True when this object is a TargetType or one of its subclasses.
  template <typename TargetType>
  bool IsInstance() const;
  /// The number of strong references (a snapshot; for tests and diagnostics).
  uint32_t use_count() const { return details::HeaderUseCount(&header_); }
  /// The number of weak references, including the one all strong references hold together.
  uint32_t weak_count() const { return details::HeaderWeakCount(&header_); }

 protected:
  KFFIObject header_;

 private:
  void IncRef() noexcept { details::HeaderIncRef(&header_); }
  void DecRef() { details::HeaderDecRef(&header_); }
  void IncWeakRef() noexcept { details::HeaderIncWeakRef(&header_); }
  void DecWeakRef() { details::HeaderDecWeakRef(&header_); }
  bool TryPromoteWeak() noexcept { return details::HeaderTryPromoteWeak(&header_); }

  friend struct details::ObjectUnsafe;
  template <typename>
  friend class ObjectPtr;
  template <typename>
  friend class WeakObjectPtr;
};

static_assert(sizeof(Object) == sizeof(KFFIObject), "Object must be exactly the C header");

namespace details {

/// Allocation and deletion of objects made by make_object (in this library). Over-aligned
/// types take the aligned operator new; the rest the plain one, which is several times cheaper
/// than aligned_alloc in glibc (records are made per call, so it shows).
template <typename T>
struct ObjectAllocator {
  static constexpr bool kOverAligned = alignof(T) > __STDCPP_DEFAULT_NEW_ALIGNMENT__;
  static void* Allocate() {
    if constexpr (kOverAligned) {
      return ::operator new(sizeof(T), std::align_val_t(alignof(T)));
    } else {
      return ::operator new(sizeof(T));
    }
  }
  static void Free(void* mem) {
    if constexpr (kOverAligned) {
      ::operator delete(mem, std::align_val_t(alignof(T)));
    } else {
      ::operator delete(mem);
    }
  }
  static void Deleter(void* self, int flags) {
    T* obj = static_cast<T*>(static_cast<Object*>(self));
    if (flags & kKFFIObjectDeleterFlagStrong) obj->~T();
    if (flags & kKFFIObjectDeleterFlagWeak) Free(static_cast<void*>(obj));
  }
};

/// Access to object internals that ordinary code must not touch.
struct ObjectUnsafe {
  static KFFIObject* Header(const Object* obj) { return const_cast<KFFIObject*>(&obj->header_); }
  static void IncRef(Object* obj) { obj->IncRef(); }
  static void DecRef(Object* obj) { obj->DecRef(); }
  static void IncWeakRef(Object* obj) { obj->IncWeakRef(); }
  static void DecWeakRef(Object* obj) { obj->DecWeakRef(); }
  /// Adopts one strong reference held by handle (no increment).
  template <typename T>
  static ObjectPtr<T> FromOwnedHandle(KFFIObjectHandle handle);
  /// Makes a new strong reference to handle (increments).
  template <typename T>
  static ObjectPtr<T> FromBorrowedHandle(KFFIObjectHandle handle);
  /// Releases ownership of ptr's reference into a raw handle.
  template <typename T>
  static KFFIObjectHandle MoveToHandle(ObjectPtr<T>&& ptr);
  template <typename T>
  static KFFIObjectHandle GetHandle(const ObjectPtr<T>& ptr) {
    return const_cast<Object*>(static_cast<const Object*>(ptr.get()));
  }
  static Object* ToObject(KFFIObjectHandle handle) { return static_cast<Object*>(handle); }
  static const ObjectPtr<Object>& RefData(const ObjectRef& ref);
  static ObjectPtr<Object>& RefData(ObjectRef& ref);
  /// Initialises a freshly constructed object's header.
  template <typename T>
  static void InitHeader(T* obj, int32_t type_index) {
    InitObjectHeader(Header(obj), type_index, &ObjectAllocator<T>::Deleter);
  }
};

}  // namespace details

/// A strong, intrusive reference to an object of type T (or a subclass).
template <typename T>
class ObjectPtr {
 public:
  /// The object type pointed to.
  using element_type = T;

  ObjectPtr() noexcept = default;
  ObjectPtr(std::nullptr_t) noexcept {}  // NOLINT(*-explicit-constructor)
  ObjectPtr(const ObjectPtr& other) noexcept : ptr_(other.ptr_) { Retain(); }
  ObjectPtr(ObjectPtr&& other) noexcept : ptr_(other.ptr_) { other.ptr_ = nullptr; }
  template <typename U, typename = std::enable_if_t<std::is_base_of_v<T, U>>>
  ObjectPtr(const ObjectPtr<U>& other) noexcept : ptr_(other.ptr_) {  // NOLINT
    Retain();
  }
  template <typename U, typename = std::enable_if_t<std::is_base_of_v<T, U>>>
  ObjectPtr(ObjectPtr<U>&& other) noexcept : ptr_(other.ptr_) {  // NOLINT
    other.ptr_ = nullptr;
  }
  ~ObjectPtr() { Release(); }

  ObjectPtr& operator=(const ObjectPtr& other) noexcept {
    ObjectPtr(other).swap(*this);
    return *this;
  }
  ObjectPtr& operator=(ObjectPtr&& other) noexcept {
    ObjectPtr(std::move(other)).swap(*this);
    return *this;
  }
  void swap(ObjectPtr& other) noexcept { std::swap(ptr_, other.ptr_); }
  void reset() noexcept {
    Release();
    ptr_ = nullptr;
  }

  T* get() const noexcept { return ptr_; }
  T* operator->() const noexcept { return ptr_; }
  T& operator*() const noexcept { return *ptr_; }
  explicit operator bool() const noexcept { return ptr_ != nullptr; }
  /// Number of strong references, 0 for null.
  uint32_t use_count() const noexcept { return ptr_ ? ptr_->use_count() : 0; }
  bool unique() const noexcept { return use_count() == 1; }

  bool operator==(const ObjectPtr& o) const noexcept { return ptr_ == o.ptr_; }
  bool operator!=(const ObjectPtr& o) const noexcept { return ptr_ != o.ptr_; }
  bool operator==(std::nullptr_t) const noexcept { return ptr_ == nullptr; }
  bool operator!=(std::nullptr_t) const noexcept { return ptr_ != nullptr; }

 private:
  explicit ObjectPtr(T* raw) noexcept : ptr_(raw) {}
  void Retain() noexcept {
    if (ptr_) static_cast<Object*>(ptr_)->IncRef();
  }
  void Release() noexcept {
    if (ptr_) static_cast<Object*>(ptr_)->DecRef();
  }

  T* ptr_ = nullptr;

  template <typename>
  friend class ObjectPtr;
  template <typename>
  friend class WeakObjectPtr;
  friend struct details::ObjectUnsafe;
  template <typename U, typename... Args>
  friend ObjectPtr<U> make_object(Args&&... args);
  template <typename U, typename Elem, typename... Args>
  friend ObjectPtr<U> make_inplace_array_object(size_t num_elems, Args&&... args);
};

/// A weak reference: keeps the memory, not the value. lock() gives a strong one or null.
template <typename T>
class WeakObjectPtr {
 public:
  WeakObjectPtr() noexcept = default;
  explicit WeakObjectPtr(const ObjectPtr<T>& strong) noexcept : ptr_(strong.ptr_) {
    if (ptr_) static_cast<Object*>(ptr_)->IncWeakRef();
  }
  WeakObjectPtr(const WeakObjectPtr& other) noexcept : ptr_(other.ptr_) {
    if (ptr_) static_cast<Object*>(ptr_)->IncWeakRef();
  }
  WeakObjectPtr(WeakObjectPtr&& other) noexcept : ptr_(other.ptr_) { other.ptr_ = nullptr; }
  WeakObjectPtr& operator=(WeakObjectPtr other) noexcept {
    std::swap(ptr_, other.ptr_);
    return *this;
  }
  ~WeakObjectPtr() {
    if (ptr_) static_cast<Object*>(ptr_)->DecWeakRef();
  }
  /// A strong reference if the object is still alive, else null.
  ObjectPtr<T> lock() const noexcept {
    if (ptr_ && static_cast<Object*>(ptr_)->TryPromoteWeak()) return ObjectPtr<T>(ptr_);
    return ObjectPtr<T>();
  }
  /// True when no strong reference remains.
  bool expired() const noexcept { return ptr_ == nullptr || ptr_->use_count() == 0; }

 private:
  T* ptr_ = nullptr;
};

/// Constructs a T on the heap with one strong reference.
template <typename T, typename... Args>
ObjectPtr<T> make_object(Args&&... args) {
  static_assert(std::is_base_of_v<Object, T>, "make_object needs an Object subclass");
  void* mem = details::ObjectAllocator<T>::Allocate();
  T* obj;
  try {
    obj = new (mem) T(std::forward<Args>(args)...);
  } catch (...) {
    details::ObjectAllocator<T>::Free(mem);
    throw;
  }
  details::ObjectUnsafe::InitHeader(obj, T::RuntimeTypeIndex());
  return ObjectPtr<T>(obj);
}

namespace details {
template <typename T, typename Elem>
struct InplaceArrayAllocator {
  static void Deleter(void* self, int flags) {
    T* obj = static_cast<T*>(static_cast<Object*>(self));
    if (flags & kKFFIObjectDeleterFlagStrong) obj->~T();
    if (flags & kKFFIObjectDeleterFlagWeak) ::operator delete(static_cast<void*>(obj));
  }
};
}  // namespace details

/// Constructs a T followed, in the same allocation, by room for num_elems values of Elem
/// (uninitialised; the object constructs and destroys them).
template <typename T, typename Elem, typename... Args>
ObjectPtr<T> make_inplace_array_object(size_t num_elems, Args&&... args) {
  static_assert(
      alignof(T) <= alignof(std::max_align_t) && alignof(Elem) <= alignof(std::max_align_t),
      "over-aligned in-place arrays are not supported");
  size_t head = (sizeof(T) + alignof(Elem) - 1) / alignof(Elem) * alignof(Elem);
  size_t bytes = 0;
  if (!details::AllocBytes(head, num_elems, sizeof(Elem), &bytes)) {
    details::ThrowAllocSizeError(num_elems, sizeof(Elem));
  }
  void* mem = ::operator new(bytes);
  T* obj;
  try {
    obj = new (mem) T(std::forward<Args>(args)...);
  } catch (...) {
    ::operator delete(mem);
    throw;
  }
  details::ObjectUnsafe::InitHeader(obj, T::RuntimeTypeIndex());
  details::ObjectUnsafe::Header(obj)->deleter = &details::InplaceArrayAllocator<T, Elem>::Deleter;
  return ObjectPtr<T>(obj);
}

/// The start of the in-place array of an object made by make_inplace_array_object.
template <typename Elem, typename T>
Elem* InplaceArrayBegin(const T* obj) {
  size_t head = (sizeof(T) + alignof(Elem) - 1) / alignof(Elem) * alignof(Elem);
  return reinterpret_cast<Elem*>(reinterpret_cast<char*>(const_cast<T*>(obj)) + head);
}

template <typename TargetType>
inline bool Object::IsInstance() const {
  static_assert(std::is_base_of_v<Object, TargetType>, "IsInstance needs an Object type");
  if constexpr (std::is_same_v<TargetType, Object>) {
    return true;
  } else {
    const int32_t target = TargetType::RuntimeTypeIndex();
    const int32_t self = header_.type_index;
    if (self == target) return true;
    if constexpr (TargetType::_type_final) {
      return false;
    } else {
      if (self < kKFFIStaticObjectBegin) return false;
      const KFFITypeInfo* info = KFFIGetTypeInfo(self);
      return info != nullptr && info->type_depth > TargetType::_type_depth &&
             info->type_ancestors[TargetType::_type_depth] == target;
    }
  }
}

namespace details {
template <typename T>
inline ObjectPtr<T> ObjectUnsafe::FromOwnedHandle(KFFIObjectHandle handle) {
  return ObjectPtr<T>(static_cast<T*>(static_cast<Object*>(handle)));
}
template <typename T>
inline ObjectPtr<T> ObjectUnsafe::FromBorrowedHandle(KFFIObjectHandle handle) {
  if (handle) static_cast<Object*>(handle)->IncRef();
  return ObjectPtr<T>(static_cast<T*>(static_cast<Object*>(handle)));
}
template <typename T>
inline KFFIObjectHandle ObjectUnsafe::MoveToHandle(ObjectPtr<T>&& ptr) {
  Object* raw = static_cast<Object*>(ptr.ptr_);
  ptr.ptr_ = nullptr;
  return raw;
}
}  // namespace details

/// Base of typed references to objects (String, Array, Function, ...). A default-constructed
/// ObjectRef is null; subclasses that may never be null say so with _type_is_nullable = false.
class ObjectRef {
 public:
  using ContainerType = Object;
  static constexpr bool _type_is_nullable = true;

  ObjectRef() = default;
  explicit ObjectRef(ObjectPtr<Object> data) : data_(std::move(data)) {}
  explicit ObjectRef(details::UnsafeInit) {}

  /// True when this reference points at an object.
  bool defined() const { return data_ != nullptr; }
  /// The object, or nullptr.
  const Object* get() const { return data_.get(); }
  const Object* operator->() const { return data_.get(); }
  /// Identity comparison.
  bool same_as(const ObjectRef& other) const { return data_ == other.data_; }
  uint32_t use_count() const { return data_.use_count(); }
  /// A pointer to the object as T when it is one, else nullptr.
  template <typename T>
  const T* as() const {
    return (data_ && data_->IsInstance<T>()) ? static_cast<const T*>(data_.get()) : nullptr;
  }

 protected:
  ObjectPtr<Object> data_;

  friend struct details::ObjectUnsafe;
};

namespace details {
template <typename T>
struct IsObjectPtr : std::false_type {};
template <typename T>
struct IsObjectPtr<ObjectPtr<T>> : std::true_type {};

/// Reads the pointer of any ObjectRef subclass (used by converters).
inline const ObjectPtr<Object>& ObjectRefData(const ObjectRef& ref) {
  return ObjectUnsafe::RefData(ref);
}
/// Makes a RefType that points at ptr without checking its type (the caller did).
template <typename RefType>
inline RefType ObjectRefFromPtr(ObjectPtr<Object> ptr) {
  RefType out{details::UnsafeInit{}};
  ObjectUnsafe::RefData(static_cast<ObjectRef&>(out)) = std::move(ptr);
  return out;
}
inline const ObjectPtr<Object>& ObjectUnsafe::RefData(const ObjectRef& ref) { return ref.data_; }
inline ObjectPtr<Object>& ObjectUnsafe::RefData(ObjectRef& ref) { return ref.data_; }
}  // namespace details

/// Defines the usual members of an ObjectRef subclass: construction from an ObjectPtr of its
/// container, typed access, and a tag constructor used by converters.
#define KFFI_DEFINE_OBJECT_REF_METHODS(TypeName, ParentType, ObjectName)                           \
  using ContainerType = ObjectName;                                                                \
  explicit TypeName(::kffi::ObjectPtr<ObjectName> n) : ParentType(::kffi::details::UnsafeInit{}) { \
    this->data_ = ::kffi::ObjectPtr<::kffi::Object>(std::move(n));                                 \
  }                                                                                                \
  explicit TypeName(::kffi::details::UnsafeInit tag) : ParentType(tag) {}                          \
  const ObjectName* operator->() const {                                                           \
    return static_cast<const ObjectName*>(this->data_.get());                                      \
  }                                                                                                \
  const ObjectName* get() const { return static_cast<const ObjectName*>(this->data_.get()); }

}  // namespace kffi

// Error completes the object model (type registration failures throw it).
#include <kffi/error.h>

#endif  // KFFI_OBJECT_H_
