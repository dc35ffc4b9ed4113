"""tests/python/kffi_tvm/test_tvm_bridge.py: libraries built for the TVM-FFI ABI, loaded through
kffi.

The cases of tvm_bridge_cases.py run three ways:
- "shim": the library built without -ltvm_ffi, in a subprocess that never loads libtvm_ffi
  (KFFI_TVM_RUNTIME=shim, as in a process without apache-tvm-ffi installed), so its TVM-FFI
  imports bind to kffi's own runtime (checked: libtvm_ffi is not mapped, before and after);
- "tvm_ffi": the same library in this process after `import tvm_ffi`, so it binds to
  apache-tvm-ffi's runtime;
- "linked": the library built with -ltvm_ffi (a DT_NEEDED entry) in this process.

The cases of tensors passed to `ffi::Tensor` parameters also run on a build without metadata
(apache-tvm-ffi's default), where kffi cannot see which parameters those are.
"""
# SPDX-License-Identifier: Apache-2.0

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
from conftest import SUPPORT

# sys.path of the fresh interpreters: this folder (tvm_bridge_cases) and support/ (tvm_libs).
PATHS = [os.path.dirname(os.path.abspath(__file__)), str(SUPPORT)]

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
    sys.path[:0] = {paths!r}
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
    code = _SHIM_SCRIPT.format(paths=PATHS, path=str(tvm_testlib_paths["unlinked"]))
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


# ---- tensors for `ffi::Tensor` parameters --------------------------------------------------------

OWNED_CASES = [n for n in CASE_NAMES if n.startswith(("owned_", "kept_", "reused_", "layernorm_"))]
ALL_PARAMS = 2**64 - 1


@pytest.fixture(scope="session")
def nometa_path():
    return tvm_libs.build("tvm_testlib", linked=False, metadata=False)


@pytest.fixture(scope="module")
def nometa(tvm_ffi, nometa_path):
    return kffi.load_module(nometa_path)


def test_owned_tensor_params_follow_the_metadata(bound_to_tvm_ffi, nometa):
    mod = bound_to_tvm_ffi
    assert mod.add_one._owned_tensor_args == 0  # TensorView parameters: borrowed, as before
    assert mod.three_tensors._owned_tensor_args == 0
    assert mod.owned_sum._owned_tensor_args == 0b1
    assert mod.mixed_sum._owned_tensor_args == 0b10  # (TensorView, Tensor)
    assert mod.layernorm._owned_tensor_args & 0b1111 == 0b1111
    assert mod.add_int._owned_tensor_args == 0b11  # no tensor, no cost: only a tensor there pays
    # Without metadata nothing says which parameters borrow: all of them get owning Tensors.
    assert nometa.metadata("owned_sum") is None
    assert nometa.owned_sum._owned_tensor_args == ALL_PARAMS
    assert nometa.add_one._owned_tensor_args == ALL_PARAMS
    # Functions a library returns have no metadata either.
    assert mod.make_adder(1)._owned_tensor_args == ALL_PARAMS
    # kffi's own functions take borrowed tensors.
    assert kffi.to_kffi(lambda: None)._owned_tensor_args == 0


@pytest.mark.parametrize("case", OWNED_CASES)
def test_owned_case_without_metadata(nometa, case):
    tvm_bridge_cases.CASES[case](nometa)


def test_owned_cases_without_metadata_on_shim(nometa_path):
    code = textwrap.dedent(f"""
        import sys, traceback
        sys.path[:0] = {PATHS!r}
        import kffi, tvm_bridge_cases, tvm_libs
        mod = kffi.load_module({str(nometa_path)!r})
        assert mod.owned_sum._owned_tensor_args == {ALL_PARAMS}
        for name in {OWNED_CASES!r}:
            tvm_bridge_cases.CASES[name](mod)
        assert not tvm_libs.libtvm_ffi_mapped()
        print("ok")
    """)
    proc = run_on_shim(code)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stdout + proc.stderr


def test_borrowed_tensor_to_an_owning_parameter_is_a_view_for_the_call(bound_to_tvm_ffi):
    """A caller that passes a borrowed tensor (a C++ caller; here a Python function told not to
    own) still reaches an `ffi::Tensor` parameter: the bridge makes a Tensor viewing it for the
    call, as kffi does for its own kffi::Tensor parameters."""
    np = pytest.importorskip("numpy")
    f = bound_to_tvm_ffi["owned_sum"]  # a fresh function object: its own setting
    f._owned_tensor_args = 0
    assert f(np.arange(4, dtype=np.float32)) == 6.0
    assert bound_to_tvm_ffi.kept_use_count() == 0


def test_with_contract_keeps_owning_parameters(bound_to_tvm_ffi):
    np = pytest.importorskip("numpy")
    import gc
    import weakref

    n = kffi.sym_int("n")
    keep = kffi.with_contract(
        bound_to_tvm_ffi.keep_tensor,
        kffi.fake_tensor("float32", (n,)),
        param_names=["x"],
        device="cpu",
    )
    assert keep._owned_tensor_args == 0b1
    x = np.array([1.0, 2.0], np.float32)
    alive = weakref.ref(x)
    keep(x)
    del x
    gc.collect()
    assert alive() is not None and bound_to_tvm_ffi.kept_sum() == 3.0
    bound_to_tvm_ffi.release_kept()
    gc.collect()
    assert alive() is None
    with pytest.raises(ValueError, match="keep_tensor"):  # the contract's check: never kept
        keep(np.zeros((2, 2), np.float32))
    assert bound_to_tvm_ffi.kept_use_count() == 0


def test_torch_tensor_kept_alive_through_storage_changes(bound_to_tvm_ffi):
    """The kept Tensor holds the torch tensor, not a copy of its fields: in-place changes of the
    caller's shape do not change what the library holds."""
    torch = pytest.importorskip("torch")
    mod = bound_to_tvm_ffi
    x = torch.arange(6, dtype=torch.float32)
    mod.keep_tensor(x)
    x.unsqueeze_(0)  # the caller's tensor changes shape in place
    assert mod.kept_sum() == 15.0
    k = mod.kept_tensor()
    assert k.shape == (6,)
    del k
    mod.release_kept()


def _owned_workload(mod, nometa, np, torch, n):
    """Calls that make owning Tensors (and one the library keeps), both tensor kinds."""
    a = np.ones(16, np.float32)
    b = np.zeros(16, np.float32)
    t = torch.ones(16)
    u = torch.zeros(16)
    for _ in range(n):
        mod.owned_sum(a)
        mod.owned_add_one(t, u)
        mod.owned_identity(a)
        mod.mixed_sum(a, t)
        nometa.owned_add_one(a, b)
        mod.keep_tensor(np.ones(4, np.float32))
        mod.keep_tensor(torch.ones(4))
    mod.release_kept()


def test_owned_tensors_leak_nothing(bound_to_tvm_ffi, nometa):
    """The leak checks of test_leaks.py over calls that make owning Tensors: reference counts of
    the arguments, Python memory and native memory stay flat."""
    np = pytest.importorskip("numpy")
    torch = pytest.importorskip("torch")
    import gc
    import tracemalloc

    from malloc_heap import mallinfo_used

    mod = bound_to_tvm_ffi
    x, t = np.ones(8, np.float32), torch.ones(8)
    before = (sys.getrefcount(x), sys.getrefcount(t))
    for _ in range(5000):
        mod.owned_sum(x)
        mod.owned_sum(t)
        mod.owned_identity(t)
    assert (sys.getrefcount(x), sys.getrefcount(t)) == before

    _owned_workload(mod, nometa, np, torch, 500)  # warm caches
    gc.collect()
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        _owned_workload(mod, nometa, np, torch, 3000)
        gc.collect()
        middle = tracemalloc.get_traced_memory()[0]
        _owned_workload(mod, nometa, np, torch, 3000)
        gc.collect()
        end = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    # One leaked object per call would be >= 16 bytes * 21,000 calls per window.
    assert end - middle < 64 * 1024, (middle - start, end - middle)
    if mallinfo_used() is not None:  # everything malloc'ed: Tensor objects, their shapes
        gc.collect()
        start = mallinfo_used()
        _owned_workload(mod, nometa, np, torch, 3000)
        gc.collect()
        middle = mallinfo_used()
        _owned_workload(mod, nometa, np, torch, 3000)
        gc.collect()
        end = mallinfo_used()
        assert end - middle < 256 * 1024, (middle - start, end - middle)
    assert mod.kept_use_count() == 0


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
        sys.path[:0] = {PATHS!r}
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


def test_gpu_flashinfer_layernorm_through_kffi():
    """FlashInfer's layernorm takes `ffi::Tensor` parameters: through kffi it runs as it does
    through apache-tvm-ffi (flashinfer.norm.layernorm), on torch CUDA tensors."""
    torch = _cuda_torch()
    pytest.importorskip("flashinfer")
    from flashinfer.jit.norm import gen_norm_module
    from flashinfer.norm import layernorm as flashinfer_layernorm

    spec = gen_norm_module()
    if not hasattr(spec, "get_library_path"):
        pytest.skip("this FlashInfer does not build TVM-FFI libraries")
    spec.build_and_load()  # compiled (or its AOT library found) and loaded by tvm_ffi
    mod = kffi.load_module(spec.get_library_path())
    x = torch.randn(4, 256, device="cuda", dtype=torch.bfloat16)
    gamma = torch.randn(256, device="cuda", dtype=torch.float32)
    beta = torch.randn(256, device="cuda", dtype=torch.float32)
    out = torch.empty_like(x)
    mod.layernorm(out, x, gamma, beta, 1e-5)
    torch.testing.assert_close(out, flashinfer_layernorm(x, gamma, beta, 1e-5), rtol=0, atol=0)
    ref = torch.nn.functional.layer_norm(x.float(), (256,), gamma, beta, 1e-5).to(x.dtype)
    torch.testing.assert_close(out, ref, rtol=2e-2, atol=2e-2)


def test_gpu_cuda_tensor_to_an_owning_parameter(bound_to_tvm_ffi):
    """A torch CUDA tensor passed to an `ffi::Tensor` parameter: an owning Tensor of the same
    device memory, kept alive while the library holds it."""
    torch = _cuda_torch()
    import gc
    import weakref

    mod = bound_to_tvm_ffi
    x = torch.arange(8, dtype=torch.float32, device="cuda")
    assert mod.owned_identity(x) is x
    alive = weakref.ref(x)
    ptr = x.data_ptr()
    mod.keep_tensor(x)
    del x
    gc.collect()
    assert alive() is not None
    kept = torch.from_dlpack(mod.kept_tensor())
    assert kept.data_ptr() == ptr and kept.device.type == "cuda"
    assert kept.tolist() == list(range(8))
    del kept
    mod.release_kept()
    gc.collect()
    assert alive() is None
