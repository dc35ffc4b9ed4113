// tests/tvm_libs/tvm_refl_hostile.cc: tvm_refl.cc whose Point type also registers a field past
// the end of the object (kffi must refuse it clearly, never read there).
// SPDX-License-Identifier: Apache-2.0
#define TVM_REFL_HOSTILE 1
#define TVM_REFL_KEY "tvm_refl_hostile.Point"
#define TVM_REFL_RANGE_KEY "tvm_refl_hostile.Range"
#include "tvm_refl.cc"
