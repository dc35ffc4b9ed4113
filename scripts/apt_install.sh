#!/usr/bin/env bash
# scripts/apt_install.sh: the one way the scripts install Debian packages (sourced).
#   kffi_apt_install [--no-recommends] PKG...
#       installs those of PKG that dpkg does not list as installed, as root directly, else through
#       sudo; with their recommended packages (clang's bring compiler-rt, which the sanitizers and
#       libFuzzer link) unless --no-recommends
# SPDX-License-Identifier: Apache-2.0

kffi_apt_install() {
  local missing=() p sudo="" extra=()
  if [ "${1:-}" = "--no-recommends" ]; then
    extra=(--no-install-recommends)
    shift
  fi
  for p in "$@"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "apt: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${extra[@]}" "${missing[@]}" >/dev/null
}
