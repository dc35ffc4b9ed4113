# cmake/toolchains/aarch64-linux-gnu.cmake: cross-compiles kffi for 64-bit Arm Linux with Debian's
# aarch64-linux-gnu GCC (g++-aarch64-linux-gnu). scripts/aarch64_root.sh makes the target root
# (Debian arm64 packages: libc, libstdc++, CPython 3.11 and its headers, GoogleTest) and names it
# in KFFI_AARCH64_ROOT; libraries and CMake packages are then found there and nowhere else, and
# what CMake runs (ctest, gtest_discover_tests) runs under qemu-user with that root.
# SPDX-License-Identifier: Apache-2.0
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
if(DEFINED ENV{KFFI_AARCH64_ROOT})
  set(_kffi_root "$ENV{KFFI_AARCH64_ROOT}")
  set(CMAKE_FIND_ROOT_PATH "${_kffi_root}")
  # The root's libraries (libstdc++, libpython's dependencies) are Debian's, the same version as
  # the cross compiler's; -L makes qemu resolve the loader and /lib paths inside it.
  set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L "${_kffi_root}")
endif()
# Programs (the host's Python, cmake, git) come from the build machine; the rest from the root.
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
