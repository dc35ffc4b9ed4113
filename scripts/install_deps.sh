#!/usr/bin/env bash
# scripts/install_deps.sh: installs the build and test dependencies (Debian packages, PyPI).
# SPDX-License-Identifier: Apache-2.0
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
pkgs=(g++ make cmake ninja-build libgtest-dev libgmock-dev libbenchmark-dev clang-format shellcheck)
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
