// tests/cpp/test_util.h: helpers shared by the gtest files.
#ifndef KFFI_TESTS_CPP_TEST_UTIL_H_
#define KFFI_TESTS_CPP_TEST_UTIL_H_

#include <gtest/gtest.h>
#include <kffi/error.h>

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

#endif  // KFFI_TESTS_CPP_TEST_UTIL_H_
