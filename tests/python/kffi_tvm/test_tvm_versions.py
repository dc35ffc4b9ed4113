"""tests/python/kffi_tvm/test_tvm_versions.py: libraries built against other apache-tvm-ffi
releases.

A TVM-FFI library records no version, so kffi reads the era from what the headers leave in the
file (docs/tvm_ffi.md, "Version skew"). Before 0.1.8 an error record was 56 bytes, where kffi's
runtime (and apache-tvm-ffi's since) reads 72: such a library crashed at its first error. It is
refused before any of its code runs, naming its release range and kffi's, on kffi's runtime and
with apache-tvm-ffi loaded. One built against 0.1.9 runs and raises as one built against the
installed release does. The older releases' headers come from their PyPI wheels (downloaded at
test time, never installed); the test is skipped where PyPI cannot be reached.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import tvm_libs
from conftest import SUPPORT

pytestmark = pytest.mark.skipif(
    tvm_libs.tvm_ffi_dir() is None, reason="apache-tvm-ffi is not installed"
)


@pytest.fixture(scope="module")
def libs():
    out = {"installed": str(tvm_libs.build("tvm_versioned", linked=False))}
    for version in ("0.1.7", "0.1.9"):
        folder = tvm_libs.release_dir(version)
        if folder is None:
            pytest.skip(f"apache-tvm-ffi {version}'s wheel cannot be downloaded here")
        out[version] = str(tvm_libs.build("tvm_versioned", linked=False, tvm=folder))
    return out


def run(code: str, runtime: str | None, libs: dict) -> str:
    body = f"import sys\nsys.path.insert(0, {str(SUPPORT)!r})\n" + textwrap.dedent(code).format(
        old=libs["0.1.7"], mid=libs["0.1.9"], new=libs["installed"]
    )
    env = {k: v for k, v in os.environ.items() if k != "KFFI_TVM_RUNTIME"}
    if runtime is not None:
        env["KFFI_TVM_RUNTIME"] = runtime
    proc = subprocess.run(
        [sys.executable, "-c", body], capture_output=True, text=True, timeout=180, env=env
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout.strip().splitlines()[-1]


CHECK = """
    import os, kffi, tvm_libs
    {prelude}
    try:
        kffi.load_module({old!r})
    except RuntimeError as e:
        msg = str(e)
        assert "it was built with apache-tvm-ffi 0.1.8.post2 or older" in msg, msg
        assert "kffi's runtime follows apache-tvm-ffi 0.1.15.post2 (version 0.1.16)" in msg, msg
        assert "Rebuild it against apache-tvm-ffi 0.1.9 or newer" in msg, msg
    else:
        raise AssertionError("a library of 0.1.7 loaded")
    assert os.environ.get("KFFI_TEST_TVM_VERSIONED_INITIALISED") is None  # none of it ran
    for path in ({mid!r}, {new!r}):
        mod = kffi.load_module(path)
        assert mod.checked_square(7) == 49
        try:
            mod.checked_square(-3)
        except ValueError as e:
            assert "negative: -3" in str(e), str(e)
        else:
            raise AssertionError("no error")
    assert tvm_libs.libtvm_ffi_mapped() == {on_tvm}
    print("ok")
"""


def test_pre_0_1_8_library_is_refused_on_kffis_runtime(libs):
    code = CHECK.replace("{prelude}", "").replace("{on_tvm}", "False")
    assert run(code, "shim", libs) == "ok"


def test_pre_0_1_8_library_is_refused_with_apache_tvm_ffi_loaded(libs):
    code = CHECK.replace("{prelude}", "import tvm_ffi").replace("{on_tvm}", "True")
    assert run(code, None, libs) == "ok"
