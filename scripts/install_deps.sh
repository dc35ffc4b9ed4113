#!/usr/bin/env bash
# scripts/install_deps.sh: installs the build and test dependencies (Debian packages, PyPI).
# SPDX-License-Identifier: Apache-2.0
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=scripts/apt_install.sh
source "$ROOT/scripts/apt_install.sh"
kffi_apt_install g++ make cmake ninja-build libgtest-dev libgmock-dev libbenchmark-dev
# The development tools (ruff, mypy, clang-format, shellcheck), pinned in one place.
# Offline, the build and tests go on; check_format.sh refuses tools that are not these versions.
python3 -m pip install -q --disable-pip-version-check -r "$(dirname "$0")/../requirements-dev.txt" \
  || echo "install_deps.sh: the pinned tools of requirements-dev.txt were not installed" >&2
