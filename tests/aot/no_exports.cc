// tests/aot/no_exports.cc: an object without kffi exports (Module::LoadObject refuses it).
// SPDX-License-Identifier: Apache-2.0
int kffi_aot_not_an_export(int x) { return x + 1; }
