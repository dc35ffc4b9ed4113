"""python/kffi/libinfo.py: where the installed kffi library, headers and CMake package are."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import os

_HERE = os.path.dirname(os.path.abspath(__file__))


def _first_existing(*candidates: str) -> str:
    for c in candidates:
        if os.path.exists(c):
            return c
    return candidates[0]


def include_dir() -> str:
    """Folder that holds kffi/c_api.h and the C++ headers."""
    return _first_existing(
        os.path.join(_HERE, "include"), os.path.join(_HERE, "..", "..", "include")
    )


def lib_dir() -> str:
    """Folder that holds libkffi.so."""
    return os.path.join(_HERE, "lib")


def lib_path() -> str:
    """Path of libkffi.so."""
    return os.path.join(lib_dir(), "libkffi.so")


def cmake_dir() -> str:
    """Folder for CMake's find_package(kffi CONFIG) (pass as kffi_DIR or CMAKE_PREFIX_PATH)."""
    return os.path.join(_HERE, "lib", "cmake", "kffi")
