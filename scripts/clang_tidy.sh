#!/usr/bin/env bash
# scripts/clang_tidy.sh: runs clang-tidy (the repo's .clang-tidy) over libkffi's sources and
# translation units that include every public header, with the compile database of a build.
#   bash scripts/clang_tidy.sh [build dir, default build/tidy]
# SPDX-License-Identifier: Apache-2.0
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${1:-$ROOT/build/tidy}"
if [ ! -f "$BUILD/compile_commands.json" ]; then
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_EXPORT_COMPILE_COMMANDS=ON \
    >/dev/null
fi
# libkffi's sources (src/core, src/contract, src/module); the testing library, a contract library
# and the CPU example for the public headers (kffi.h, export.h, contract*.h, containers) as
# kernel libraries use them.
FILES=("$ROOT"/src/{core,contract,module}/*.cc "$ROOT/tests/testing_lib/testing_lib.cc"
       "$ROOT/tests/module_libs/contractlib.cc" "$ROOT/examples/kernel_library/scale_cpu.cc")
status=0
for f in "${FILES[@]}"; do
  clang-tidy -p "$BUILD" --quiet "$f" 2>/dev/null || status=1
done
exit "$status"
