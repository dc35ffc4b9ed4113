#!/usr/bin/env bash
# scripts/install_deps.sh: installs the build and test dependencies (Debian packages, PyPI).
# SPDX-License-Identifier: Apache-2.0
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
pkgs=(g++ make cmake ninja-build libgtest-dev libgmock-dev libbenchmark-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# The development tools (ruff, mypy, clang-format, shellcheck), pinned in one place.
# Offline, the build and tests go on; check_format.sh refuses tools that are not these versions.
python3 -m pip install -q --disable-pip-version-check -r "$(dirname "$0")/../requirements-dev.txt" \
  || echo "install_deps.sh: the pinned tools of requirements-dev.txt were not installed" >&2
