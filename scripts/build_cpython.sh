#!/usr/bin/env bash
# scripts/build_cpython.sh: a CPython that neither Debian 12 nor PyPI installs (another version,
# a free-threaded build, or one for aarch64), built from the source a distribution ships.
#
#   bash scripts/build_cpython.sh VERSION [--disable-gil] [--arch aarch64]
#                                          e.g. 3.14, 3.13 --disable-gil, 3.12 --arch aarch64
#
# Prints the interpreter's path on its last line. The source is a distribution's source package of
# that CPython (SOURCES below says which). uv's managed Pythons would be quicker but are
# downloaded from GitHub, which this machine cannot reach. The interpreter goes to
# $KFFI_CPYTHON_HOME/<VERSION>[t] (default build/cpython) and is built once: about 6-8 minutes on
# 2 cores, without the profile-guided build, which only makes the interpreter faster.
# --disable-gil builds the free-threaded one (python<VERSION>t). --arch aarch64 cross-compiles it
# into $KFFI_CPYTHON_HOME/aarch64 (see below).
# SPDX-License-Identifier: Apache-2.0
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VERSION="${1:?usage: build_cpython.sh VERSION [--disable-gil] [--arch aarch64]}"
shift
FT=0
ARCH="$(uname -m)"
while [ $# -gt 0 ]; do
  case "$1" in
    --disable-gil) FT=1 ;;
    --arch)
      ARCH="${2:?--arch needs aarch64}"
      shift
      ;;
    *)
      echo "build_cpython.sh: unknown argument $1" >&2
      exit 2
      ;;
  esac
  shift
done
SUFFIX=""
[ "$FT" = 1 ] && SUFFIX=t
HOME_DIR="${KFFI_CPYTHON_HOME:-$ROOT/build/cpython}"
[ "$ARCH" = "$(uname -m)" ] || HOME_DIR="$HOME_DIR/$ARCH"
PREFIX="$HOME_DIR/$VERSION$SUFFIX"
PY="$PREFIX/bin/python$VERSION$SUFFIX"
JOBS="${KFFI_JOBS:-$(nproc)}"
mkdir -p "$HOME_DIR"

CONFIGURE=(--prefix="$PREFIX")
[ "$FT" = 1 ] && CONFIGURE+=(--disable-gil)
CHECK=("$PY")
if [ "$ARCH" = "$(uname -m)" ]; then
  CONFIGURE+=(--with-ensurepip=install)
else
  # A cross build, for the aarch64 wheels of the versions Debian has no arm64 interpreter of. It
  # needs this machine's interpreter of the same version to run its build steps (built first when
  # missing), Debian's cross compiler, and libffi, zlib, bzip2 and xz for aarch64: the arm64 root of
  # scripts/aarch64_root.sh (Debian 12's packages) has them, and its libc is the cross compiler's,
  # so the interpreter runs under qemu-user with that root as its library prefix.
  [ "$ARCH" = aarch64 ] || { echo "build_cpython.sh: cross builds are for aarch64 only" >&2; exit 2; }
  # shellcheck source=scripts/find_python.sh
  source "$ROOT/scripts/find_python.sh"
  BUILD_PY="$(kffi_find_python "$VERSION$SUFFIX")"
  [ -n "$BUILD_PY" ] || BUILD_PY="$(kffi_find_python "$VERSION")"
  if [ -z "$BUILD_PY" ]; then
    FT_ARG=()
    [ "$FT" = 1 ] && FT_ARG=(--disable-gil)
    BUILD_PY="$(bash "$0" "$VERSION" "${FT_ARG[@]}" | tail -1)"
  fi
  # The interpreter itself, not a venv's (as PATH gives inside one): a venv's reports its base's
  # sysconfig, so 3.10's setup.py would look for the source tree there.
  BUILD_PY="$("$BUILD_PY" -c 'import os, sys
print(os.path.join(sys.base_prefix, "bin", os.path.basename(sys.executable)))')"
  # 3.10's configure looks for python3.10 on PATH; later ones take --with-build-python.
  PATH="$(dirname "$BUILD_PY"):$PATH"
  (
    AARCH64_PYVER=3.11
    # shellcheck source=scripts/aarch64_root.sh
    source "$ROOT/scripts/aarch64_root.sh"
  ) >&2
  ARM_ROOT="$ROOT/build/aarch64/root"
  MULTIARCH=aarch64-linux-gnu
  # The configure checks that cannot run a target program, answered for Linux.
  printf 'ac_cv_file__dev_ptmx=yes\nac_cv_file__dev_ptc=no\nac_cv_buggy_getaddrinfo=no\n' \
    >"$HOME_DIR/config.site"
  export CONFIG_SITE="$HOME_DIR/config.site"
  # pkg-config would answer with this machine's x86-64 libraries: the flags are given instead.
  export PKG_CONFIG_LIBDIR="$HOME_DIR/no-pkgconfig"
  CONFIGURE+=(--build=x86_64-linux-gnu --host="$MULTIARCH" --with-build-python="$BUILD_PY"
    --without-ensurepip
    CPPFLAGS="-I$ARM_ROOT/usr/include/$MULTIARCH -I$ARM_ROOT/usr/include"
    LDFLAGS="-L$ARM_ROOT/usr/lib/$MULTIARCH -Wl,-rpath-link,$ARM_ROOT/usr/lib/$MULTIARCH"
    LIBFFI_CFLAGS="-I$ARM_ROOT/usr/include/$MULTIARCH" LIBFFI_LIBS="-lffi"
    ZLIB_CFLAGS="-I$ARM_ROOT/usr/include" ZLIB_LIBS="-lz"
    BZIP2_CFLAGS="-I$ARM_ROOT/usr/include" BZIP2_LIBS="-lbz2"
    LIBLZMA_CFLAGS="-I$ARM_ROOT/usr/include" LIBLZMA_LIBS="-llzma")
  CHECK=(qemu-aarch64 -L "$ARM_ROOT" "$PY")
fi

# Where the source may come from, in order: an index (a distribution's suite) and its mirror. The
# orig tarball is CPython's release tarball as its maintainers took it, checked against the SHA-256
# of the index. Debian first; the Debian mirror this machine reaches serves sid's indexes but not
# its python3.14 source files, so Ubuntu's archive comes after it: 26.04 ships 3.14, 24.04 3.12
# and 22.04 3.10.
SOURCES=(
  "${KFFI_DEBIAN_MIRROR:-http://deb.debian.org/debian} trixie"
  "${KFFI_DEBIAN_MIRROR:-http://deb.debian.org/debian} sid"
  "${KFFI_UBUNTU_MIRROR:-http://archive.ubuntu.com/ubuntu} resolute-updates"
  "${KFFI_UBUNTU_MIRROR:-http://archive.ubuntu.com/ubuntu} resolute"
  "${KFFI_UBUNTU_MIRROR:-http://archive.ubuntu.com/ubuntu} noble-updates"
  "${KFFI_UBUNTU_MIRROR:-http://archive.ubuntu.com/ubuntu} jammy-updates"
)

if [ ! -x "$PY" ]; then
  mkdir -p "$HOME_DIR/src"
  cd "$HOME_DIR/src"
  name=""
  for source in "${SOURCES[@]}"; do
    read -r mirror suite <<<"$source"
    curl -fsSL "$mirror/dists/$suite/main/source/Sources.xz" 2>/dev/null | xz -dc >Sources ||
      continue
    # An index can list two versions of a package while one replaces the other: the newest.
    read -r sha name < <(awk -v pkg="python$VERSION" '
      $0 == "Package: " pkg {p=1} p && /^Checksums-Sha256:/ {c=1; next}
      p && c && /orig\.tar\.xz$/ {print $1, $3} /^$/ {p=0; c=0}' Sources | sort -k2 -V | tail -1) ||
      true
    [ -n "${name:-}" ] || continue
    if [ -f "$name" ] || curl -fsSL -o "$name" "$mirror/pool/main/p/python$VERSION/$name" 2>/dev/null; then
      echo "$sha  $name" | sha256sum -c - >&2 && break
    fi
    rm -f "$name"
    name=""
  done
  [ -n "$name" ] || { echo "build_cpython.sh: no python$VERSION source could be fetched" >&2; exit 1; }
  BUILD="$HOME_DIR/src/$VERSION$SUFFIX-$ARCH"
  rm -rf "$BUILD" && mkdir "$BUILD" && tar xf "$name" -C "$BUILD" --strip-components=1
  echo "build_cpython.sh: building CPython $VERSION$SUFFIX for $ARCH from $name" >&2
  (cd "$BUILD" && ./configure "${CONFIGURE[@]}" >configure.log 2>&1 &&
    make -j"$JOBS" >make.log 2>&1 && make install >install.log 2>&1) ||
    { tail -n 30 "$BUILD"/*.log >&2; exit 1; }
  rm -rf "$BUILD"
fi
"${CHECK[@]}" -c "import bz2, ctypes, lzma, sys, sysconfig, zlib
assert '%d.%d' % sys.version_info[:2] == '$VERSION', sys.version
assert bool(sysconfig.get_config_var('Py_GIL_DISABLED')) == bool($FT), sys.version" >&2
echo "$PY"
