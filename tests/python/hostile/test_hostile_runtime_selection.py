"""tests/python/hostile/test_hostile_runtime_selection.py: what KFFI_TVM_RUNTIME may name (issue 29,
class 2).

A library built with apache-tvm-ffi's C++ headers must run on apache-tvm-ffi's runtime, so kffi
loads the one KFFI_TVM_RUNTIME names (RTLD_GLOBAL, as `import tvm_ffi` does). The guard: the
bridge reads the named file before it opens it (src/tvm_bridge/bridge.cc, RuntimeFileProblem):
it must be a regular file (a FIFO would block dlopen), an ELF shared object for this machine,
not a kffi TVM-FFI shim (by identity: the same file, the same soname, or the bridge's entry
point, which a copy keeps), and it must define TVM-FFI's runtime functions as code; a loaded
runtime is made global only once it is known not to be a shim. Before the guard, naming the shim
made it global before refusing it, and a later `import tvm_ffi` aborted; naming a FIFO hung.

Every kind of target runs in a fresh process with a timeout, and after each refusal nothing of
TVM-FFI is global and `import tvm_ffi` still works in that process.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import tvm_libs

pytestmark = pytest.mark.skipif(
    tvm_libs.tvm_ffi_dir() is None, reason="apache-tvm-ffi is not installed"
)

# Loads the library (which must run on apache-tvm-ffi's runtime) with KFFI_TVM_RUNTIME set by
# the caller; then reports whether a TVM-FFI function is global, and imports and uses tvm_ffi.
_LOAD = textwrap.dedent("""
    import ctypes, json, sys
    import kffi

    try:
        kffi.load_module(sys.argv[1])
        result = ["ok", None]
    except Exception as e:
        result = [type(e).__name__, str(e)]
    tvm_global = hasattr(ctypes.CDLL(None), "TVMFFIErrorMoveFromRaised")
    sys.modules["torch"] = None  # tvm_ffi imports torch when it can: seconds this test needs not
    import tvm_ffi

    add = tvm_ffi.convert(lambda x: x + 1)
    print(json.dumps({"load": result, "tvm_global": tvm_global, "tvm_ffi": add(1)}))
""")

_NOT_A_RUNTIME = (
    "it does not define the TVM-FFI runtime functions "
    "TVMFFIEnvGetDLPackManagedTensorAllocator, TVMFFIEnvGetStream, "
    "TVMFFIEnvSetDLPackManagedTensorAllocator, TVMFFIEnvSetStream, TVMFFIErrorMoveFromRaised, "
    "TVMFFIErrorSetRaised, TVMFFIFunctionSetGlobal (it is not apache-tvm-ffi's libtvm_ffi.so)"
)
_SHIM = "it is kffi's own TVM-FFI shim (libkffi_tvm.so), not apache-tvm-ffi's runtime"
_REQUIRED = [
    "TVMFFIEnvGetDLPackManagedTensorAllocator",
    "TVMFFIEnvGetStream",
    "TVMFFIEnvSetDLPackManagedTensorAllocator",
    "TVMFFIEnvSetStream",
    "TVMFFIErrorMoveFromRaised",
    "TVMFFIErrorSetRaised",
    "TVMFFIFunctionSetGlobal",
]


def _patched(src: Path, dst: Path, offset: int, value: bytes) -> Path:
    data = bytearray(src.read_bytes())
    data[offset : offset + len(value)] = value
    dst.write_bytes(bytes(data))
    return dst


@pytest.fixture(scope="module")
def targets(tmp_path_factory) -> dict:
    """Every kind of path KFFI_TVM_RUNTIME may name -> the reason its refusal gives."""
    import kffi.libinfo

    d = tmp_path_factory.mktemp("runtimes")
    os.mkfifo(d / "fifo.so")
    (d / "folder.so").mkdir()
    (d / "text.so").write_text("INPUT(libtvm_ffi.so)\n")  # a linker script, not a library
    (d / "empty.so").write_bytes(b"")
    # An unrelated library, an object file, and a library that defines the runtime's names as
    # data (a runtime whose functions are not code is no runtime).
    (d / "unrelated.c").write_text("int unrelated(int x) { return x + 1; }\n")
    data_names = "".join(f'const char {n}[] = "not code";\n' for n in _REQUIRED)
    (d / "data_names.c").write_text(data_names)
    for cmd in (
        ["cc", "-shared", "-fPIC", "-o", d / "unrelated.so", d / "unrelated.c"],
        ["cc", "-shared", "-fPIC", "-o", d / "data_names.so", d / "data_names.c"],
        ["cc", "-c", "-fPIC", "-o", d / "object.o", d / "unrelated.c"],
    ):
        subprocess.run([str(c) for c in cmd], check=True, timeout=300)
    unrelated = d / "unrelated.so"
    host = 62 if platform.machine() in ("x86_64", "AMD64") else 183
    other = 183 if host == 62 else 62
    _patched(unrelated, d / "other_machine.so", 18, other.to_bytes(2, "little"))
    _patched(unrelated, d / "elf32.so", 4, b"\x01")
    shim = Path(kffi.libinfo.lib_dir()) / "libkffi_tvm.so"
    os.symlink(shim, d / "shim_link.so")
    shutil.copyfile(shim, d / "shim_copy.so")
    return {
        str(d / "fifo.so"): "it is a FIFO (named pipe), not a regular file",
        str(d / "folder.so"): "it is a directory, not a regular file",
        str(d / "missing.so"): "no such file",
        "/dev/null": "it is a device, not a regular file",
        str(d / "text.so"): "not an ELF file",
        str(d / "empty.so"): "not an ELF file",
        str(d / "object.o"): "not a shared object (ELF type 1)",
        str(d / "other_machine.so"): f"built for another machine (ELF machine {other}, this "
        f"host is {host})",
        str(d / "elf32.so"): "an ELF file for another kind of machine (not 64-bit of this byte "
        "order)",
        str(unrelated): _NOT_A_RUNTIME,
        str(d / "data_names.so"): _NOT_A_RUNTIME,
        str(shim): _SHIM,
        str(d / "shim_link.so"): _SHIM,
        str(d / "shim_copy.so"): _SHIM,
    }


def _run(runtime: str, library: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "KFFI_TVM_RUNTIME"}
    env["KFFI_TVM_RUNTIME"] = runtime
    proc = subprocess.run(
        [sys.executable, "-c", _LOAD, library],
        capture_output=True,
        text=True,
        timeout=120,  # dlopen of a FIFO blocked forever before the guard
        env=env,
    )
    # Before the guard, `import tvm_ffi` after the shim was made global aborted (SIGABRT).
    assert proc.returncode == 0, f"{runtime}: exit {proc.returncode}: {proc.stderr[-3000:]}"
    return json.loads(proc.stdout)


def test_every_kind_of_runtime_target(targets):
    library = str(tvm_libs.build("tvm_testlib", linked=False))
    for runtime, why in targets.items():
        got = _run(runtime, library)
        assert got["load"] == [
            "RuntimeError",
            f"Cannot load module `{library}`: it needs apache-tvm-ffi's runtime, and "
            f"`{runtime}` (KFFI_TVM_RUNTIME) does not load: {why}. Set KFFI_TVM_RUNTIME=shim "
            "to run the libraries that do not link libtvm_ffi on kffi's runtime instead",
        ], runtime
        # Nothing was made global: kffi's shim least of all.
        assert got["tvm_global"] is False, runtime
        assert got["tvm_ffi"] == 2, runtime


def test_the_real_runtime_is_taken(targets):
    """The control: apache-tvm-ffi's own libtvm_ffi.so loads, global, and the library runs."""
    library = str(tvm_libs.build("tvm_testlib", linked=False))
    runtime = str(tvm_libs.tvm_ffi_dir() / "lib" / "libtvm_ffi.so")
    got = _run(runtime, library)
    assert got == {"load": ["ok", None], "tvm_global": True, "tvm_ffi": 2}
