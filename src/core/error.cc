// src/core/error.cc: Error objects, the thread-local raised-error slot and backtrace frames.
// SPDX-License-Identifier: Apache-2.0
#include <kffi/c_api.h>
#include <kffi/type_traits.h>

#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <string_view>

#include "core/runtime_internal.h"

namespace {

using kffi::details::HeaderDecRef;
using kffi::details::HeaderIncRef;
using kffi::details::NewRuntimeObject;
using kffi::details::RuntimePayload;

KFFIByteArray ViewOf(const std::string& s) { return KFFIByteArray{s.data(), s.size()}; }

void UpdateBacktrace(KFFIObjectHandle self, const KFFIByteArray* backtrace, int32_t update_mode);

// Cell first (the ABI part every library reads), then the storage its byte arrays point into.
// The strings are NUL-terminated, so kind/message/backtrace of errors made here can be read as C
// strings too.
struct ErrorPayload {
  KFFIErrorCell cell;
  std::string kind;
  std::string message;
  std::string backtrace;

  ErrorPayload(std::string_view k, std::string_view m, std::string_view bt)
      : kind(k), message(m), backtrace(bt) {
    cell.kind = ViewOf(kind);
    cell.message = ViewOf(message);
    cell.backtrace = ViewOf(backtrace);
    cell.update_backtrace = &UpdateBacktrace;
    cell.cause_chain = nullptr;
    cell.extra_context = nullptr;
  }
  ErrorPayload(const ErrorPayload&) = delete;
  ErrorPayload& operator=(const ErrorPayload&) = delete;
  ~ErrorPayload() {
    if (cell.cause_chain != nullptr) HeaderDecRef(static_cast<KFFIObject*>(cell.cause_chain));
    if (cell.extra_context != nullptr) {
      HeaderDecRef(static_cast<KFFIObject*>(cell.extra_context));
    }
  }
};

// Reached through the cell by any library, so it must not throw; an error travels with one
// thread at a time, so no lock. If memory runs out the backtrace is left as it was: losing
// frames beats losing the error.
void UpdateBacktrace(KFFIObjectHandle self, const KFFIByteArray* backtrace, int32_t update_mode) {
  if (self == nullptr) return;
  ErrorPayload* p = RuntimePayload<ErrorPayload>(self);
  std::string_view frames;
  if (backtrace != nullptr && backtrace->data != nullptr) {
    frames = std::string_view(backtrace->data, backtrace->size);
  }
  try {
    if (update_mode == kKFFIBacktraceUpdateModeReplace) {
      p->backtrace.assign(frames.data(), frames.size());
    } else if (!frames.empty()) {
      // Most recent first: frames added later come from callers further out, so they go last.
      std::string merged;
      merged.reserve(p->backtrace.size() + 1 + frames.size());
      merged.append(p->backtrace);
      if (!merged.empty() && merged.back() != '\n' && frames.front() != '\n') merged += '\n';
      merged.append(frames.data(), frames.size());
      p->backtrace.swap(merged);
    }
  }
  KFFI_CATCH_ALL { return; }
  p->cell.backtrace = ViewOf(p->backtrace);
}

// Raised when even the error for a failure cannot be allocated. Constant-initialized static
// storage (no constructor runs at load time); it starts with one strong reference that is never
// released, so it never dies and its deleter is never called. Threads share it, hence the
// update_backtrace that ignores updates.
void StaticErrorDeleter(void*, int) {}
void StaticErrorUpdateBacktrace(KFFIObjectHandle, const KFFIByteArray*, int32_t) {}

struct StaticErrorObject {
  KFFIObject header;
  KFFIErrorCell cell;
};

constexpr char kOomKind[] = "MemoryError";
constexpr char kOomMessage[] = "Out of memory while raising an error";

StaticErrorObject g_out_of_memory_error = {
    {kffi::details::kRefCountInit, kKFFIError, 0, {&StaticErrorDeleter}},
    {{kOomKind, sizeof(kOomKind) - 1},
     {kOomMessage, sizeof(kOomMessage) - 1},
     {"", 0},
     &StaticErrorUpdateBacktrace,
     nullptr,
     nullptr}};

// The raised error of this thread (owned). The holder releases a leftover error at thread exit.
struct ErrorSlot {
  KFFIObject* error = nullptr;
  ~ErrorSlot() {
    KFFIObject* e = error;
    error = nullptr;
    if (e != nullptr) HeaderDecRef(e);
  }
};
thread_local ErrorSlot tls_error_slot;

// Takes ownership of error (may be NULL). The old error is released after the slot is updated,
// because its destructor may be foreign code that raises again.
void ReplaceRaised(KFFIObject* error) noexcept {
  KFFIObject* old = tls_error_slot.error;
  tls_error_slot.error = error;
  if (old != nullptr) HeaderDecRef(old);
}

void RaiseOutOfMemory() noexcept {
  HeaderIncRef(&g_out_of_memory_error.header);
  ReplaceRaised(&g_out_of_memory_error.header);
}

// The thread's latest argument error that names the type of the value it is about, and where
// (KFFIErrorGetArgumentType). Every new error clears it, so a later error that reuses a released
// one's address is never taken for it.
struct ArgumentTypeRecord {
  KFFIObjectHandle error = nullptr;
  const KFFIAny* arg = nullptr;
  size_t offset = 0;
  size_t size = 0;
};
thread_local ArgumentTypeRecord tls_argument_type;

KFFIObject* NewError(std::string_view kind, std::string_view message, std::string_view backtrace) {
  tls_argument_type = ArgumentTypeRecord{};
  return NewRuntimeObject<ErrorPayload>(kKFFIError, kind, message, backtrace);
}

std::string_view CStrOr(const char* s, std::string_view fallback) {
  return s != nullptr ? std::string_view(s) : fallback;
}

}  // namespace

namespace kffi {
namespace details {

void RecordArgumentType(KFFIObjectHandle error, const KFFIAny* arg, size_t offset, size_t size) {
  tls_argument_type = ArgumentTypeRecord{error, arg, offset, size};
}

void SetRaisedCApiError(std::string_view kind, std::string_view message) noexcept {
  try {
    ReplaceRaised(NewError(kind, message, std::string_view()));
  } catch (...) {  // in a noexcept function that runs no foreign code
    RaiseOutOfMemory();
  }
}

}  // namespace details
}  // namespace kffi

void KFFIErrorSetRaisedFromCStr(const char* kind, const char* message) {
  kffi::details::SetRaisedCApiError(CStrOr(kind, "RuntimeError"), CStrOr(message, ""));
}

void KFFIErrorSetRaisedFromCStrParts(const char* kind, const char** message_parts,
                                     int32_t num_parts) {
  try {
    std::string message;
    if (message_parts != nullptr) {
      for (int32_t i = 0; i < num_parts; ++i) {
        if (message_parts[i] != nullptr) message += message_parts[i];
      }
    }
    kffi::details::SetRaisedCApiError(CStrOr(kind, "RuntimeError"), message);
  }
  KFFI_CATCH_ALL { RaiseOutOfMemory(); }
}

void KFFIErrorSetRaisedArgument(const char* kind, const char* subject, const char* expected,
                                const char* got, const KFFIAny* arg, int32_t index,
                                const char* signature) {
  try {
    const std::string ours = arg != nullptr ? kffi::details::AnyTypeStr(arg) : std::string();
    const std::string got_text = got != nullptr   ? std::string(got)
                                 : arg != nullptr ? ours
                                                  : "nothing";
    const std::string context = index >= 0 ? "argument #" + std::to_string(index) : "";
    size_t got_offset = 0;
    const std::string message = kffi::details::ArgumentMessage(
        subject != nullptr ? subject : "argument", expected != nullptr ? expected : "", got_text,
        context, signature != nullptr ? signature : "", &got_offset);
    KFFIObject* error =
        NewError(kind != nullptr ? kind : "ValueError", message, std::string_view());
    if (!ours.empty() && got_text.compare(0, ours.size(), ours) == 0) {
      kffi::details::RecordArgumentType(error, arg, got_offset, ours.size());
    }
    ReplaceRaised(error);
  }
  KFFI_CATCH_ALL {
    kffi::details::SetRaisedCApiError("MemoryError", "out of memory while raising an error");
  }
}

int KFFIErrorGetArgumentType(KFFIObjectHandle error, const KFFIAny** out_arg, size_t* out_offset,
                             size_t* out_size) {
  const ArgumentTypeRecord& r = tls_argument_type;
  if (error == nullptr || error != r.error || r.arg == nullptr) return 0;
  const KFFIErrorCell* cell = KFFIErrorGetCellPtr(error);
  if (r.offset > cell->message.size || r.size > cell->message.size - r.offset) return 0;
  if (out_arg != nullptr) *out_arg = r.arg;
  if (out_offset != nullptr) *out_offset = r.offset;
  if (out_size != nullptr) *out_size = r.size;
  return 1;
}

void KFFIErrorSetRaised(KFFIObjectHandle error) {
  // The slot takes its own reference (before releasing the old one, in case they are the same
  // object). Raising NULL clears the slot.
  KFFIObject* e = static_cast<KFFIObject*>(error);
  if (e != nullptr) HeaderIncRef(e);
  ReplaceRaised(e);
}

void KFFIErrorMoveFromRaised(KFFIObjectHandle* out) {
  KFFIObject* e = tls_error_slot.error;
  tls_error_slot.error = nullptr;
  if (out != nullptr) {
    *out = e;
  } else if (e != nullptr) {
    // Nowhere to move it: the error is dropped (a void C function, so nothing may escape).
    try {
      HeaderDecRef(e);
    }
    KFFI_CATCH_ALL {}
  }
}

int KFFIErrorCreate(const KFFIByteArray* kind, const KFFIByteArray* message,
                    const KFFIByteArray* backtrace, KFFIObjectHandle* out) {
  KFFI_CAPI_BEGIN();
  kffi::details::CheckOutArg(out, "KFFIErrorCreate: out");
  *out = nullptr;
  std::string_view k = kffi::details::ByteArrayArg(kind, "KFFIErrorCreate: kind");
  std::string_view m = kffi::details::ByteArrayArg(message, "KFFIErrorCreate: message");
  std::string_view bt;
  if (backtrace != nullptr) {
    bt = kffi::details::ByteArrayArg(backtrace, "KFFIErrorCreate: backtrace");
  }
  *out = NewError(k, m, bt);
  KFFI_CAPI_END();
}

const KFFIByteArray* KFFIBacktrace(const char* filename, int lineno, const char* func,
                                   int cross_ffi_boundary) {
  // One buffer per thread: the result is valid until this thread's next call, as documented.
  thread_local std::string buffer;
  thread_local KFFIByteArray result;
  try {
    buffer.assign("  File \"");
    buffer += CStrOr(filename, "<unknown>");
    buffer += "\", line ";
    buffer += std::to_string(lineno);
    buffer += ", in ";
    buffer += CStrOr(func, "<unknown>");
    if (cross_ffi_boundary != 0) buffer += " [ffi boundary]";
  }
  KFFI_CATCH_ALL {
    buffer.clear();  // out of memory: an empty frame rather than a failure
  }
  result.data = buffer.c_str();
  result.size = buffer.size();
  return &result;
}
