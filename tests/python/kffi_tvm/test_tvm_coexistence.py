"""tests/python/kffi_tvm/test_tvm_coexistence.py: kffi, apache-tvm-ffi and torch in one process.

Each scenario runs in a fresh interpreter because the order in which the runtimes arrive matters
and because the point is that nothing aborts: the test checks the exit status as well as the
results. Where apache-tvm-ffi is installed, a library built with its C++ headers (tvm_testlib)
runs on it even before `import tvm_ffi` (kffi loads the installed runtime); scenarios that mix
kffi's shim and apache-tvm-ffi in one process opt in to the shim with KFFI_TVM_RUNTIME=shim.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import tvm_libs
from conftest import SUPPORT

pytestmark = pytest.mark.skipif(
    tvm_libs.tvm_ffi_dir() is None, reason="apache-tvm-ffi is not installed"
)

TORCH_KERNELS = Path(__file__).resolve().parents[1] / "kffi_torch" / "torch_kernels.cc"


@pytest.fixture(scope="module")
def libs():
    return {
        "unlinked": str(tvm_libs.build("tvm_testlib", linked=False)),
        "linked": str(tvm_libs.build("tvm_testlib", linked=True)),
        "norpath": str(tvm_libs.build("tvm_testlib", linked=True, rpath=False)),
        "collide": str(tvm_libs.build("tvm_collide", linked=False)),
        "uncovered": str(tvm_libs.build("tvm_uncovered", linked=False)),
    }


def run(code: str, runtime: str | None = None, **paths) -> str:
    """Runs code in a fresh interpreter (KFFI_TVM_RUNTIME=runtime when given, unset otherwise);
    returns its stdout (fails the test on a crash)."""
    prelude = f"import sys\nsys.path.insert(0, {str(SUPPORT)!r})\n"
    body = prelude + textwrap.dedent(code).format(**paths)
    env = {k: v for k, v in os.environ.items() if k != "KFFI_TVM_RUNTIME"}
    if runtime is not None:
        env["KFFI_TVM_RUNTIME"] = runtime
    proc = subprocess.run(
        [sys.executable, "-c", body],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def test_interleaved_calls_in_both_directions(libs):
    out = run(
        """
        import numpy as np
        import kffi
        shim_mod = kffi.load_module({unlinked!r})       # before tvm_ffi: on kffi's shim
        import torch
        import tvm_ffi                                   # now apache-tvm-ffi is loaded too
        real_mod = kffi.load_module({linked!r})          # bound to apache-tvm-ffi
        theirs = tvm_ffi.load_module({linked!r})         # the same file through tvm_ffi
        x = torch.arange(4, dtype=torch.float32)
        for i in range(50):
            y1, y2, y3 = torch.empty(4), torch.empty(4), torch.empty(4)
            shim_mod.add_one(x, y1)
            real_mod.add_one(x, y2)
            theirs.add_one(x, y3)
            assert y1.tolist() == y2.tolist() == y3.tolist() == [1.0, 2.0, 3.0, 4.0]
            # kffi functions called from TVM-FFI code and the other way round.
            assert theirs.call_twice(shim_mod.make_adder(i), 0) == 2 * i
            assert shim_mod.call_twice(theirs.make_adder(i), 1) == 1 + 2 * i
            assert real_mod.apply(kffi.to_kffi(lambda v: v * 2), i) == 2 * i
            assert theirs.apply(real_mod.make_adder(1), i) == i + 1
        # A kffi function handed to tvm_ffi is a tvm_ffi.Function; a tensor is the same object.
        f = kffi.to_kffi(lambda v: v + 100)
        assert isinstance(tvm_ffi.convert(f), tvm_ffi.Function)
        assert theirs.call_twice(f, 0) == 200
        t = kffi.from_dlpack(np.arange(3, dtype=np.float32))
        assert theirs.tensor_sum(t) == 3.0
        print("ok", shim_mod.add_int(1, 1), real_mod.add_int(2, 2))
    """,
        runtime="shim",
        **libs,
    )
    assert out.strip().splitlines()[-1] == "ok 2 4"


def test_errors_cross_both_ways(libs):
    out = run(
        """
        import kffi, tvm_ffi, torch
        mod = kffi.load_module({linked!r})
        theirs = tvm_ffi.load_module({linked!r})
        shim_fail = KeyError("from a kffi callback")

        def fail(v):
            raise shim_fail

        # TVM-FFI code -> kffi caller: kind, message and the library's frames kept.
        try:
            mod.raise_error("IndexError", "raised by the library")
        except IndexError as e:
            assert str(e) == "raised by the library"
        # kffi callback -> TVM-FFI code -> kffi caller: the same Python exception object.
        try:
            mod.call_twice(fail, 1)
        except KeyError as e:
            assert e is shim_fail
        # kffi callback -> TVM-FFI code -> tvm_ffi caller.
        try:
            theirs.call_twice(kffi.to_kffi(fail), 1)
        except KeyError as e:
            assert "from a kffi callback" in str(e)
        # A kffi export raising -> TVM-FFI code -> tvm_ffi caller.
        try:
            theirs.apply(mod.check_positive, -5)
        except ValueError as e:
            assert "expected a positive number, got -5" in str(e)
        # A tvm_ffi function raising -> TVM-FFI code bound to kffi -> kffi caller.
        try:
            mod.apply(theirs.check_positive, -6)
        except ValueError as e:
            assert "expected a positive number, got -6" in str(e)
        print("ok")
    """,
        **libs,
    )
    assert out.strip().splitlines()[-1] == "ok"


def test_global_registrations_do_not_collide(libs):
    out = run(
        """
        import kffi
        mod = kffi.load_module({unlinked!r})   # registers tvm_testlib.square in kffi
        import tvm_ffi
        theirs = tvm_ffi.load_module({linked!r})  # registers tvm_testlib_linked.square there
        kffi.register_global_func("coexist.f", lambda: "kffi")
        tvm_ffi.register_global_func("coexist.f", lambda: "tvm_ffi")
        assert kffi.get_global_func("coexist.f")() == "kffi"
        assert tvm_ffi.get_global_func("coexist.f")() == "tvm_ffi"
        assert kffi.get_global_func("tvm_testlib.square")(3) == 9
        assert tvm_ffi.get_global_func("tvm_testlib_linked.square")(4) == 16
        assert tvm_ffi.get_global_func("tvm_testlib.square", allow_missing=True) is None
        print("ok")
    """,
        runtime="shim",
        **libs,
    )
    assert out.strip().splitlines()[-1] == "ok"


def test_colliding_registration_fails_the_load_not_the_process(libs):
    out = run(
        """
        import kffi
        mod = kffi.load_module({unlinked!r})
        try:
            kffi.load_module({collide!r})
        except KeyError as e:
            message = str(e)
            assert "The library registers a global function kffi cannot accept" in message, message
            assert "tvm_testlib.square" in message, message
        else:
            raise AssertionError("the colliding library loaded")
        # The first registration stands; later loads of the file fail the same way.
        assert kffi.get_global_func("tvm_testlib.square")(5) == 25
        try:
            kffi.load_module({collide!r})
        except KeyError:
            pass
        print("ok")
    """,
        runtime="shim",  # kffi's registry; on apache-tvm-ffi's, its own rules apply
        **libs,
    )
    assert out.strip().splitlines()[-1] == "ok"


def test_extra_cxx_api_import_is_named_before_the_library_runs(libs):
    # On kffi's runtime alone: refused by name, before any of the library's code ran.
    out = run(
        """
        import os, kffi, tvm_libs
        try:
            kffi.load_module({uncovered!r})
        except RuntimeError as e:
            assert "it imports apache-tvm-ffi's extra C++ API (`tvm::ffi::json::Parse(" in str(e), e
            assert "which kffi's TVM-FFI runtime does not provide" in str(e), str(e)
            assert "import tvm_ffi" in str(e), str(e)
        else:
            raise AssertionError("loaded")
        assert os.environ.get("KFFI_TEST_TVM_UNCOVERED_INITIALISED") is None
        assert not tvm_libs.libtvm_ffi_mapped()
        # With apache-tvm-ffi loaded the same library runs on it.
        import tvm_ffi
        mod = kffi.load_module({uncovered!r})
        assert mod.parsed_length("[1, 2, 3]") == 3
        print("ok")
    """,
        runtime="shim",
        **libs,
    )
    assert out.strip().splitlines()[-1] == "ok"
    # With apache-tvm-ffi installed but not imported, kffi loads it for the library.
    out = run(
        """
        import kffi, tvm_libs
        mod = kffi.load_module({uncovered!r})
        assert tvm_libs.libtvm_ffi_mapped()
        assert mod.parsed_length("[4]") == 1
        print("ok")
    """,
        **libs,
    )
    assert out.strip().splitlines()[-1] == "ok"


def test_linked_library_without_tvm_ffi_imported_finds_the_installed_runtime(libs):
    out = run(
        """
        import sys, kffi, tvm_libs
        assert not tvm_libs.libtvm_ffi_mapped()
        mod = kffi.load_module({linked!r})   # DT_NEEDED libtvm_ffi.so, found through its rpath
        assert mod.add_int(20, 22) == 42
        assert tvm_libs.libtvm_ffi_mapped() and "tvm_ffi" not in sys.modules
        try:
            mod.check_positive(0)
        except ValueError as e:
            assert "got 0" in str(e)
        print("ok")
    """,
        **libs,
    )
    assert out.strip().splitlines()[-1] == "ok"


def test_linked_library_the_loader_cannot_find_a_runtime_for(libs):
    """-ltvm_ffi without an rpath: kffi.load_module loads the installed apache-tvm-ffi's runtime
    (as `import tvm_ffi` would, without importing the Python package) and the load succeeds."""
    out = run(
        """
        import sys, kffi, tvm_libs
        assert not tvm_libs.libtvm_ffi_mapped()
        mod = kffi.load_module({norpath!r})
        assert mod.add_int(1, 2) == 3
        assert tvm_libs.libtvm_ffi_mapped() and "tvm_ffi" not in sys.modules
        try:
            mod.raise_error("KeyError", "through the preloaded runtime")
        except KeyError as e:
            assert e.args[0] == "through the preloaded runtime"
        print("ok")
    """,
        **libs,
    )
    assert out.strip().splitlines()[-1] == "ok"


def test_jax_tvm_ffi_accepts_a_kffi_function(libs):
    pytest.importorskip("jax_tvm_ffi")
    out = run(
        """
        import jax, jax.numpy as jnp, numpy as np
        import jax_tvm_ffi, kffi
        mod = kffi.load_module({unlinked!r})   # bound to the runtime jax_tvm_ffi loaded
        jax_tvm_ffi.register_ffi_target("kffi_bridge_add_one", mod.add_one, platform="cpu")
        jax.config.update("jax_default_device", jax.devices("cpu")[0])  # host kernels
        x = jnp.arange(8, dtype=jnp.float32)
        y = jax.ffi.ffi_call("kffi_bridge_add_one", jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
        np.testing.assert_array_equal(np.asarray(y), np.arange(8, dtype=np.float32) + 1)
        # A kffi-native callable too.
        calls = []
        def record(a, b):
            calls.append(a.shape)
        jax_tvm_ffi.register_ffi_target("kffi_bridge_record", kffi.to_kffi(record), platform="cpu")
        jax.ffi.ffi_call("kffi_bridge_record", jax.ShapeDtypeStruct((2,), jnp.float32))(
            jnp.ones(2, jnp.float32))
        assert calls, calls
        print("ok")
    """,
        **libs,
    )
    assert out.strip().splitlines()[-1] == "ok"


def test_library_with_shared_type_statics_runs_on_the_installed_runtime(libs):
    """A library built with apache-tvm-ffi's C++ headers defines GNU unique type-index statics.
    Loaded before `import tvm_ffi`, after kffi registered dynamic types of its own (a torch op
    here), it used to bind to kffi's shim and fill them with kffi's numbers; the later
    `import tvm_ffi` then stopped the process ("type_depth == parent->type_depth + 1", exit 255).
    kffi now loads the installed runtime for it first, so the numbers are apache-tvm-ffi's."""
    pytest.importorskip("torch")
    import kffi.cpp

    torch_kernels = kffi.cpp.build("kffi_test_torch_kernels", [str(TORCH_KERNELS)], quiet=True)
    out = run(
        """
        import torch, kffi, kffi.torch, tvm_libs
        tk = kffi.load_module({torch_kernels!r})
        op = kffi.torch.register_op(tk.scale_into, "coexist_statics::scale_into")
        y = torch.empty(3)
        op(y, torch.arange(3, dtype=torch.float32), 2.0)
        assert y.tolist() == [0.0, 2.0, 4.0]
        mod = kffi.load_module({unlinked!r})
        assert tvm_libs.libtvm_ffi_mapped() and "tvm_ffi" not in sys.modules
        assert mod.add_int(2, 3) == 5
        import tvm_ffi
        # Its registrations are apache-tvm-ffi's, and the runtime works on.
        assert tvm_ffi.get_global_func("tvm_testlib.square")(3) == 9
        theirs = tvm_ffi.load_module({linked!r})
        assert theirs.add_int(4, 5) == 9 and mod.add_int(1, 1) == 2
        print("ok")
    """,
        torch_kernels=str(torch_kernels),
        **libs,
    )
    assert out.strip().splitlines()[-1] == "ok"


def test_kffi_tvm_runtime_shim_keeps_such_a_library_on_kffi(libs):
    out = run(
        """
        import kffi, tvm_libs
        mod = kffi.load_module({unlinked!r})
        assert mod.add_int(2, 3) == 5
        assert kffi.get_global_func("tvm_testlib.square")(4) == 16
        assert not tvm_libs.libtvm_ffi_mapped()
        print("ok")
    """,
        runtime="shim",
        **libs,
    )
    assert out.strip().splitlines()[-1] == "ok"


def test_kffi_tvm_runtime_names_the_runtime_for_the_loader(libs):
    """The C++ loader reads KFFI_TVM_RUNTIME itself (kffi's Python package does not register a
    path then): a path loads that runtime, a bad one is a clear error and the process goes on."""
    runtime = os.path.join(tvm_libs.tvm_ffi_dir(), "lib", "libtvm_ffi.so")
    out = run(
        """
        import kffi, tvm_libs
        mod = kffi.load_module({unlinked!r})
        assert tvm_libs.libtvm_ffi_mapped() and mod.add_int(1, 2) == 3
        print("ok")
    """,
        runtime=runtime,
        **libs,
    )
    assert out.strip().splitlines()[-1] == "ok"
    out = run(
        """
        import kffi, tvm_libs
        try:
            kffi.load_module({unlinked!r})
        except RuntimeError as e:
            message = str(e)
        else:
            raise AssertionError("loaded")
        assert "needs apache-tvm-ffi's runtime" in message, message
        assert "/nonexistent/libtvm_ffi.so" in message and "KFFI_TVM_RUNTIME=shim" in message
        assert not tvm_libs.libtvm_ffi_mapped()
        print("ok", kffi.to_kffi(lambda v: v + 1)(1))
    """,
        runtime="/nonexistent/libtvm_ffi.so",
        **libs,
    )
    assert out.strip().splitlines()[-1] == "ok 2"
