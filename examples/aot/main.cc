// examples/aot/main.cc: a C++ program that links add_one.o statically and calls it through its
// generated header (add_one.h) and through the system library.
// SPDX-License-Identifier: Apache-2.0
#include <iostream>
#include <vector>

#include "add_one.h"

int main() {
  std::vector<float> x{1, 2, 3}, y(3), too_short(2);
  int64_t n[1] = {3}, m[1] = {2};
  DLTensor tx{x.data(), {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, n, nullptr, 0};
  DLTensor ty{y.data(), {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, n, nullptr, 0};
  DLTensor ts{too_short.data(), {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, m, nullptr, 0};

  // The typed entry point of the header: checked against the contract, errors thrown.
  add_one(kffi::TensorView(&tx), kffi::TensorView(&ty));
  std::cout << "add_one: " << y[0] << " " << y[1] << " " << y[2] << "\n";
  try {
    add_one(kffi::TensorView(&tx), kffi::TensorView(&ts));
  } catch (const kffi::Error& e) {
    std::cout << e.kind() << ": " << e.message().substr(0, e.message().find(" (argument")) << "\n";
  }

  // The object registered itself in the system library when the program started.
  kffi::Module sys = kffi::Module::SystemLib();
  kffi::Function f = sys.GetFunctionRequired("add_one");
  f(kffi::TensorView(&ty), kffi::TensorView(&ty));
  std::cout << "system_lib add_one: " << y[0] << " " << y[1] << " " << y[2] << "\n";
  return 0;
}
