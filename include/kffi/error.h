// include/kffi/error.h: Error, the throw/check macros and the C-boundary conversions.
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_ERROR_H_
#define KFFI_ERROR_H_

#include <kffi/object.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>

namespace kffi {

/// The cell of an error object (made by the runtime; read here).
class ErrorObj : public Object, public KFFIErrorCell {
 public:
  KFFI_DECLARE_STATIC_OBJECT_INFO("ffi.Error", ErrorObj, Object, kKFFIError, true)
};

/// An error that crosses language boundaries: a kind ("ValueError", ...), a message and a
/// backtrace (frames, most recent first). Thrown as a C++ exception on this side; carried in the
/// thread's error slot across the C ABI.
class Error : public ObjectRef, public std::exception {
 public:
  using ContainerType = ErrorObj;
  /// An Error always holds its object (every accessor reads it), so None never converts to one.
  static constexpr bool _type_is_nullable = false;

  /// A new error. backtrace holds frames, one a line, most recent first.
  Error(const std::string& kind, const std::string& message, const std::string& backtrace = "") {
    KFFIByteArray k = details::ToByteArray(kind.data(), kind.size());
    KFFIByteArray m = details::ToByteArray(message.data(), message.size());
    KFFIByteArray b = details::ToByteArray(backtrace.data(), backtrace.size());
    KFFIObjectHandle h = nullptr;
    // It fails only when memory runs out; the runtime then raised its preallocated MemoryError,
    // which this error becomes.
    if (KFFIErrorCreate(&k, &m, &b, &h) != 0) KFFIErrorMoveFromRaised(&h);
    data_ = details::ObjectUnsafe::FromOwnedHandle<Object>(h);
    InitWhat();
  }
  /// Wraps an existing error object (the pointer must be an ErrorObj).
  explicit Error(ObjectPtr<Object> error) : ObjectRef(std::move(error)) { InitWhat(); }
  explicit Error(details::UnsafeInit tag) : ObjectRef(tag) {}
  Error(const Error& other) : ObjectRef(other), std::exception(other) { InitWhat(); }
  Error(Error&& other) noexcept
      : ObjectRef(std::move(other)), std::exception(other), what_(other.what_) {
    other.what_ = nullptr;
  }
  Error& operator=(const Error& other) {
    if (this != &other) {
      ObjectRef::operator=(other);
      InitWhat();
    }
    return *this;
  }
  Error& operator=(Error&& other) noexcept {
    if (this != &other) {
      ObjectRef::operator=(std::move(other));
      std::free(what_);
      what_ = other.what_;
      other.what_ = nullptr;
    }
    return *this;
  }
  ~Error() override { std::free(what_); }

  /// The kind, e.g. "TypeError".
  std::string kind() const { return ToString(cell()->kind); }
  /// The message, without kind or backtrace.
  std::string message() const { return ToString(cell()->message); }
  /// Frames, one a line, most recent first.
  std::string backtrace() const { return ToString(cell()->backtrace); }
  /// Adds older frames after the existing ones (as the error leaves another caller).
  void AppendBacktrace(const std::string& frames) const {
    KFFIByteArray b = details::ToByteArray(frames.data(), frames.size());
    cell()->update_backtrace(details::ObjectUnsafe::GetHandle(data_), &b,
                             kKFFIBacktraceUpdateModeAppend);
  }
  /// "Traceback (most recent call first):\n<frames>\n<kind>: <message>".
  std::string FullMessage() const {
    std::string bt = backtrace();
    std::string out;
    if (!bt.empty()) out = "Traceback (most recent call first):\n" + bt + "\n";
    return out + what();
  }
  /// "<kind>: <message>" ("" when memory ran out while the error was made).
  const char* what() const noexcept override { return what_ != nullptr ? what_ : ""; }

 private:
  static std::string ToString(const KFFIByteArray& b) { return std::string(b.data, b.size); }
  const KFFIErrorCell* cell() const {
    return static_cast<const ErrorObj*>(static_cast<const Object*>(data_.get()));
  }
  // Kept in a malloc'd C string, not a std::string: every kernel compiles an Error's
  // constructor and destructors (its error path throws one), and std::string's code is what makes
  // kernel builds slow. Compiled once, not inlined into the constructors.
  KFFI_NOINLINE void InitWhat() noexcept {
    std::free(what_);
    what_ = nullptr;
    if (!data_) return;
    const KFFIErrorCell* c = cell();
    const size_t kind = c->kind.size;
    const size_t message = c->message.size;
    if (kind > (SIZE_MAX - 3) / 2 || message > (SIZE_MAX - 3) / 2) return;  // no overflow below
    char* text = static_cast<char*>(std::malloc(kind + message + 3));
    if (text == nullptr) return;  // what() says "": no second exception while one is made
    if (kind != 0) std::memcpy(text, c->kind.data, kind);
    text[kind] = ':';
    text[kind + 1] = ' ';
    if (message != 0) std::memcpy(text + kind + 2, c->message.data, message);
    text[kind + 2 + message] = '\0';
    what_ = text;
  }
  char* what_ = nullptr;  // "<kind>: <message>", owned
};

namespace details {

/// Appends values to an error message without pulling <sstream> into every kernel TU.
class ErrorMessage {
 public:
  ErrorMessage& operator<<(const std::string& s) {
    msg_ += s;
    return *this;
  }
  ErrorMessage& operator<<(std::string_view s) {
    msg_.append(s.data(), s.size());
    return *this;
  }
  ErrorMessage& operator<<(const char* s) {
    msg_ += (s ? s : "(null)");
    return *this;
  }
  ErrorMessage& operator<<(char c) {
    msg_ += c;
    return *this;
  }
  ErrorMessage& operator<<(bool b) {
    msg_ += b ? "True" : "False";
    return *this;
  }
  template <typename T, typename = std::enable_if_t<std::is_arithmetic_v<T>>>
  ErrorMessage& operator<<(T v) {
    if constexpr (std::is_floating_point_v<T>) {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%.17g", static_cast<double>(v));
      msg_ += buf;
    } else {
      msg_ += std::to_string(v);
    }
    return *this;
  }
  /// Types that know how to print themselves for messages (found by ADL).
  template <typename T, typename = std::enable_if_t<!std::is_arithmetic_v<T>>,
            typename = decltype(KFFIToErrorString(std::declval<const T&>()))>
  ErrorMessage& operator<<(const T& v) {
    msg_ += KFFIToErrorString(v);
    return *this;
  }
  std::string& str() { return msg_; }

 protected:
  std::string msg_;
};

/// Collects a message and throws it as an Error (see KFFI_THROW).
class ErrorBuilder : public ErrorMessage {
 public:
  ErrorBuilder(const char* kind, const char* file, int line, const char* func)
      : kind_(kind), file_(file), line_(line), func_(func) {}
  ErrorBuilder& self() { return *this; }
  [[noreturn]] void Throw() {
    const KFFIByteArray* frame = KFFIBacktrace(file_, line_, func_, 0);
    throw Error(kind_, msg_, std::string(frame->data, frame->size));
  }

 private:
  const char* kind_;
  const char* file_;
  int line_;
  const char* func_;
};

/// Puts the exception being handled into the thread's error slot (call inside catch (...)). The
/// one conversion from C++ exceptions to errors, used by exports, functions and the runtime:
///   kffi::Error                            itself (kind, message, backtrace kept)
///   std::bad_alloc (and subclasses)        MemoryError
///   std::invalid_argument, std::domain_error  ValueError
///   std::out_of_range                      IndexError
///   any other std::exception               RuntimeError
///   anything else                          InternalError "unknown C++ exception"
/// Standard exceptions keep their what() text as the message.
inline void SetRaisedFromCurrentException() noexcept {
  try {
    throw;
  } catch (const Error& e) {
    KFFIErrorSetRaised(details::ObjectUnsafe::GetHandle(ObjectRefData(e)));
  } catch (const std::bad_alloc& e) {
    const char* parts[] = {"Out of memory (", e.what(), ")"};
    KFFIErrorSetRaisedFromCStrParts("MemoryError", parts, 3);
  } catch (const std::invalid_argument& e) {
    KFFIErrorSetRaisedFromCStr("ValueError", e.what());
  } catch (const std::domain_error& e) {
    KFFIErrorSetRaisedFromCStr("ValueError", e.what());
  } catch (const std::out_of_range& e) {
    KFFIErrorSetRaisedFromCStr("IndexError", e.what());
  } catch (const std::exception& e) {
    KFFIErrorSetRaisedFromCStr("RuntimeError", e.what());
  } catch (...) {  // a classifier: its callers' KFFI_CATCH_ALL let a forced unwind pass first
    KFFIErrorSetRaisedFromCStr("InternalError", "unknown C++ exception");
  }
}

/// Moves the raised error out of this thread's slot into *kind and *message: true, or false with
/// both left as they were (the caller's defaults) when none was raised.
inline bool TakeRaisedKindMessage(std::string* kind, std::string* message) {
  KFFIObjectHandle h = nullptr;
  KFFIErrorMoveFromRaised(&h);
  if (h == nullptr) return false;
  const Error e(ObjectUnsafe::FromOwnedHandle<Object>(h));  // released however this ends
  *kind = e.kind();
  *message = e.message();
  return true;
}

/// Moves the raised error out of the slot as a C++ exception (after a call returned nonzero).
[[noreturn]] inline void ThrowRaisedError(int code) {
  KFFIObjectHandle h = nullptr;
  KFFIErrorMoveFromRaised(&h);
  if (h == nullptr) {
    const Int64Text c = FormatInt64(code);
    const char* parts[] = {"a call failed with code ", c.text, " but raised no error"};
    KFFIErrorSetRaisedFromCStrParts("InternalError", parts, 3);
    KFFIErrorMoveFromRaised(&h);
  }
  throw Error(ObjectUnsafe::FromOwnedHandle<Object>(h));
}

// Declared in kffi/details/core.h for the headers that must not include this one (the tensor
// views'): weak, so that every translation unit that includes this header may define it and the
// linker keeps one; a file that includes only kffi/tensor_view.h links against it.
#if defined(__GNUC__) && !defined(_WIN32)
[[noreturn]] __attribute__((weak)) void ThrowRaisedErrorOutOfLine() { ThrowRaisedError(-1); }
#else
[[noreturn]] inline void ThrowRaisedErrorOutOfLine() { ThrowRaisedError(-1); }
#endif

inline int32_t GetOrAllocTypeIndex(const char* type_key, int32_t static_index, int32_t depth,
                                   int32_t parent_index) {
  KFFIByteArray key = ToByteArray(type_key, std::strlen(type_key));
  int32_t out = -1;
  if (KFFITypeGetOrAllocIndex(&key, static_index, depth, parent_index, &out) != 0) {
    ThrowRaisedError(-1);
  }
  return out;
}

[[noreturn]] inline void ThrowAllocSizeError(size_t count, size_t elem_size) {
  throw Error("MemoryError", "Cannot allocate " + std::to_string(count) + " elements of " +
                                 std::to_string(elem_size) + " bytes: the size exceeds what one " +
                                 "allocation can hold");
}

inline std::string TypeIndexToKey(int32_t type_index) {
  const KFFITypeInfo* info = KFFIGetTypeInfo(type_index);
  std::string out;
  if (info == nullptr) {
    char buf[48];
    out.append(buf, static_cast<size_t>(std::snprintf(buf, sizeof(buf), "<unknown type %d>",
                                                      static_cast<int>(type_index))));
  } else {
    out.append(info->type_key.data, info->type_key.size);
  }
  return out;
}

}  // namespace details
}  // namespace kffi

/// Throws kffi::Error of the given kind: KFFI_THROW(ValueError) << "bad " << x;
/// The message is the body of a loop that cannot end except by the throw in its step, so
/// compilers (nvcc included) know that no statement after it runs.
#define KFFI_THROW(ErrorKind)                                                            \
  for (::kffi::details::ErrorBuilder kffi_error_builder_(#ErrorKind, __FILE__, __LINE__, \
                                                         __func__);                      \
       ; kffi_error_builder_.Throw())                                                    \
  kffi_error_builder_.self()

/// Throws kffi::Error of the given kind unless cond holds: KFFI_CHECK(n > 0, ValueError) << ...
#define KFFI_CHECK(cond, ErrorKind) \
  if (KFFI_LIKELY(cond)) {          \
  } else                            \
    KFFI_THROW(ErrorKind)

/// An internal invariant: throws InternalError naming the failed condition.
#define KFFI_ICHECK(cond)  \
  if (KFFI_LIKELY(cond)) { \
  } else                   \
    KFFI_THROW(InternalError) << "Check failed: (" #cond ") is false: "

/// Wraps the body of a C ABI function: any exception becomes the raised error and -1.
#define KFFI_SAFE_CALL_BEGIN() try {
#define KFFI_SAFE_CALL_END()                          \
  }                                                   \
  KFFI_CATCH_ALL {                                    \
    ::kffi::details::SetRaisedFromCurrentException(); \
    return -1;                                        \
  }                                                   \
  return 0;

#endif  // KFFI_ERROR_H_
