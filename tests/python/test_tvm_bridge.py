"""tests/python/test_tvm_bridge.py: libraries built for the TVM-FFI ABI, loaded through kffi.

The cases of tvm_bridge_cases.py run three ways:
- "shim": the library built without -ltvm_ffi, in a subprocess that never loads libtvm_ffi
  (KFFI_TVM_RUNTIME=shim, as in a process without apache-tvm-ffi installed), so its TVM-FFI
  imports bind to kffi's own runtime (checked: libtvm_ffi is not mapped, before and after);
- "tvm_ffi": the same library in this process after `import tvm_ffi`, so it binds to
  apache-tvm-ffi's runtime;
- "linked": the library built with -ltvm_ffi (a DT_NEEDED entry) in this process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import kffi
import pytest
import tvm_bridge_cases
import tvm_libs

pytestmark = pytest.mark.skipif(
    tvm_libs.tvm_ffi_dir() is None, reason="apache-tvm-ffi is not installed"
)

CASE_NAMES = sorted(tvm_bridge_cases.CASES)

# A child process whose TVM-FFI libraries run on kffi's shim even though apache-tvm-ffi is
# installed (without it, kffi would load the installed runtime for tvm_testlib: it defines
# apache-tvm-ffi's shared type-index statics).
SHIM_ENV = {**os.environ, "KFFI_TVM_RUNTIME": "shim"}


def run_on_shim(code: str) -> subprocess.CompletedProcess:
    """Runs code in a fresh interpreter where TVM-FFI libraries bind to kffi's shim."""
    return subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
        env=SHIM_ENV,
    )


@pytest.fixture(scope="session")
def tvm_testlib_paths():
    return {
        "unlinked": tvm_libs.build("tvm_testlib", linked=False),
        "linked": tvm_libs.build("tvm_testlib", linked=True),
    }


# Runs every case in a fresh interpreter that does not import tvm_ffi; prints one JSON object
# {"mapped_before", "mapped_after", "results": {case: "ok" | traceback}}.
_SHIM_SCRIPT = textwrap.dedent("""
    import json, sys, traceback
    sys.path.insert(0, {here!r})
    import tvm_libs
    mapped_before = tvm_libs.libtvm_ffi_mapped()
    import kffi, tvm_bridge_cases
    mod = kffi.load_module({path!r})
    results = {{}}
    for name, case in sorted(tvm_bridge_cases.CASES.items()):
        try:
            case(mod)
            results[name] = "ok"
        except BaseException:
            results[name] = traceback.format_exc()
    extra = {{}}
    extra["global_square"] = kffi.get_global_func("tvm_testlib.square")(7)
    with kffi.use_stream(0x1234):
        extra["env_stream"] = mod.env_stream(2, 0)
    extra["env_stream_outside"] = mod.env_stream(2, 0)
    print(json.dumps({{"mapped_before": mapped_before, "results": results, "extra": extra,
                      "mapped_after": tvm_libs.libtvm_ffi_mapped(),
                      "torch_loaded": "torch" in sys.modules}}))
""")


@pytest.fixture(scope="session")
def shim_run(tvm_testlib_paths):
    here = os.path.dirname(os.path.abspath(__file__))
    code = _SHIM_SCRIPT.format(here=here, path=str(tvm_testlib_paths["unlinked"]))
    proc = run_on_shim(code)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_shim_process_never_maps_libtvm_ffi(shim_run):
    assert shim_run["mapped_before"] is False
    assert shim_run["mapped_after"] is False


@pytest.mark.parametrize("case", CASE_NAMES)
def test_case_on_kffi_shim(shim_run, case):
    assert shim_run["results"][case] == "ok", shim_run["results"][case]


def test_shim_registers_globals_in_kffi(shim_run):
    # TVMFFIFunctionSetGlobal from the library's static initialiser reached kffi's registry.
    assert shim_run["extra"]["global_square"] == 49


def test_shim_library_reads_kffi_environment_stream(shim_run):
    assert shim_run["extra"]["env_stream"] == 0x1234
    assert shim_run["extra"]["env_stream_outside"] == 0


@pytest.fixture(scope="module")
def tvm_ffi():
    import tvm_ffi as module

    return module


@pytest.fixture(scope="module")
def bound_to_tvm_ffi(tvm_ffi, tvm_testlib_paths):
    return kffi.load_module(tvm_testlib_paths["unlinked"])


@pytest.fixture(scope="module")
def linked(tvm_ffi, tvm_testlib_paths):
    return kffi.load_module(tvm_testlib_paths["linked"])


@pytest.mark.parametrize("case", CASE_NAMES)
def test_case_bound_to_tvm_ffi(bound_to_tvm_ffi, case):
    assert tvm_libs.libtvm_ffi_mapped()
    tvm_bridge_cases.CASES[case](bound_to_tvm_ffi)


@pytest.mark.parametrize("case", CASE_NAMES)
def test_case_linked_with_libtvm_ffi(linked, case):
    tvm_bridge_cases.CASES[case](linked)


def test_library_bound_to_tvm_ffi_registers_there(tvm_ffi, bound_to_tvm_ffi, linked):
    # Its globals live in apache-tvm-ffi's registry; kffi's registry is separate.
    assert tvm_ffi.get_global_func("tvm_testlib.square")(5) == 25
    assert tvm_ffi.get_global_func("tvm_testlib_linked.square")(6) == 36
    assert kffi.get_global_func("tvm_testlib.square", allow_missing=True) is None


def test_same_library_through_both_loaders(tvm_ffi, tvm_testlib_paths, linked):
    theirs = tvm_ffi.load_module(str(tvm_testlib_paths["linked"]))
    assert theirs.add_int(1, 2) == linked.add_int(1, 2) == 3
    # A function of one loader handed to the other loader's functions.
    assert theirs.call_twice(linked.make_adder(2), 0) == 4
    assert linked.call_twice(theirs.make_adder(3), 0) == 6


def _cuda_torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    return torch


@pytest.mark.parametrize("flavour", ["unlinked", "linked"])
def test_gpu_library_sees_torchs_current_stream(tvm_ffi, tvm_testlib_paths, flavour):
    """Inside the call, TVMFFIEnvGetStream for the tensor's device is torch's current stream."""
    torch = _cuda_torch()
    mod = kffi.load_module(tvm_testlib_paths[flavour])
    x = torch.zeros(4, device="cuda")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        assert mod.stream_of(x) == s.cuda_stream
    assert mod.stream_of(x) == torch.cuda.current_stream().cuda_stream


def test_gpu_shim_library_sees_torchs_current_stream(tvm_testlib_paths):
    _cuda_torch()
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
        import torch, kffi, tvm_libs
        mod = kffi.load_module({str(tvm_testlib_paths["unlinked"])!r})
        x = torch.zeros(4, device="cuda")
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            assert mod.stream_of(x) == s.cuda_stream
        assert not tvm_libs.libtvm_ffi_mapped()
        print("ok")
    """)
    proc = run_on_shim(code)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr
