// tests/cpp/core/test_error.cc: Error, the throw/check macros, the thread's error slot, backtraces
// across nested Function calls, and that no error object outlives its handling.
// SPDX-License-Identifier: Apache-2.0
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <kffi/kffi.h>

#include <atomic>
#include <cstdlib>
#include <functional>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

namespace {

using kffi::Error;
using kffi::Function;
using kffi::details::ObjectUnsafe;

Error TakeRaisedError() {
  KFFIObjectHandle h = nullptr;
  KFFIErrorMoveFromRaised(&h);
  if (h == nullptr) return Error("NoError", "no error was raised");
  return Error(ObjectUnsafe::FromOwnedHandle<kffi::Object>(h));
}

bool SlotIsEmpty() {
  KFFIObjectHandle h = nullptr;
  KFFIErrorMoveFromRaised(&h);
  bool empty = h == nullptr;
  KFFIObjectDecRef(h);
  return empty;
}

std::vector<std::string> SplitLines(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find('\n', start);
    if (end == std::string::npos) end = s.size();
    out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::string Frame(int line, const std::string& func, bool boundary = false) {
  return "  File \"" + std::string(__FILE__) + "\", line " + std::to_string(line) + ", in " + func +
         (boundary ? " [ffi boundary]" : "");
}

TEST(ErrorObject, ExposesKindMessageBacktraceAndWhat) {
  Error e("ValueError", "bad value", "  File \"x.py\", line 3, in f");
  EXPECT_EQ(e.kind(), "ValueError");
  EXPECT_EQ(e.message(), "bad value");
  EXPECT_EQ(e.backtrace(), "  File \"x.py\", line 3, in f");
  EXPECT_STREQ(e.what(), "ValueError: bad value");
  EXPECT_EQ(e.FullMessage(),
            "Traceback (most recent call first):\n  File \"x.py\", line 3, in f\n"
            "ValueError: bad value");
  EXPECT_EQ(e->type_index(), kKFFIError);
  EXPECT_TRUE(e->IsInstance<kffi::ErrorObj>());
  Error plain("KeyError", "k");
  EXPECT_EQ(plain.backtrace(), "");
  EXPECT_EQ(plain.FullMessage(), "KeyError: k");
}

TEST(ErrorObject, AppendBacktraceAddsOlderFramesLast) {
  Error e("RuntimeError", "m");
  e.AppendBacktrace("  File \"a\", line 1, in inner");
  EXPECT_EQ(e.backtrace(), "  File \"a\", line 1, in inner");
  e.AppendBacktrace("  File \"b\", line 2, in outer");
  EXPECT_EQ(e.backtrace(), "  File \"a\", line 1, in inner\n  File \"b\", line 2, in outer");
  Error copy = e;  // copies share the object, so they see the same frames
  EXPECT_TRUE(copy.same_as(e));
  EXPECT_EQ(copy.backtrace(), e.backtrace());
}

TEST(ErrorObject, CopiesAndMovesKeepWhatTheirObjectSays) {
  Error e("ValueError", std::string("with a NUL\0 inside", 19));
  EXPECT_STREQ(e.what(), "ValueError: with a NUL");  // what() is a C string: it ends at the NUL
  Error copy = e;
  EXPECT_NE(copy.what(), e.what());  // its own text, which outlives e's
  EXPECT_STREQ(copy.what(), "ValueError: with a NUL");
  Error other("KeyError", "k");
  other = copy;
  EXPECT_TRUE(other.same_as(e));
  EXPECT_STREQ(other.what(), "ValueError: with a NUL");
  const Error& self = other;
  other = self;  // self-assignment keeps the text
  EXPECT_STREQ(other.what(), "ValueError: with a NUL");
  Error moved = std::move(copy);
  EXPECT_STREQ(moved.what(), "ValueError: with a NUL");
  EXPECT_STREQ(copy.what(), "");  // NOLINT(bugprone-use-after-move): a moved-from error is empty
  Error target("TypeError", "t");
  target = std::move(moved);
  EXPECT_STREQ(target.what(), "ValueError: with a NUL");
  EXPECT_TRUE(target.same_as(e));
  Error unsafe{kffi::details::UnsafeInit{}};
  EXPECT_STREQ(unsafe.what(), "");
}

TEST(ErrorObject, IsCaughtAsStdException) {
  try {
    throw Error("TypeError", "as std::exception");
  } catch (const std::exception& e) {
    EXPECT_STREQ(e.what(), "TypeError: as std::exception");
  }
}

TEST(ErrorObject, CreateRejectsNullKind) {
  KFFIByteArray msg{"m", 1};
  KFFIObjectHandle out = &msg;
  EXPECT_EQ(KFFIErrorCreate(nullptr, &msg, nullptr, &out), -1);
  EXPECT_EQ(out, nullptr);
  EXPECT_EQ(TakeRaisedError().message(), "KFFIErrorCreate: kind must not be NULL");
}

int g_throw_line = 0;
void ThrowWithEveryPrintableKind() {
  g_throw_line = __LINE__ + 1;
  KFFI_THROW(RuntimeError) << "count " << 3 << ", ratio " << 0.5 << ", flag " << true << ", dtype "
                           << DLDataType{kDLFloat, 32, 1} << ", device " << DLDevice{kDLCUDA, 1}
                           << ", name " << kffi::String("abc") << std::string(" std")
                           << std::string_view(" view") << ' ' << static_cast<int8_t>(-5) << ' '
                           << uint64_t{7} << ' ' << static_cast<const char*>(nullptr);
}

TEST(ErrorMacros, ThrowCarriesKindMessageAndThrowSite) {
  Error e = CatchError(ThrowWithEveryPrintableKind);
  EXPECT_EQ(e.kind(), "RuntimeError");
  EXPECT_EQ(e.message(),
            "count 3, ratio 0.5, flag True, dtype float32, device cuda:1, name abc std view -5 7 "
            "(null)");
  EXPECT_EQ(e.backtrace(), Frame(g_throw_line, "ThrowWithEveryPrintableKind"));
}

#define EXPECT_THROW_KIND(Kind) \
  EXPECT_EQ(CatchError([] { KFFI_THROW(Kind) << "k=" << #Kind; }).kind(), #Kind)

TEST(ErrorMacros, EveryAbiKindIsPreserved) {
  EXPECT_THROW_KIND(TypeError);
  EXPECT_THROW_KIND(ValueError);
  EXPECT_THROW_KIND(RuntimeError);
  EXPECT_THROW_KIND(IndexError);
  EXPECT_THROW_KIND(KeyError);
  EXPECT_THROW_KIND(AttributeError);
  EXPECT_THROW_KIND(NotImplementedError);
  EXPECT_THROW_KIND(AssertionError);
  EXPECT_THROW_KIND(MemoryError);
  EXPECT_THROW_KIND(InternalError);
}

int CheckPositive(int x) {
  KFFI_CHECK(x > 0, ValueError) << "x must be positive, got " << x;
  return x;
}

TEST(ErrorMacros, CheckPassesOrThrowsTheGivenKind) {
  EXPECT_EQ(CheckPositive(4), 4);
  Error e = CatchError([] { CheckPositive(-2); });
  EXPECT_EQ(e.kind(), "ValueError");
  EXPECT_EQ(e.message(), "x must be positive, got -2");
}

TEST(ErrorMacros, CheckEvaluatesTheMessageOnlyOnFailure) {
  int evaluated = 0;
  auto note = [&evaluated] {
    ++evaluated;
    return "note";
  };
  KFFI_CHECK(true, ValueError) << note();
  EXPECT_EQ(evaluated, 0);
  EXPECT_THROW({ KFFI_CHECK(false, ValueError) << note(); }, Error);
  EXPECT_EQ(evaluated, 1);
}

TEST(ErrorMacros, ICheckIsInternalErrorNamingTheCondition) {
  int v = 1;
  Error e = CatchError([v] { KFFI_ICHECK(v == 2) << "v=" << v; });
  EXPECT_EQ(e.kind(), "InternalError");
  EXPECT_EQ(e.message(), "Check failed: (v == 2) is false: v=1");
  KFFI_ICHECK(v == 1);  // holds: no throw
}

TEST(ErrorSlot, RaisedErrorMovesOutOnce) {
  KFFIErrorSetRaisedFromCStr("ValueError", "boom");
  Error e = TakeRaisedError();
  EXPECT_EQ(e.kind(), "ValueError");
  EXPECT_EQ(e.message(), "boom");
  EXPECT_EQ(e.use_count(), 1u);  // the slot gave up its reference
  EXPECT_TRUE(SlotIsEmpty());
}

TEST(ErrorSlot, MessagePartsAreConcatenatedSkippingNull) {
  const char* parts[] = {"Expected ", "3", nullptr, " but got ", "4"};
  KFFIErrorSetRaisedFromCStrParts("TypeError", parts, 5);
  Error e = TakeRaisedError();
  EXPECT_EQ(e.kind(), "TypeError");
  EXPECT_EQ(e.message(), "Expected 3 but got 4");
  KFFIErrorSetRaisedFromCStrParts(nullptr, nullptr, 0);
  Error empty = TakeRaisedError();
  EXPECT_EQ(empty.kind(), "RuntimeError");
  EXPECT_EQ(empty.message(), "");
}

TEST(ErrorSlot, RaisingAgainReleasesThePreviousError) {
  KFFIByteArray kind{"ValueError", 10}, msg{"first", 5};
  KFFIObjectHandle first = nullptr;
  ASSERT_EQ(KFFIErrorCreate(&kind, &msg, nullptr, &first), 0);
  KFFIObjectIncWeakRef(first);
  KFFIErrorSetRaised(first);  // the slot takes its own reference
  KFFIObjectDecRef(first);
  KFFIObjectHandle locked = nullptr;
  KFFIObjectWeakLock(first, &locked);
  EXPECT_EQ(locked, first);  // alive in the slot
  KFFIObjectDecRef(locked);
  KFFIErrorSetRaisedFromCStr("KeyError", "second");
  KFFIObjectWeakLock(first, &locked);
  EXPECT_EQ(locked, nullptr);  // replaced, so released
  KFFIObjectDecWeakRef(first);
  EXPECT_EQ(TakeRaisedError().message(), "second");
  KFFIErrorSetRaisedFromCStr("KeyError", "third");
  KFFIErrorSetRaised(nullptr);  // raising NULL clears the slot
  EXPECT_TRUE(SlotIsEmpty());
}

TEST(ErrorSlot, RaisingTheSameErrorTwiceKeepsOneReference) {
  Error e("ValueError", "again");
  KFFIObjectHandle h = ObjectUnsafe::GetHandle(kffi::details::ObjectRefData(e));
  KFFIErrorSetRaised(h);
  KFFIErrorSetRaised(h);
  EXPECT_EQ(e.use_count(), 2u);
  KFFIErrorMoveFromRaised(nullptr);  // nowhere to move it: dropped
  EXPECT_EQ(e.use_count(), 1u);
  EXPECT_TRUE(SlotIsEmpty());
  KFFIErrorSetRaisedFromCStr(nullptr, nullptr);
  Error fallback = TakeRaisedError();
  EXPECT_EQ(fallback.kind(), "RuntimeError");
  EXPECT_EQ(fallback.message(), "");
}

TEST(ErrorSlot, BacktraceFramesAreFormatted) {
  const KFFIByteArray* f = KFFIBacktrace("a.cc", 12, "fn", 0);
  EXPECT_EQ(std::string(f->data, f->size), "  File \"a.cc\", line 12, in fn");
  f = KFFIBacktrace("b.cc", 3, "g", 1);
  EXPECT_EQ(std::string(f->data, f->size), "  File \"b.cc\", line 3, in g [ffi boundary]");
  f = KFFIBacktrace(nullptr, 0, nullptr, 0);
  EXPECT_EQ(std::string(f->data, f->size), "  File \"<unknown>\", line 0, in <unknown>");
}

// ---- kffi's one format of argument errors (KFFIErrorSetRaisedArgument) ------------------------

std::string RaisedText() {
  Error e = TakeRaisedError();
  return e.kind() + ": " + e.message();
}

TEST(ErrorArgument, FormatWithAndWithoutSignature) {
  KFFIErrorSetRaisedArgument("TypeError", "factor", "float", "str", nullptr, 1,
                             "scale(x: float, factor: float) -> float");
  EXPECT_EQ(RaisedText(),
            "TypeError: factor: expected float, got str "
            "(argument #1 of `scale(x: float, factor: float) -> float`)");
  // No signature: a check inside a function, which knows only the parameter's name.
  KFFIErrorSetRaisedArgument("ValueError", "x.dtype", "float32|float16", "int32", nullptr, 0,
                             nullptr);
  EXPECT_EQ(RaisedText(), "ValueError: x.dtype: expected float32|float16, got int32");
  // index < 0: about the call as a whole (the count), the signature alone in the parenthesis.
  KFFIErrorSetRaisedArgument("TypeError", "scale", "2 arguments", "1", nullptr, -1,
                             "scale(x: float, factor: float) -> float");
  EXPECT_EQ(RaisedText(),
            "TypeError: scale: expected 2 arguments, got 1 "
            "(`scale(x: float, factor: float) -> float`)");
  // expected NULL: got is the whole text after the subject.
  KFFIErrorSetRaisedArgument("ValueError", "t", nullptr, "Cannot parse data type `f33`", nullptr, 0,
                             "dt(t: dtype) -> dtype");
  EXPECT_EQ(RaisedText(),
            "ValueError: t: Cannot parse data type `f33` (argument #0 of `dt(t: dtype) -> dtype`)");
  // kind NULL is ValueError; subject NULL is `argument`; no arg and no got is `nothing`.
  KFFIErrorSetRaisedArgument(nullptr, nullptr, "int", nullptr, nullptr, 2, nullptr);
  EXPECT_EQ(RaisedText(), "ValueError: argument: expected int, got nothing");
  EXPECT_TRUE(SlotIsEmpty());
}

TEST(ErrorArgument, GotNamesTheArgumentsTypeAndSaysWhere) {
  kffi::Array<int64_t> list{1, 2, 3};
  kffi::AnyView arr = list;
  const KFFIAny* arr_raw = reinterpret_cast<const KFFIAny*>(&arr);
  // got NULL: kffi's name of the value's type, and where it stands (for a language binding).
  KFFIErrorSetRaisedArgument("TypeError", "x", "int", nullptr, arr_raw, 0, "f(x: int) -> int");
  KFFIObjectHandle err = nullptr;
  KFFIErrorMoveFromRaised(&err);
  ASSERT_NE(err, nullptr);
  const KFFIAny* arg = nullptr;
  size_t offset = 0, size = 0;
  ASSERT_EQ(KFFIErrorGetArgumentType(err, &arg, &offset, &size), 1);
  const KFFIErrorCell* cell = KFFIErrorGetCellPtr(err);
  const std::string message(cell->message.data, cell->message.size);
  EXPECT_EQ(message, "x: expected int, got Array (argument #0 of `f(x: int) -> int`)");
  EXPECT_EQ(arg, arr_raw);
  EXPECT_EQ(message.substr(offset, size), "Array");
  // Only that error: another one, or NULL, says nothing.
  EXPECT_EQ(KFFIErrorGetArgumentType(nullptr, &arg, &offset, &size), 0);
  KFFIErrorSetRaisedFromCStr("ValueError", "other");
  KFFIObjectHandle other = nullptr;
  KFFIErrorMoveFromRaised(&other);
  EXPECT_EQ(KFFIErrorGetArgumentType(other, &arg, &offset, &size), 0);
  KFFIObjectDecRef(other);
  KFFIObjectDecRef(err);
  // A got that starts with kffi's name of the value's type says where that name stands.
  KFFIErrorSetRaisedArgument("TypeError", "x", "Array<int>", "Array[index 2: str]", arr_raw, 0,
                             nullptr);
  KFFIErrorMoveFromRaised(&err);
  ASSERT_EQ(KFFIErrorGetArgumentType(err, &arg, &offset, &size), 1);
  EXPECT_EQ(std::string(KFFIErrorGetCellPtr(err)->message.data + offset, size), "Array");
  KFFIObjectDecRef(err);
  // Any other got names nothing of the value: nothing to say.
  KFFIErrorSetRaisedArgument("TypeError", "x", "Array<int>", "a list of 3", arr_raw, 0, nullptr);
  KFFIErrorMoveFromRaised(&err);
  EXPECT_EQ(KFFIErrorGetArgumentType(err, &arg, &offset, &size), 0);
  KFFIObjectDecRef(err);
  // The typed calls' conversions say it too.
  Function f = Function::FromTyped([](int64_t x) { return x; }, "f");
  Error e = CatchError([&] { f(list); });
  EXPECT_EQ(e.message(), "arg0: expected int, got Array (argument #0 of `f(arg0: int) -> int`)");
  EXPECT_TRUE(SlotIsEmpty());
}

// ---- a typed call's whole error, written by the runtime (KFFIErrorSetRaisedCallArgument) ------

TEST(ErrorCallArgument, CountTypeAndConversionErrorsInTheOneFormat) {
  const KFFIByteArray types[] = {{"float", 5}, {"dtype", 5}, {"None", 4}};
  // The count: the signature names the parameters given (arg1 where the list leaves one out).
  KFFIErrorSetRaisedCallArgument("scale", "x, ", types, 2, -1, nullptr, nullptr, 3);
  EXPECT_EQ(RaisedText(),
            "TypeError: scale: expected 2 arguments, got 3 (`scale(x: float, arg1: dtype) -> "
            "None`)");
  KFFIErrorSetRaisedCallArgument("one", "", types, 1, -1, nullptr, nullptr, 0);
  EXPECT_EQ(RaisedText(),
            "TypeError: one: expected 1 argument, got 0 (`one(arg0: float) -> dtype`)");
  // A value the parameter cannot take: expected is the parameter's type, got as given, and the
  // value is recorded for a language binding.
  kffi::Array<int64_t> list{1, 2};
  kffi::AnyView view = list;
  const KFFIAny* raw = reinterpret_cast<const KFFIAny*>(&view);
  KFFIErrorSetRaisedCallArgument("scale", "x, t", types, 2, 0, "Array", raw, 2);
  KFFIObjectHandle err = nullptr;
  KFFIErrorMoveFromRaised(&err);
  ASSERT_NE(err, nullptr);
  const KFFIErrorCell* cell = KFFIErrorGetCellPtr(err);
  EXPECT_EQ(std::string(cell->kind.data, cell->kind.size), "TypeError");
  EXPECT_EQ(std::string(cell->message.data, cell->message.size),
            "x: expected float, got Array (argument #0 of `scale(x: float, t: dtype) -> None`)");
  const KFFIAny* arg = nullptr;
  size_t offset = 0, size = 0;
  EXPECT_EQ(KFFIErrorGetArgumentType(err, &arg, &offset, &size), 1);
  EXPECT_EQ(arg, raw);
  KFFIObjectDecRef(err);
  // got NULL: the conversion's error raised now, said of the parameter, kind and backtrace kept.
  KFFIErrorSetRaisedFromCStr("ValueError", "Cannot parse data type `f33`");
  KFFIErrorMoveFromRaised(&err);
  static constexpr char kTrace[] = "  File \"k.cc\", line 7, in parse";
  const KFFIByteArray trace{kTrace, sizeof(kTrace) - 1};
  KFFIErrorGetCellPtr(err)->update_backtrace(err, &trace, kKFFIBacktraceUpdateModeReplace);
  KFFIErrorSetRaised(err);
  KFFIObjectDecRef(err);
  KFFIErrorSetRaisedCallArgument("scale", "x, t", types, 2, 1, nullptr, nullptr, 2);
  KFFIErrorMoveFromRaised(&err);
  ASSERT_NE(err, nullptr);
  cell = KFFIErrorGetCellPtr(err);
  EXPECT_EQ(std::string(cell->kind.data, cell->kind.size), "ValueError");
  EXPECT_EQ(std::string(cell->message.data, cell->message.size),
            "t: Cannot parse data type `f33` (argument #1 of `scale(x: float, t: dtype) -> None`)");
  EXPECT_EQ(std::string(cell->backtrace.data, cell->backtrace.size), kTrace);
  KFFIObjectDecRef(err);
  // got NULL with nothing raised: the value's own type.
  KFFIErrorSetRaisedCallArgument("scale", "", types, 2, 0, nullptr, raw, 2);
  EXPECT_EQ(RaisedText(),
            "TypeError: arg0: expected float, got Array (argument #0 of `scale(arg0: float, "
            "arg1: dtype) -> None`)");
  EXPECT_TRUE(SlotIsEmpty());
}

TEST(ErrorCallArgument, BadInputRaisesAValueErrorAndDropsTheCause) {
  const KFFIByteArray types[] = {{"int", 3}, {"int", 3}};
  KFFIErrorSetRaisedCallArgument(nullptr, "", types, 1, 0, "str", nullptr, 1);
  EXPECT_EQ(RaisedText(), "ValueError: KFFIErrorSetRaisedCallArgument: name is NULL");
  for (int32_t index : {-2, 1, INT32_MAX}) {
    KFFIErrorSetRaisedCallArgument("f", "", types, 1, index, "str", nullptr, 1);
    EXPECT_EQ(RaisedText(), "ValueError: KFFIErrorSetRaisedCallArgument: index " +
                                std::to_string(index) + " is not a parameter of 1");
  }
  // num_params + 1 type names are read: no overflow of the count, no NULL array.
  KFFIErrorSetRaisedCallArgument("f", "", types, INT32_MAX, -1, nullptr, nullptr, 1);
  EXPECT_EQ(RaisedText().rfind("ValueError: KFFIErrorSetRaisedCallArgument: index -1", 0), 0u);
  KFFIErrorSetRaisedCallArgument("f", "", nullptr, 1, -1, nullptr, nullptr, 1);
  EXPECT_EQ(RaisedText().rfind("ValueError: KFFIErrorSetRaisedCallArgument", 0), 0u);
  // A conversion's error taken for re-raising is released even when the input is bad.
  KFFIErrorSetRaisedFromCStr("ValueError", "the cause");
  KFFIErrorSetRaisedCallArgument("f", "", nullptr, 1, 0, nullptr, nullptr, 1);
  EXPECT_EQ(RaisedText().rfind("ValueError: KFFIErrorSetRaisedCallArgument", 0), 0u);
  EXPECT_TRUE(SlotIsEmpty());
}

TEST(ErrorTensor, DataTypeMismatchNamesBothDtypes) {
  const DLDataType f16{kDLFloat, 16, 1};
  const DLDataType i8x4{kDLInt, 8, 4};
  KFFIErrorSetRaisedDataTypeMismatch(&f16, &i8x4);
  EXPECT_EQ(RaisedText(),
            "TypeError: data<float16>(): expected a tensor of float16, got a tensor of int8x4");
  KFFIErrorSetRaisedDataTypeMismatch(nullptr, &f16);
  EXPECT_EQ(RaisedText(),
            "ValueError: KFFIErrorSetRaisedDataTypeMismatch: expected must not be NULL");
  KFFIErrorSetRaisedDataTypeMismatch(&f16, nullptr);
  EXPECT_EQ(RaisedText(),
            "ValueError: KFFIErrorSetRaisedDataTypeMismatch: received must not be NULL");
  EXPECT_TRUE(SlotIsEmpty());
}

TEST(ErrorTensor, ShapeTooLargeWritesTheShape) {
  const int64_t shape[] = {2, INT64_MAX, -1};
  KFFIErrorSetRaisedShapeTooLarge("Tensor", shape, 3, "the number of elements overflows int64");
  EXPECT_EQ(RaisedText(),
            "ValueError: Tensor: shape [2, 9223372036854775807, -1] is too large: the number of "
            "elements overflows int64");
  KFFIErrorSetRaisedShapeTooLarge(nullptr, nullptr, 0, nullptr);
  EXPECT_EQ(RaisedText(), "ValueError: Tensor: shape [] is too large: ");
  KFFIErrorSetRaisedShapeTooLarge("x", nullptr, 2, "why");
  EXPECT_EQ(RaisedText(),
            "ValueError: KFFIErrorSetRaisedShapeTooLarge: shape must not be NULL when ndim is not "
            "0");
  KFFIErrorSetRaisedShapeTooLarge("x", shape, INT32_MIN, "why");
  EXPECT_EQ(RaisedText(),
            "ValueError: KFFIErrorSetRaisedShapeTooLarge: ndim must be >= 0, got -2147483648");
  EXPECT_TRUE(SlotIsEmpty());
}

TEST(ErrorThreads, AnErrorRaisedInOneThreadIsInvisibleInAnother) {
  KFFIErrorSetRaisedFromCStr("ValueError", "main thread error");
  bool other_saw_null = false;
  std::thread([&other_saw_null] {
    KFFIObjectHandle h = reinterpret_cast<KFFIObjectHandle>(1);
    KFFIErrorMoveFromRaised(&h);
    other_saw_null = h == nullptr;
    // Left raised on purpose: the thread's slot releases it at exit (LeakSanitizer checks).
    KFFIErrorSetRaisedFromCStr("RuntimeError", "other thread error");
  }).join();
  EXPECT_TRUE(other_saw_null);
  Error mine = TakeRaisedError();
  EXPECT_EQ(mine.message(), "main thread error");
}

TEST(ErrorThreads, ConcurrentFailingCallsEachSeeTheirOwnError) {
  Function fail = Function::FromTyped(
      [](int64_t id) -> int64_t { KFFI_THROW(ValueError) << "id " << id; }, "fail");
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&fail, &mismatches, t] {
      for (int i = 0; i < 500; ++i) {
        const int64_t id = t * 1000 + i;
        try {
          fail(id);
          mismatches.fetch_add(1);
        } catch (const Error& e) {
          if (e.message() != "id " + std::to_string(id)) mismatches.fetch_add(1);
        }
        if (!SlotIsEmpty()) mismatches.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
}

int g_deep_throw_line = 0;
[[noreturn]] int64_t ThrowDeep(int64_t x) {
  g_deep_throw_line = __LINE__ + 1;
  KFFI_THROW(ValueError) << "deep failure " << x;
}

TEST(ErrorAcrossCalls, ThrownThreeCallsDeepKeepsEveryFrameInOrder) {
  kffi::WeakObjectPtr<kffi::Object> weak_error;
  // Each function records where it was made (passed explicitly here; the default is the line of
  // the call, checked in test_function.cc) for the frame it adds when an error leaves it.
  const int l3 = __LINE__;
  Function f3 = Function::FromTyped(&ThrowDeep, "deep.f3", __FILE__, l3);
  const int l2 = __LINE__;
  auto call_f3 = [f3](int64_t x) { return f3(x).cast<int64_t>(); };
  Function f2 = Function::FromTyped(call_f3, "deep.f2", __FILE__, l2);
  const int l1 = __LINE__;
  auto call_f2 = [f2](int64_t x) { return f2(x).cast<int64_t>(); };
  Function f1 = Function::FromTyped(call_f2, "deep.f1", __FILE__, l1);
  try {
    f1(7);
    FAIL() << "f1 did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), "ValueError");
    EXPECT_EQ(e.message(), "deep failure 7");
    const std::vector<std::string> frames = SplitLines(e.backtrace());
    ASSERT_EQ(frames.size(), 4u) << e.backtrace();
    EXPECT_EQ(frames[0], Frame(g_deep_throw_line, "ThrowDeep"));
    EXPECT_EQ(frames[1], Frame(l3, "deep.f3", true));
    EXPECT_EQ(frames[2], Frame(l2, "deep.f2", true));
    EXPECT_EQ(frames[3], Frame(l1, "deep.f1", true));
    EXPECT_EQ(e.FullMessage(), "Traceback (most recent call first):\n" + e.backtrace() +
                                   "\nValueError: deep failure 7");
    weak_error = kffi::WeakObjectPtr<kffi::Object>(kffi::details::ObjectRefData(e));
  }
  EXPECT_TRUE(weak_error.expired());  // nothing kept the error object once handled
  EXPECT_TRUE(SlotIsEmpty());
}

int64_t ThrowStdException(int64_t) { throw std::runtime_error("low-level failure"); }

TEST(ErrorAcrossCalls, StdExceptionArrivesAsRuntimeErrorWithItsWhat) {
  const int line = __LINE__ + 1;  // the next statement must stay on one line
  Function f = Function::FromTyped(&ThrowStdException, "wraps_std");
  Error e = CatchError([&] { f(1); });
  EXPECT_EQ(e.kind(), "RuntimeError");
  EXPECT_EQ(e.message(), "low-level failure");
  EXPECT_EQ(e.backtrace(), Frame(line, "wraps_std", true));
  Function g = Function::FromPacked([](kffi::PackedArgs, kffi::Any*) { throw 42; }, "throws_int");
  Error unknown = CatchError([&] { g(); });
  EXPECT_EQ(unknown.kind(), "InternalError");
  EXPECT_EQ(unknown.message(), "unknown C++ exception");
}

// The one conversion table of error.h (SetRaisedFromCurrentException), as a kernel sees it.
TEST(ErrorAcrossCalls, StdExceptionKindsMapToPythonKinds) {
  struct Case {
    std::function<void()> thrower;
    const char* kind;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[] { throw std::invalid_argument("bad value"); }, "ValueError", "bad value"},
      {[] { throw std::domain_error("outside the domain"); }, "ValueError", "outside the domain"},
      {[] { throw std::out_of_range("index 9"); }, "IndexError", "index 9"},
      {[] { throw std::bad_alloc(); }, "MemoryError", "Out of memory (std::bad_alloc)"},
      {[] { throw std::length_error("too long"); }, "RuntimeError", "too long"},
      {[] { throw std::logic_error("a bug"); }, "RuntimeError", "a bug"},
      {[] { throw std::overflow_error("too big"); }, "RuntimeError", "too big"},
      {[] { throw "a C string"; }, "InternalError", "unknown C++ exception"},
  };
  for (const Case& c : cases) {
    Function f = Function::FromTyped([&c]() { c.thrower(); }, "kernel");
    Error e = CatchError([&] { f(); });
    EXPECT_EQ(e.kind(), c.kind) << c.message;
    EXPECT_EQ(e.message(), c.message);
    EXPECT_TRUE(SlotIsEmpty());
  }
}

TEST(ErrorAcrossCalls, TestingLibraryErrorCarriesItsFrames) {
  Function raise = Function::GetGlobalRequired("testing.raise_error");
  Error e = CatchError([&] { raise("KeyError", "missing key"); });
  EXPECT_EQ(e.kind(), "KeyError");
  EXPECT_EQ(e.message(), "missing key");
  const std::vector<std::string> frames = SplitLines(e.backtrace());
  ASSERT_EQ(frames.size(), 2u) << e.backtrace();
  EXPECT_NE(frames[0].find("testing_lib.cc\", line "), std::string::npos) << frames[0];
  EXPECT_NE(frames[0].find(", in raise_error"), std::string::npos) << frames[0];
  EXPECT_NE(frames[1].find(", in testing.raise_error [ffi boundary]"), std::string::npos)
      << frames[1];
}

TEST(ErrorAcrossCalls, CApiCallLeavesTheErrorInTheSlot) {
  Function f = Function::FromTyped([](int64_t) -> int64_t { KFFI_THROW(IndexError) << "idx"; });
  KFFIAny arg{};
  arg.type_index = kKFFIInt;
  KFFIAny result{};
  ASSERT_EQ(
      KFFIFunctionCall(ObjectUnsafe::GetHandle(kffi::details::ObjectRefData(f)), &arg, 1, &result),
      -1);
  EXPECT_EQ(result.type_index, kKFFINone);
  Error e = TakeRaisedError();
  EXPECT_EQ(e.kind(), "IndexError");
  EXPECT_EQ(e.message(), "idx");
  EXPECT_EQ(SplitLines(e.backtrace()).size(), 2u);  // throw site, then the function boundary
}

TEST(ErrorAcrossCalls, FailureWithoutARaisedErrorIsInternalError) {
  Function fails_silently = Function::FromExternC(
      nullptr, [](void*, const KFFIAny*, int32_t num_args, KFFIAny*) { return -1 - num_args; });
  Error e = CatchError([&] { fails_silently(); });
  EXPECT_EQ(e.kind(), "InternalError");
  EXPECT_EQ(e.message(), "a call failed with code -1 but raised no error");
  EXPECT_EQ(CatchError([&] { fails_silently(0); }).message(),
            "a call failed with code -2 but raised no error");
}

TEST(ErrorAcrossCalls, RepeatedFailuresLeakNoErrorObjects) {
  Function f = Function::FromTyped([](int64_t) -> int64_t { KFFI_THROW(ValueError) << "no"; });
  for (int i = 0; i < 100; ++i) {
    kffi::WeakObjectPtr<kffi::Object> weak;
    try {
      f(i);
    } catch (const Error& e) {
      weak = kffi::WeakObjectPtr<kffi::Object>(kffi::details::ObjectRefData(e));
    }
    ASSERT_FALSE(weak.lock()) << "iteration " << i;
  }
  EXPECT_TRUE(SlotIsEmpty());
}

TEST(ErrorAcrossCalls, CauseChainIsReleasedWithItsError) {
  KFFIByteArray k{"ValueError", 10}, m1{"outer", 5}, m2{"inner", 5};
  KFFIObjectHandle outer = nullptr, inner = nullptr;
  ASSERT_EQ(KFFIErrorCreate(&k, &m1, nullptr, &outer), 0);
  ASSERT_EQ(KFFIErrorCreate(&k, &m2, nullptr, &inner), 0);
  KFFIObjectIncWeakRef(inner);
  KFFIErrorGetCellPtr(outer)->cause_chain = inner;  // moved: the outer error owns it now
  {
    Error e(ObjectUnsafe::FromOwnedHandle<kffi::Object>(outer));
    const KFFIErrorCell* cause = KFFIErrorGetCellPtr(KFFIErrorGetCellPtr(outer)->cause_chain);
    EXPECT_EQ(std::string(cause->message.data, cause->message.size), "inner");
    EXPECT_EQ(e.message(), "outer");
  }
  KFFIObjectHandle locked = nullptr;
  KFFIObjectWeakLock(inner, &locked);
  EXPECT_EQ(locked, nullptr);
  KFFIObjectDecWeakRef(inner);
}

}  // namespace
