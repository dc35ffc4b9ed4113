#!/usr/bin/env bash
# examples/aot/run.sh: export a kernel ahead of time, link it into a C++ program, load the object
# from Python, and check a call against its generated stubs with mypy.
#   bash examples/aot/run.sh [OUT_DIR]      (needs kffi installed; python3 is the one with kffi)
# SPDX-License-Identifier: Apache-2.0
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
OUT="${1:-aot_out}"
PY="${PYTHON:-python3}"
mkdir -p "$OUT"
"$PY" "$HERE/export_add_one.py" "$OUT"
# shellcheck disable=SC2046  # the flags are words
c++ "$HERE/main.cc" "$OUT/add_one.o" -I"$OUT" -o "$OUT/main" \
  $("$PY" -m kffi.config --cxxflags --ldflags --libs)
"$OUT/main"
"$PY" - "$OUT" <<'PYEOF'
import sys
import numpy as np
import kffi
mod = kffi.load_object(f"{sys.argv[1]}/add_one.o")
x = np.arange(3, dtype=np.float32)
y = np.empty_like(x)
mod.add_one(x, y)
print("load_object add_one:", y.tolist())
PYEOF
if "$PY" -m mypy --version >/dev/null 2>&1; then
  cat >"$OUT/use_add_one.py" <<'PYEOF'
import numpy as np
from add_one import add_one
add_one(np.zeros(3, np.float32), np.zeros(3, np.float32))
add_one(np.zeros(3, np.float32))
PYEOF
  # The stub checks calls: the second one misses an argument.
  (cd "$OUT" || exit 1; "$PY" -m mypy --no-error-summary use_add_one.py add_one.pyi || true) |
    sed -e 's/^use_add_one.py:\([0-9]*\): /mypy line \1: /'
fi
