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
#   kffi_aarch64_torch RELEASE       torch's aarch64 wheel with what it imports, in a folder of its
#                                    own ($AARCH64_TORCH_SITE)
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
# What a cross-built CPython links its ctypes, zlib, bz2 and lzma modules against (torch.compile
# imports bz2, through networkx).
[ "$_aarch64_rootver" != 3.11 ] || _aarch64_pkgs+=(libffi-dev zlib1g-dev libbz2-dev liblzma-dev)

# _aarch64_pip VERSION ARGS...: pip with ARGS, choosing wheels for aarch64 CPython VERSION (3.12,
# or 3.14t free-threaded): every manylinux tag the roots' glibc (2.36 and newer) runs, under
# either name of glibc 2.17's (some wheels carry only manylinux2014), and pure Python wheels.
_aarch64_pip() {
  local _version="$1" _tags=(--platform manylinux2014_aarch64) _glibc
  shift
  for _glibc in $(seq 17 36); do
    _tags+=(--platform "manylinux_2_${_glibc}_aarch64")
  done
  python3 -m pip "$1" -q --disable-pip-version-check --only-binary=:all: "${_tags[@]}" \
    --platform any --python-version "${_version%t}" --implementation cp \
    --abi "cp${_version/./}" --abi abi3 --abi none "${@:2}"
}

# _aarch64_wheel VERSION PACKAGE DEST: PACKAGE's aarch64 wheel for CPython VERSION from PyPI,
# unpacked into DEST.
_aarch64_wheel() {
  rm -rf "$3" "$3.download"
  _aarch64_pip "$1" download --no-deps -d "$3.download" "$2"
  python3 -m zipfile -e "$3".download/*.whl "$3"
  rm -rf "$3.download"
}

# kffi_aarch64_torch RELEASE: torch RELEASE (2.13.0) for aarch64 CPython $AARCH64_PYVER, installed
# once into a folder of its own with everything it imports, and that folder in $AARCH64_TORCH_SITE.
# torch's aarch64 wheel on PyPI is its CUDA build: the install brings CUDA's libraries (cuBLAS,
# cuDNN, NCCL and the rest, about 4.6 GB), without which torch does not import, GPU or not. The
# wheels are downloaded once into build/aarch64-torch/download, which all versions share. The
# glue is built against the folder's torch and the wheel's smoke test imports it under qemu.
kffi_aarch64_torch() {
  local _dir="$ROOT/build/aarch64-torch"
  AARCH64_TORCH_SITE="$_dir/$1-cp${AARCH64_PYVER/./}"
  [ -f "$AARCH64_TORCH_SITE/torch/version.py" ] && return 0
  rm -rf "$AARCH64_TORCH_SITE"
  _aarch64_pip "$AARCH64_PYVER" download -d "$_dir/download" "torch==$1"
  _aarch64_pip "$AARCH64_PYVER" install --no-index --find-links "$_dir/download" \
    --target "$AARCH64_TORCH_SITE" "torch==$1"
  # The CUDA libraries are the same files for every Python version: one copy on disk.
  if command -v hardlink >/dev/null 2>&1; then
    hardlink -q --ignore-time "$_dir"/[0-9]* >/dev/null
  fi
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
# qemu-user shows the program the host's /proc/cpuinfo (an x86 one) and no arm64 identification
# registers in /sys, where torch's libraries read the CPU's description when they load (cpuinfo,
# oneDNN): with neither, importing torch crashes. The root holds an arm64 description of two
# Neoverse N1 cores instead; qemu's -L prefix makes a program find it at /proc and /sys.
if [ ! -f "$AARCH64_ROOT/proc/cpuinfo" ]; then
  mkdir -p "$AARCH64_ROOT/proc"
  for _cpu in 0 1; do
    printf '%s\n' "processor	: $_cpu" "BogoMIPS	: 50.00" \
      "Features	: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp" \
      "CPU implementer	: 0x41" "CPU architecture: 8" "CPU variant	: 0x3" "CPU part	: 0xd0c" \
      "CPU revision	: 1" ""
    mkdir -p "$AARCH64_ROOT/sys/devices/system/cpu/cpu$_cpu/regs/identification"
    echo 0x00000000413fd0c1 \
      >"$AARCH64_ROOT/sys/devices/system/cpu/cpu$_cpu/regs/identification/midr_el1"
  done >"$AARCH64_ROOT/proc/cpuinfo"
  for _f in possible present online; do
    echo 0-1 >"$AARCH64_ROOT/sys/devices/system/cpu/$_f"
  done
fi
# shellcheck disable=SC2034  # for test.sh
AARCH64_TVM_FFI_CONFIG="$AARCH64_DIR/tvm-ffi-config"
export KFFI_AARCH64_ROOT="$AARCH64_ROOT"
