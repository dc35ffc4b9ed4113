// tests/cpp/test_util.h: helpers shared by the gtest files.
// SPDX-License-Identifier: Apache-2.0
#ifndef KFFI_TESTS_CPP_TEST_UTIL_H_
#define KFFI_TESTS_CPP_TEST_UTIL_H_

#include <gtest/gtest.h>
#include <kffi/error.h>

#include <string>

/// Runs f and returns the kffi::Error it throws (a test failure is recorded when it throws none).
template <typename F>
kffi::Error CatchError(F&& f) {
  try {
    f();
  } catch (const kffi::Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected a kffi::Error";
  return kffi::Error("NoError", "");
}

/// Runs f and checks that it throws a kffi::Error of this kind with exactly this message.
template <typename F>
void ExpectError(const std::string& kind, const std::string& message, F&& f) {
  try {
    f();
    ADD_FAILURE() << "expected " << kind << ": " << message;
  } catch (const kffi::Error& e) {
    EXPECT_EQ(e.kind(), kind);
    EXPECT_EQ(e.message(), message);
  }
}

#endif  // KFFI_TESTS_CPP_TEST_UTIL_H_
