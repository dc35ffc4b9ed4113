#!/usr/bin/env bash
# scripts/aarch64_root.sh: sourced by build_wheel.sh --arch aarch64 and test.sh --aarch64; makes
# what a cross build for 64-bit Arm Linux needs, and runs it under qemu-user:
#   the cross compiler and qemu      Debian's g++-aarch64-linux-gnu and qemu-user, installed here
#   $AARCH64_ROOT                    a target root of Debian arm64 packages: libc, libstdc++,
#                                    CPython $AARCH64_PYVER (the interpreter, its standard library
#                                    and its headers) and GoogleTest, unpacked, never installed
#   $AARCH64_NUMPY                   NumPy's aarch64 wheel from PyPI, unpacked (headers to build
#                                    against, a NumPy to run with)
#   $AARCH64_PYINC                   CPython's headers with the arm64 pyconfig.h in place
#   $AARCH64_PYTHON                  the arm64 interpreter, run as qemu-aarch64 -L $AARCH64_ROOT
#   $AARCH64_TVM_FFI_CONFIG          a tvm-ffi-config for apache-tvm-ffi's aarch64 wheel, unpacked
#                                    (the TVM-FFI bridge tests link its libtvm_ffi.so); the
#                                    version installed here, else PyPI's newest
# The packages are fetched with an apt state of their own (lists and cache under build/aarch64/apt),
# so the machine's dpkg architectures and installed packages are left as they are.
# SPDX-License-Identifier: Apache-2.0
# Which CPython: $AARCH64_PYVER when the caller set it (build_wheel.sh sets the version of the
# Python that runs it: 3.12, or 3.14t for a free-threaded one), else 3.11. Debian's arm64
# packages have one CPython per release: 3.11 in Debian 12 (bookworm, this machine's release),
# 3.13 in Debian 13 (trixie) and 3.14 in sid. The root of such a version takes libc, libstdc++
# and the interpreter from that release. Any other version (3.10, 3.12, the free-threaded builds)
# is cross-built from source by scripts/build_cpython.sh --arch aarch64, against Debian 12's
# root, which it then runs with. The cross compiler builds against its own (Debian 12's) libc
# either way, so a wheel built here runs on all of them.
AARCH64_PYVER="${AARCH64_PYVER:-3.11}"
_aarch64_cross_python=""
case "$AARCH64_PYVER" in
  3.11) _aarch64_suite="" ;;  # the machine's own apt sources
  3.13) _aarch64_suite=trixie ;;
  3.14) _aarch64_suite=sid ;;
  *)
    _aarch64_suite=""
    _aarch64_cross_python="$AARCH64_PYVER"
    ;;
esac
# The version whose Debian interpreter the root holds.
_aarch64_rootver="$AARCH64_PYVER"
[ -z "$_aarch64_cross_python" ] || _aarch64_rootver=3.11
AARCH64_DIR="$ROOT/build/aarch64"
[ "$_aarch64_rootver" = 3.11 ] || AARCH64_DIR="$ROOT/build/aarch64-py$_aarch64_rootver"
AARCH64_ROOT="$AARCH64_DIR/root"
AARCH64_NUMPY="$AARCH64_DIR/numpy"
AARCH64_PYINC="$AARCH64_DIR/include"
AARCH64_PYTHON="$AARCH64_ROOT/usr/bin/python$_aarch64_rootver"
# shellcheck disable=SC2034  # for the callers
AARCH64_TOOLCHAIN="$ROOT/cmake/toolchains/aarch64-linux-gnu.cmake"
# The root's packages; their own dependencies beyond these serve modules kffi does not use.
_aarch64_pkgs=(libc6 libgcc-s1 libstdc++6 zlib1g libexpat1 libffi8 libbz2-1.0 liblzma5 libcrypt1
  libuuid1 "python$_aarch64_rootver-minimal" "libpython$_aarch64_rootver-minimal"
  "libpython$_aarch64_rootver-stdlib" "libpython$_aarch64_rootver-dev" libgtest-dev libgmock-dev)
# What a cross-built CPython links its ctypes and zlib modules against.
[ "$_aarch64_rootver" != 3.11 ] || _aarch64_pkgs+=(libffi-dev zlib1g-dev)

# _aarch64_wheel VERSION PACKAGE DEST: PACKAGE's aarch64 wheel for CPython VERSION (3.12, or 3.14t
# free-threaded) from PyPI, unpacked into DEST.
_aarch64_wheel() {
  rm -rf "$3" "$3.download"
  python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    --platform manylinux_2_28_aarch64 --platform manylinux2014_aarch64 \
    --python-version "${1%t}" --implementation cp --abi "cp${1/./}" -d "$3.download" "$2"
  python3 -m zipfile -e "$3".download/*.whl "$3"
  rm -rf "$3.download"
}

# shellcheck source=scripts/apt_install.sh
source "$ROOT/scripts/apt_install.sh"
# Without recommends: qemu-user's would register binfmt handlers on the machine.
kffi_apt_install --no-recommends g++-aarch64-linux-gnu qemu-user

# The root is made once; a stamp naming the package list makes a changed list remake it.
_aarch64_stamp="${_aarch64_suite:-own} ${_aarch64_pkgs[*]} numpy apache-tvm-ffi"
if [ "$(cat "$AARCH64_DIR/root.stamp" 2>/dev/null)" != "$_aarch64_stamp" ]; then
  rm -rf "$AARCH64_ROOT" "$AARCH64_DIR/apt" "$AARCH64_DIR/debs" "$AARCH64_NUMPY" "$AARCH64_PYINC" \
    "$AARCH64_DIR/tvm_ffi"
  mkdir -p "$AARCH64_DIR/apt/lists/partial" "$AARCH64_DIR/apt/cache/archives/partial" \
    "$AARCH64_DIR/debs" "$AARCH64_ROOT"
  : >"$AARCH64_DIR/apt/status"
  _apt=(-o "Dir::State::Lists=$AARCH64_DIR/apt/lists" -o "Dir::Cache=$AARCH64_DIR/apt/cache"
    -o "Dir::State::status=$AARCH64_DIR/apt/status" -o APT::Architecture=arm64
    -o "APT::Architectures::=arm64" -o Debug::NoLocking=1 -o APT::Sandbox::User=root)
  if [ -n "$_aarch64_suite" ]; then
    # Another release than the machine's: a source list of its own (apt checks the release's
    # signature with the archive keys the machine's keyring holds).
    echo "deb ${KFFI_DEBIAN_MIRROR:-http://deb.debian.org/debian} $_aarch64_suite main" \
      >"$AARCH64_DIR/apt/sources.list"
    _apt+=(-o "Dir::Etc::SourceList=$AARCH64_DIR/apt/sources.list"
      -o "Dir::Etc::SourceParts=$AARCH64_DIR/apt/none")
  fi
  apt-get "${_apt[@]}" update -qq
  (cd "$AARCH64_DIR/debs" && apt-get "${_apt[@]}" download -qq "${_aarch64_pkgs[@]}")
  for _deb in "$AARCH64_DIR"/debs/*.deb; do
    dpkg-deb -x "$_deb" "$AARCH64_ROOT"
  done
  # Debian 13 and later install into /usr only, with /lib a link to usr/lib that the base-files
  # package makes; the loader's path (/lib/ld-linux-aarch64.so.1) needs that link here too.
  for _d in lib lib64 bin sbin; do
    [ -e "$AARCH64_ROOT/$_d" ] || [ ! -d "$AARCH64_ROOT/usr/$_d" ] || ln -s "usr/$_d" "$AARCH64_ROOT/$_d"
  done
  # Debian's pyconfig.h picks the architecture's copy by predefined macros from an include path
  # that would also hold the root's libc headers; the copy here holds only CPython's headers.
  mkdir -p "$AARCH64_PYINC"
  cp -r "$AARCH64_ROOT/usr/include/python$_aarch64_rootver" "$AARCH64_PYINC/"
  cp "$AARCH64_ROOT/usr/include/aarch64-linux-gnu/python$_aarch64_rootver/pyconfig.h" \
    "$AARCH64_PYINC/python$_aarch64_rootver/pyconfig.h"
  _aarch64_wheel "$_aarch64_rootver" numpy "$AARCH64_NUMPY"
  _tvm="apache-tvm-ffi"
  _tvm_version="$(python3 -c 'import importlib.metadata as m; print(m.version("apache-tvm-ffi"))' \
    2>/dev/null || true)"
  [ -n "$_tvm_version" ] && _tvm="apache-tvm-ffi==$_tvm_version"
  _aarch64_wheel "$_aarch64_rootver" "$_tvm" "$AARCH64_DIR/tvm_ffi"
  # Its own tvm-ffi-config imports the package, whose extension is aarch64: this one only says
  # where the wheel's folders are.
  cat >"$AARCH64_DIR/tvm-ffi-config" <<SH
#!/bin/sh
# tvm-ffi-config for apache-tvm-ffi's aarch64 wheel, unpacked (written by aarch64_root.sh).
for arg; do
  case "\$arg" in
    --includedir | --dlpack-includedir) echo "$AARCH64_DIR/tvm_ffi/tvm_ffi/include" ;;
    --libdir) echo "$AARCH64_DIR/tvm_ffi/tvm_ffi/lib" ;;
    *) echo "tvm-ffi-config: \$arg is not known here" >&2; exit 2 ;;
  esac
done
SH
  chmod +x "$AARCH64_DIR/tvm-ffi-config"
  rm -rf "$AARCH64_DIR/debs" "$AARCH64_DIR/apt"
  echo "$_aarch64_stamp" >"$AARCH64_DIR/root.stamp"
fi
# A version without a Debian interpreter: the cross-built one, its headers, and NumPy's wheel for
# it, unpacked once.
if [ -n "$_aarch64_cross_python" ]; then
  _ft=()
  [ "${AARCH64_PYVER%t}" = "$AARCH64_PYVER" ] || _ft=(--disable-gil)
  AARCH64_PYTHON="$(bash "$ROOT/scripts/build_cpython.sh" "${AARCH64_PYVER%t}" "${_ft[@]}" \
    --arch aarch64 | tail -1)"
  AARCH64_PYINC="$(dirname "$(dirname "$AARCH64_PYTHON")")/include"
  AARCH64_NUMPY="$ROOT/build/aarch64-py$AARCH64_PYVER/numpy"
  [ -d "$AARCH64_NUMPY/numpy" ] || _aarch64_wheel "$AARCH64_PYVER" numpy "$AARCH64_NUMPY"
fi
# shellcheck disable=SC2034  # for test.sh
AARCH64_TVM_FFI_CONFIG="$AARCH64_DIR/tvm-ffi-config"
export KFFI_AARCH64_ROOT="$AARCH64_ROOT"
