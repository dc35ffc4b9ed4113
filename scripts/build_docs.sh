#!/usr/bin/env bash
# scripts/build_docs.sh: builds the HTML docs (docs/*.md and the Python API with Sphinx, the C++ API
# with Doxygen) with warnings as errors, into build/docs/html (or $1).
#
# Installs what it needs when missing, as the demo and the tests do: doxygen from Debian, Sphinx and
# MyST from PyPI into the Python that `python3` runs (use a venv), and kffi itself from this tree
# when the installed one is missing or its Python files differ from the tree's (autodoc reads the
# docstrings of the installed package).
# SPDX-License-Identifier: Apache-2.0
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${1:-$ROOT/build/docs/html}"
WORK="$ROOT/build/docs/work"
PIP=(python3 -m pip install -q --disable-pip-version-check)
start=$SECONDS
phase() { printf '== build_docs: %s (%ds)\n' "$*" $((SECONDS - start)); }

phase "tools"
# shellcheck source=scripts/apt_install.sh
source "$ROOT/scripts/apt_install.sh"
command -v doxygen >/dev/null 2>&1 || kffi_apt_install doxygen
python3 -c "import sphinx, myst_parser" 2>/dev/null || "${PIP[@]}" "sphinx>=8,<10" "myst-parser>=4,<6"
echo "doxygen $(doxygen --version), sphinx $(python3 -c 'import sphinx; print(sphinx.__version__)')"

phase "kffi (for autodoc)"
# Exits non-zero when kffi is not importable or its .py files are not this tree's.
if ! python3 - "$ROOT/python/kffi" <<'EOF'; then
import pathlib, sys
try:
    import kffi
except ImportError:
    sys.exit(1)
tree, installed = pathlib.Path(sys.argv[1]), pathlib.Path(kffi.__file__).parent
for src in tree.rglob("*.py"):
    copy = installed / src.relative_to(tree)
    if not copy.exists() or copy.read_bytes() != src.read_bytes():
        sys.exit(1)
EOF
  if python3 -c "import scikit_build_core, cmake, ninja" 2>/dev/null; then
    "${PIP[@]}" --no-build-isolation "$ROOT"
  else
    "${PIP[@]}" "$ROOT"
  fi
fi
echo "kffi $(python3 -c 'import kffi; print(kffi.__version__, kffi.__file__)')"

phase "C++ API (Doxygen)"
rm -rf "$WORK" "$OUT"
mkdir -p "$WORK/doxygen"
(cd "$ROOT/docs" && KFFI_DOXYGEN_OUT="$WORK/doxygen" doxygen Doxyfile)

phase "guides and Python API (Sphinx)"
KFFI_DOXYGEN_HTML="$WORK/doxygen" python3 -m sphinx -W --keep-going -q -b html \
  -d "$WORK/doctrees" "$ROOT/docs" "$OUT"
# The pages link into Doxygen's output by file name: each link must land.
grep -ho 'href="cpp/[^"]*"' "$ROOT"/docs/*.md | sed 's/href="//; s/"$//' | sort -u |
  while read -r link; do
    test -f "$OUT/$link" || { echo "build_docs: a page links to $link, which Doxygen did not write" >&2; exit 1; }
  done

phase "done: $OUT/index.html"
