#!/usr/bin/env python3
"""examples/tvm_ffi/run.py: build a TVM-FFI kernel library and run it through kffi.

    python3 examples/tvm_ffi/run.py [BUILD_DIR]

Builds scale_tvm.cc with apache-tvm-ffi's compile flags (`tvm-ffi-config --cxxflags`) but without
linking libtvm_ffi, then loads it with kffi.load_module: kffi provides the TVM-FFI runtime
functions the library imports, so apache-tvm-ffi is not even loaded. Needs `pip install
apache-tvm-ffi` for the headers. docs/tvm_ffi.md walks through the same steps.
"""
# SPDX-License-Identifier: Apache-2.0

import os
import shutil
import subprocess
import sys
import tempfile

import kffi
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def build(out_dir: str) -> str:
    config = shutil.which("tvm-ffi-config") or "tvm-ffi-config"
    cxxflags = subprocess.run(
        [config, "--cxxflags"], capture_output=True, text=True, check=True
    ).stdout.split()
    out = os.path.join(out_dir, "libscale_tvm.so")
    subprocess.run(
        [
            "g++",
            "-shared",
            "-fPIC",
            "-O2",
            "-DTVM_FFI_DLL_EXPORT_INCLUDE_METADATA=1",
            *cxxflags,
            os.path.join(HERE, "scale_tvm.cc"),
            "-o",
            out,
        ],
        check=True,
    )
    return out


def main() -> int:
    out_dir = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="kffi_tvm_example_")
    os.makedirs(out_dir, exist_ok=True)
    mod = kffi.load_module(build(out_dir))

    x = np.arange(5, dtype=np.float32)
    y = np.empty_like(x)
    mod.scale(y, x, 2.5)
    print("scale:", y.tolist())
    print("signature:", mod.scale.__doc__.splitlines()[0])
    try:
        mod.scale(y, x.astype(np.float64), 2.0)
    except TypeError as e:
        print("TypeError:", e)
    with open("/proc/self/maps") as maps:
        print("apache-tvm-ffi loaded:", any("libtvm_ffi" in line for line in maps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
