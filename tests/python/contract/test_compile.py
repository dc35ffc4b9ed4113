"""tests/python/contract/test_compile.py: kffi.compile: contracts (rendered in
test_contract_render.py) compiled, checked per call in compiled code (every message row of
docs/contracts), exported and loaded back with the contract intact."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import kffi
import kffi.contract
import kffi.cpp
import numpy as np
import pytest

needs_contracts = pytest.mark.skipif(
    not kffi.contract.has_contract_support(),
    reason="this kffi has no KFFI_EXPORT_CONTRACT (kffi/contract.h): kffi.compile cannot build",
)


# ---------------------------------------------------------------------------------------------
# Compiled functions.
# ---------------------------------------------------------------------------------------------

ADD_ONE = r"""
void add_one(kffi::ConstTensorView a, kffi::TensorView b) {
  const float* x = a.data<float>();
  float* y = b.data<float>();
  for (int64_t i = 0; i < a.numel(); ++i) y[i] = x[i] + 1.0f;
}
"""

ADD_SIG = (
    "`add_one(a: Tensor([n0], float32, align=16, contiguous), "
    "b: Tensor([n0], float32, align=16, contiguous, mut))`"
)

# Tensors that NumPy cannot make: a byte_offset, or a CPU device index other than 0.
ODD_TENSORS = r"""
#include <cstdlib>
#include <vector>
namespace {
struct Holder {
  DLManagedTensor managed;
  std::vector<int64_t> shape;
  void* data;
};
}  // namespace
kffi::Tensor odd_tensor(int64_t n, int64_t device_id, int64_t byte_offset) {
  auto* h = new Holder;
  h->shape = {n};
  h->data = std::aligned_alloc(64, static_cast<size_t>((n * 4 + byte_offset) / 64 + 1) * 64);
  DLTensor& t = h->managed.dl_tensor;
  t.data = h->data;
  t.device = DLDevice{kDLCPU, static_cast<int32_t>(device_id)};
  t.ndim = 1;
  t.dtype = DLDataType{kDLFloat, 32, 1};
  t.shape = h->shape.data();
  t.strides = nullptr;
  t.byte_offset = static_cast<uint64_t>(byte_offset);
  h->managed.manager_ctx = h;
  h->managed.deleter = [](DLManagedTensor* self) {
    auto* holder = static_cast<Holder*>(self->manager_ctx);
    std::free(holder->data);
    delete holder;
  };
  return kffi::Tensor::FromDLPack(&h->managed);
}
"""


@pytest.fixture(scope="module")
def module_cache(tmp_path_factory):
    """One build cache for this file's compiled functions (each is built once)."""
    root = tmp_path_factory.mktemp("compile-cache")
    old = os.environ.get("KFFI_CACHE_DIR")
    os.environ["KFFI_CACHE_DIR"] = str(root)
    yield root
    if old is None:
        os.environ.pop("KFFI_CACHE_DIR", None)
    else:
        os.environ["KFFI_CACHE_DIR"] = old


def _compile_add_one(**kw):
    n = kffi.sym_int(divisibility=16, width=32)
    return kffi.compile(
        ADD_ONE,
        "add_one",
        kffi.fake_tensor("float32", (n,), align=16, device="any"),
        kffi.fake_tensor("float32", (n,), align=16, device="any", mut=True),
        **kw,
    )


@pytest.fixture(scope="module")
def add_one(module_cache):
    return _compile_add_one()


@pytest.fixture(scope="module")
def odd(module_cache):
    return kffi.cpp.load_inline(
        "odd_tensors", cpp_sources=ODD_TENSORS, functions=["odd_tensor"]
    ).odd_tensor


def _message(call) -> tuple[type, str]:
    try:
        call()
    except (TypeError, ValueError) as e:
        return type(e), str(e)
    return None, "no error"


@needs_contracts
def test_compiled_function_runs_on_numpy_and_keeps_contract(add_one):
    a = np.arange(128, dtype=np.float32)
    b = np.zeros(128, dtype=np.float32)
    assert add_one(a, b) is None
    np.testing.assert_array_equal(b, a + 1)
    assert isinstance(add_one, kffi.Function)
    assert add_one.contract == (
        "a: Tensor([n0], float32, align=16, contiguous), "
        "b: Tensor([n0], float32, align=16, contiguous, mut); n0: int32 % 16"
    )
    assert Path(add_one.library_path).is_file()


@needs_contracts
def test_compiled_function_takes_torch_and_jax_arrays(add_one):
    torch = pytest.importorskip("torch")
    a = torch.arange(64, dtype=torch.float32)
    b = torch.zeros(64)
    add_one(a, b)
    assert torch.equal(b, a + 1)
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return
    out = np.zeros(16, np.float32)
    # The kernel is a CPU loop: put the JAX array on the CPU (JAX defaults to a GPU if it has one).
    x = jax.device_put(jnp.arange(16, dtype=jnp.float32), jax.devices("cpu")[0])
    add_one(x, out)
    np.testing.assert_array_equal(out, np.arange(16, dtype=np.float32) + 1)


@needs_contracts
def test_seed_messages_count_type_shape_divisibility_alignment(add_one):
    a = np.zeros(129, dtype=np.float32)[:128]
    b = np.zeros(129, dtype=np.float32)[:128]
    assert a.ctypes.data % 16 == 0
    assert _message(lambda: add_one(a)) == (
        TypeError,
        f"add_one: expected 2 arguments, got 1 ({ADD_SIG})",
    )
    assert _message(lambda: add_one(a, 1)) == (
        TypeError,
        f"b: expected Tensor, got int (argument #1 of {ADD_SIG})",
    )
    assert _message(lambda: add_one(a, b[:112])) == (
        ValueError,
        f"b.shape[0]: expected n0 = 128 (as a.shape[0]), got 112 (argument #1 of {ADD_SIG})",
    )
    assert _message(lambda: add_one(a[:126], b[:126])) == (
        ValueError,
        f"a.shape[0]: expected n0 divisible by 16, got 126 (argument #0 of {ADD_SIG})",
    )
    # off by one element: the first element is 4 bytes past a 16-byte boundary
    full_a = np.zeros(129, dtype=np.float32)
    full_b = np.zeros(129, dtype=np.float32)
    assert _message(lambda: add_one(full_a[1:], full_b[1:])) == (
        ValueError,
        f"a: expected data aligned to 16 bytes, got data aligned to 4 bytes "
        f"(argument #0 of {ADD_SIG})",
    )
    assert _message(lambda: add_one(a, full_b[1:])) == (
        ValueError,
        f"b: expected data aligned to 16 bytes, got data aligned to 4 bytes "
        f"(argument #1 of {ADD_SIG})",
    )
    shifted = np.zeros(132, dtype=np.float32)[4:]  # 16 bytes in: aligned again
    assert _message(lambda: add_one(shifted, shifted)) == (None, "no error")


@needs_contracts
def test_int32_symbol_range(add_one):
    huge = np.broadcast_to(np.zeros(1, dtype=np.float32), (1 << 32,))  # no memory behind it
    assert _message(lambda: add_one(huge, huge)) == (
        ValueError,
        f"a.shape[0]: expected n0 in int32 range [-2147483648, 2147483647], got "
        f"4294967296 (argument #0 of {ADD_SIG})",
    )


STRIDED = r"""
// b = a + 1, reading a through its stride (as a kernel for contiguous=False must).
void add_one_strided(kffi::ConstTensorView a, kffi::TensorView b) {
  const float* x = a.data<float>();
  float* y = b.data<float>();
  for (int64_t i = 0; i < a.numel(); ++i) y[i] = x[i * a.stride(0)] + 1.0f;
}
"""


@needs_contracts
def test_fake_tensors_are_compact_unless_they_opt_out(module_cache):
    """Issue 23 item 4: a default fake tensor refuses a strided view with the contract's layout
    message (the kernel would read a[:n] instead of a[::2]); contiguous=False accepts it."""
    n = kffi.sym_int("n")
    compact = kffi.compile(
        ADD_ONE,
        "add_one",
        kffi.fake_tensor("float32", (n,)),
        kffi.fake_tensor("float32", (n,), mut=True),
    )
    assert compact.contract == (
        "a: Tensor([n], float32, device=cpu, contiguous), "
        "b: Tensor([n], float32, device=cpu, contiguous, mut); n: int64"
    )
    a = np.arange(32, dtype=np.float32)
    b = np.zeros(16, np.float32)
    kind, message = _message(lambda: compact(a[::2], b))
    assert kind is ValueError  # the layout message: names a.strides, expected and received
    assert "a.strides" in message and "expected contiguous, got [2]" in message, message
    assert not b.any()  # the kernel never ran
    kind, message = _message(lambda: compact(a[:16], np.zeros(32, np.float32)[::2]))
    assert kind is ValueError and "b.strides" in message and "contiguous" in message, message
    compact(a[:16], b)  # contiguous views pass
    np.testing.assert_array_equal(b, np.arange(16) + 1)

    any_strides = kffi.compile(
        STRIDED,
        "add_one_strided",
        kffi.fake_tensor("float32", (n,), contiguous=False),
        kffi.fake_tensor("float32", (n,), mut=True),
    )
    assert any_strides.contract.startswith("a: Tensor([n], float32, device=cpu), ")
    any_strides(a[::2], b)
    np.testing.assert_array_equal(b, np.arange(0, 32, 2) + 1)


CATALOGUE = r"""
void check_me(kffi::ConstTensorView x, kffi::ConstTensorView y) {}
"""


@pytest.fixture(scope="module")
def check_me(module_cache):
    n = kffi.sym_int("n")
    return kffi.compile(
        CATALOGUE,
        "check_me",
        kffi.fake_tensor(("float32", "float64"), (2, n), offset0=True, contiguous=True),
        kffi.fake_tensor("float32", (n,), device="cuda"),
        param_names=["x", "y"],
    )


@needs_contracts
def test_tensor_field_messages_in_catalogue_order(check_me):
    sig = (
        "`check_me(x: Tensor([2, n], float32|float64, device=cpu, offset0, contiguous), "
        "y: Tensor([n], float32, device=cuda, contiguous))`"
    )
    tail0, tail1 = f" (argument #0 of {sig})", f" (argument #1 of {sig})"
    y = np.zeros(5, np.float32)  # wrong device, but checked after x
    assert _message(lambda: check_me(np.zeros((2, 5, 1), np.int8), y)) == (
        ValueError,
        f"x.ndim: expected 2, got 3{tail0}",
    )
    assert _message(lambda: check_me(np.zeros((2, 5), np.int8), y)) == (
        TypeError,
        f"x.dtype: expected float32|float64, got int8{tail0}",
    )
    assert _message(lambda: check_me(np.zeros((5, 2), np.float32).T, y)) == (
        ValueError,
        f"x.strides: expected contiguous, got [1, 2] for shape [2, 5]{tail0}",
    )
    assert _message(lambda: check_me(np.zeros((2, 5), np.float64), y)) == (
        ValueError,
        f"y.device: expected cuda, got cpu{tail1}",
    )
    assert _message(lambda: check_me(np.zeros((3, 5), np.float32), y)) == (
        ValueError,
        f"x.shape[0]: expected 2, got 3{tail0}",
    )


OFFSETS = r"""
void first(kffi::ConstTensorView a, kffi::ConstTensorView b) {}
"""


@pytest.fixture(scope="module")
def first(module_cache):
    n = kffi.sym_int()
    return kffi.compile(
        OFFSETS,
        "first",
        kffi.fake_tensor("float32", (n,), offset0=True),
        kffi.fake_tensor("float32", (n,)),
    )


@needs_contracts
def test_byte_offset_and_device_index_messages(first, odd):
    sig = (
        "`first(a: Tensor([n0], float32, device=cpu, offset0, contiguous), "
        "b: Tensor([n0], float32, device=cpu, contiguous))`"
    )
    assert _message(lambda: first(odd(4, 0, 0), odd(4, 0, 64)))[0] is None
    assert _message(lambda: first(odd(4, 0, 64), odd(4, 0, 0))) == (
        ValueError,
        f"a.byte_offset: expected 0, got 64 (argument #0 of {sig})",
    )
    assert _message(lambda: first(odd(4, 0, 0), odd(4, 1, 0))) == (
        ValueError,
        f"b.device.index: expected 0 (as a.device.index), got 1 (argument #1 of {sig})",
    )


MANY = r"""
#include <cstdint>
double many(kffi::Optional<kffi::ConstTensorView> bias,
            kffi::Tuple<kffi::Tensor, kffi::Tensor, double> pair, int32_t k, void* stream,
            bool flag, double scale) {
  return std::get<2>(pair) + k + (bias.has_value() ? 100 : 0) + (stream != nullptr ? 1000 : 0) +
         (flag ? 10000 : 0) + scale;
}
"""


@pytest.fixture(scope="module")
def many(module_cache):
    n = kffi.sym_int("n", divisibility=4)
    m = kffi.sym_int(width=32)
    return kffi.compile(
        MANY,
        "many",
        kffi.Optional(kffi.fake_tensor("float32", (n,))),
        (
            kffi.fake_tensor("float32", (m, n), contiguous=False),  # any strides
            kffi.fake_tensor("float32", (m, n)),  # compact (the default)
            kffi.Float64,
        ),
        kffi.Int32.range(0, 1024),
        kffi.fake_stream(),
        kffi.Bool,
        kffi.Float32.range(0.0, 1.5),
        outputs=[kffi.fake_tensor("float32", (m * 2, (n + 1) // 2))],
        options={"doc": "Adds things up."},
    )


MANY_SIG = (
    "`many(bias: Optional[Tensor([n], float32, device=cpu, contiguous)], pair: Tuple[Tensor([n0, n], "
    "float32, device=cpu), Tensor([n0, n], float32, device=cpu, contiguous), float64], "
    "k: int32[0, 1024], flag: bool, scale: float32[0.0, 1.5])`"
)


@needs_contracts
def test_optional_tuple_scalars_and_env_stream(many):
    x = np.zeros((3, 8), np.float32)
    # the env stream of CPU tensors is NULL; it is no call argument
    assert many(None, (x, x, 2.5), 3, False, 0.5) == 2.5 + 3 + 0.5
    assert many(np.zeros(8, np.float32), (x, x, 1.0), 3, True, 0.0) == 1 + 3 + 100 + 10000
    assert _message(lambda: many(1, (x, x, 2.5), 3, True, 1.0)) == (
        TypeError,
        f"bias: expected Tensor or None, got int (argument #0 of {MANY_SIG})",
    )
    assert _message(lambda: many(np.zeros(4, np.float32), (x, x, 2.5), 3, True, 1.0)) == (
        ValueError,
        f"pair[0].shape[1]: expected n = 4 (as bias.shape[0]), got 8 "
        f"(in argument #1 of {MANY_SIG})",
    )
    assert _message(lambda: many(None, (x, x[:, :4], 2.5), 3, True, 1.0)) == (
        ValueError,
        f"pair[1].shape[1]: expected n = 8 (as pair[0].shape[1]), got 4 "
        f"(in argument #1 of {MANY_SIG})",
    )
    assert _message(lambda: many(None, (x, 1, 2.0), 3, True, 1.0)) == (
        TypeError,
        f"pair[1]: expected Tensor, got int (in argument #1 of {MANY_SIG})",
    )
    assert _message(lambda: many(None, (x, x), 3, True, 1.0)) == (
        TypeError,
        f"pair: expected Tuple of 3 elements, got tuple of 2 elements (argument #1 of {MANY_SIG})",
    )
    assert _message(lambda: many(None, (x, x, 2.5), 2000, True, 1.0)) == (
        ValueError,
        f"k: expected a value in range [0, 1024], got 2000 (argument #2 of {MANY_SIG})",
    )
    assert _message(lambda: many(None, (x, x, 2.5), 3, True, 2.0)) == (
        ValueError,
        f"scale: expected a value in range [0.0, 1.5], got 2.0 (argument #4 of {MANY_SIG})",
    )
    assert _message(lambda: many(None, (x, x, 2.5), 3, True)) == (
        TypeError,
        f"many: expected 5 arguments, got 4 ({MANY_SIG})",
    )
    torch = pytest.importorskip("torch")
    assert many(None, (torch.zeros(3, 8), x, 2.5), 3, False, 0.5) == 6.0  # mixed frameworks


@needs_contracts
def test_metadata_has_contract_outputs_symbols_and_signature(many):
    meta = kffi.load_module(many.library_path).metadata("many")
    assert meta["contract"] == many.contract
    assert meta["doc"] == "Adds things up."
    assert [p["name"] for p in meta["params"]] == ["bias", "pair", "k", "flag", "scale"]
    assert meta["outputs"] == [
        {
            "name": "",
            "type": "Tensor([n0 * 2, (n + 1) // 2], float32, device=cpu)",
            "shape": ["n0 * 2", "(n + 1) // 2"],
            "shape_rpn": [["n0", 2, "*"], ["n", 1, "+", 2, "//"]],
            "dtype": "float32",
        }
    ]
    assert meta["mutates"] == []
    assert meta["params"][0] == {
        "name": "bias",
        "type": "Optional[Tensor([n], float32, device=cpu, contiguous)]",
        "kind": "tensor",
        "optional": True,
        "default": None,
        "shape": ["n"],
        "dtypes": ["float32"],
        "device": "cpu",
        "mutable": False,
    }
    assert meta["params"][1]["kind"] == "tuple"
    assert [e["kind"] for e in meta["params"][1]["elems"]] == ["tensor", "tensor", "float"]
    assert meta["params"][1]["elems"][0]["shape"] == ["n0", "n"]
    assert meta["params"][2] == {
        "name": "k",
        "type": "int32[0, 1024]",
        "kind": "int",
        "optional": False,
        "range": [0, 1024],
    }
    assert meta["params"][4]["range"] == [0.0, 1.5]
    assert [
        kffi.contract.eval_shape_rpn(d, {"n": 7, "n0": 3}) for d in meta["outputs"][0]["shape_rpn"]
    ] == [6, 4]
    assert meta["symbols"] == [
        {"name": "n", "width": "int64", "divisibility": 4},
        {"name": "n0", "width": "int32", "divisibility": 1},
    ]
    assert meta["env_stream"] is True
    assert str(many.__signature__) == (
        "(bias: 'Optional[Tensor([n], float32, device=cpu, contiguous)]', pair: 'Tuple[Tensor([n0, n], "
        "float32, device=cpu), Tensor([n0, n], float32, device=cpu, contiguous), float64]', "
        "k: 'int32[0, 1024]', flag: 'bool', scale: 'float32[0.0, 1.5]') -> 'float'"
    )
    assert many.__doc__.startswith("many(bias: Optional[") and "Adds things up." in many.__doc__


@needs_contracts
def test_export_and_load_in_a_fresh_process(add_one, tmp_path):
    path = add_one.export(tmp_path / "libadd_one.so")
    assert path == str(tmp_path / "libadd_one.so")
    code = f"""
        import json, numpy as np, kffi
        f = kffi.load_module({path!r}).add_one
        a = np.arange(32, dtype=np.float32); b = np.zeros(32, dtype=np.float32)
        f(a, b)
        try:
            f(a, b[:16])
        except ValueError as e:
            err = str(e)
        print(json.dumps({{"b": b.tolist(), "meta": kffi.load_module({path!r}).metadata("add_one"),
                           "err": err}}))
    """
    env = {k: v for k, v in os.environ.items() if k != "KFFI_CACHE_DIR"}
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["b"] == [float(i + 1) for i in range(32)]
    assert out["meta"]["contract"] == add_one.contract
    assert out["err"] == (
        f"b.shape[0]: expected n0 = 32 (as a.shape[0]), got 16 (argument #1 of {ADD_SIG})"
    )
    # export into a folder keeps the library's own name
    again = add_one.export(tmp_path)
    assert Path(again).parent == tmp_path and Path(again).name.startswith("add_one_")


CPP_LOADER = r"""
#include <kffi/kffi.h>
#include <iostream>
int main(int argc, char** argv) {
  kffi::Module mod = kffi::Module::Load(argv[1]);
  std::cout << *mod.GetFunctionMetadata("add_one") << "\n";
  try {
    mod.GetFunctionRequired("add_one")(1, 2);
  } catch (const kffi::Error& e) {
    std::cout << e.kind() << ": " << e.message() << "\n";
  }
  return 0;
}
"""


@needs_contracts
def test_cpp_module_load_sees_the_contract(add_one, tmp_path):
    cxx = os.environ.get("CXX") or "c++"
    if shutil.which(cxx.split()[0]) is None:
        pytest.skip("no C++ compiler")
    lib = add_one.export(tmp_path / "libadd_one.so")
    src = tmp_path / "loader.cc"
    src.write_text(CPP_LOADER)
    flags = subprocess.run(
        [sys.executable, "-m", "kffi.config", "--cxxflags", "--ldflags", "--libs"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    exe = tmp_path / "loader"
    subprocess.run([*cxx.split(), str(src), "-o", str(exe), *flags], check=True)
    out = subprocess.run(
        [str(exe), lib], capture_output=True, text=True, check=True, timeout=60
    ).stdout.splitlines()
    assert json.loads(out[0])["contract"] == add_one.contract
    assert out[1] == f"TypeError: a: expected Tensor, got int (argument #0 of {ADD_SIG})"


@needs_contracts
def test_compile_cache_hit_in_a_fresh_process_starts_no_compiler(tmp_path):
    code = f"""
        import json, time, kffi, kffi.cpp
        start = time.perf_counter()
        n = kffi.sym_int()
        f = kffi.compile({ADD_ONE!r}, "add_one", kffi.fake_tensor("float32", (n,)),
                         kffi.fake_tensor("float32", (n,), mut=True))
        ms = (time.perf_counter() - start) * 1e3
        print(json.dumps({{"ms": ms, "invocations": kffi.cpp.get_compiler_invocations(),
                           "contract": f.contract}}))
    """
    env = {**os.environ, "KFFI_CACHE_DIR": str(tmp_path / "cache")}
    runs = [
        subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        for _ in range(2)
    ]
    for r in runs:
        assert r.returncode == 0, r.stderr
    built, hit = (json.loads(r.stdout) for r in runs)
    assert built["invocations"] >= 2  # --version and the compile and the link
    assert hit["invocations"] == 0
    assert (
        hit["contract"] == built["contract"] == "a: Tensor([n0], float32, device=cpu, contiguous), "
        "b: Tensor([n0], float32, device=cpu, contiguous, mut); n0: int64"
    )
    assert "kffi.cpp: building" in runs[0].stderr and "building" not in runs[1].stderr
    print(
        f"\nfresh-process cache hit of kffi.compile: {hit['ms']:.2f} ms "
        f"(cold build {built['ms']:.0f} ms)"
    )


@needs_contracts
def test_in_process_cache_hit_starts_no_compiler(add_one):
    before = kffi.cpp.get_compiler_invocations()
    again = _compile_add_one()
    assert kffi.cpp.get_compiler_invocations() == before
    assert again.library_path == add_one.library_path
    assert again.contract == add_one.contract


@needs_contracts
def test_contract_that_does_not_fit_the_cpp_parameters_fails_at_compile(module_cache):
    with pytest.raises(ValueError, match="Invalid contract for `takes_int`"):
        kffi.compile("void takes_int(int64_t x) {}", "takes_int", kffi.fake_tensor("float32", (4,)))


@needs_contracts
def test_malformed_contract_in_a_library_fails_load_module(module_cache):
    src = (
        "#include <kffi/contract.h>\n"
        "static void Two(kffi::ConstTensorView a, kffi::ConstTensorView b) {}\n"
        'KFFI_EXPORT_CONTRACT(fine, Two, "a: Tensor([n], float32), b: Tensor([n], float32)");\n'
        'KFFI_EXPORT_CONTRACT(bad, Two, "a: Tensor([n], float32), b: Tensor([n], flaot32)");\n'
    )
    with pytest.raises(ValueError) as info:
        kffi.cpp.load_inline("malformed_contract_lib", cpp_sources=src, quiet=True)
    msg = str(info.value)
    assert msg.startswith("Cannot load module `")
    assert "Invalid contract for `bad` at column " in msg and "flaot32" in msg
    # Every later load of the same file fails the same way (the library is never unloaded).
    path = msg.split("`")[1]
    with pytest.raises(ValueError, match="Invalid contract for `bad`"):
        kffi.load_module(path)


@needs_contracts
def test_compile_errors_and_bad_options(module_cache):
    with pytest.raises(kffi.cpp.BuildError, match="undeclared"):
        kffi.compile("void broken(int64_t x) { undeclared(); }", "broken", kffi.Int64)
    with pytest.raises(TypeError, match=r"unknown options \['cxx'\]"):
        kffi.compile("void f() {}", "f", options={"cxx": "g++"})
    with pytest.raises(ValueError, match="name is a C\\+\\+ identifier"):
        kffi.compile("void f() {}", "_f")


@needs_contracts
def test_build_options_as_keywords_or_options_and_depends(module_cache, tmp_path):
    """kffi.compile takes kffi.cpp.build's keywords as well as options={...} (not both for one
    option), and depends= keys a header the source includes."""
    header = tmp_path / "step.h"
    header.write_text("#pragma once\nconstexpr int64_t kStep = 1;\n")
    src = '#include "step.h"\nint64_t step(int64_t x) { return x + kStep; }\n'
    kw = {"extra_include_paths": [str(tmp_path)], "depends": [str(header)], "quiet": True}
    assert kffi.compile(src, "step", kffi.Int64, **kw)(1) == 2
    header.write_text("#pragma once\nconstexpr int64_t kStep = 5;\n")
    assert kffi.compile(src, "step", kffi.Int64, options=kw)(1) == 6
    with pytest.raises(TypeError, match=r"options \['quiet'\] given both"):
        kffi.compile(src, "step", kffi.Int64, options={"quiet": True}, quiet=True)
    with pytest.raises(TypeError, match=r"unknown options \['opt'\]"):
        kffi.compile(src, "step", kffi.Int64, opt=3)


@needs_contracts
@pytest.mark.skipif(not kffi.cpp.nvcc_available(), reason="no nvcc found")
def test_cuda_source_compiles_with_cuda_devices_by_default(module_cache):
    src = r"""
    __global__ void AddOneKernel(const float* a, float* b, int64_t n) {
      int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
      if (i < n) b[i] = a[i] + 1.0f;
    }
    void add_one_cuda(kffi::ConstTensorView a, kffi::TensorView b, void* stream) {
      int64_t n = a.numel();
      AddOneKernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0,
                     static_cast<cudaStream_t>(stream)>>>(a.data<float>(), b.data<float>(), n);
    }
    """
    n = kffi.sym_int(divisibility=4)
    f = kffi.compile(
        src,
        "add_one_cuda",
        kffi.fake_tensor("float32", (n,), align=16),
        kffi.fake_tensor("float32", (n,), align=16, mut=True),
        kffi.fake_stream(),
    )
    assert f.contract == (
        "a: Tensor([n0], float32, device=cuda, align=16, contiguous), "
        "b: Tensor([n0], float32, device=cuda, align=16, contiguous, mut), stream: EnvStream; "
        "n0: int64 % 4"
    )
    x = np.zeros(8, np.float32)
    assert _message(lambda: f(x, x)) == (
        ValueError,
        "a.device: expected cuda, got cpu (argument #0 of `add_one_cuda(a: Tensor([n0], "
        "float32, device=cuda, align=16, contiguous), b: Tensor([n0], float32, device=cuda, "
        "align=16, contiguous, mut))`)",
    )
    try:
        import torch

        has_gpu = torch.cuda.is_available()
    except ImportError:
        has_gpu = False
    if not has_gpu:
        pytest.skip("compiled and checked; no GPU to run the kernel on")
    a = torch.arange(1024, dtype=torch.float32, device="cuda")
    b = torch.empty_like(a)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        f(a, b)  # on the caller's current stream (the environment stream)
    s.synchronize()
    assert torch.equal(b, a + 1)


CUDA_FILL = r"""
__global__ void FillKernel(float* y, float v, int64_t n) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = v;
}
void fill_cuda(kffi::TensorView y, float v, void* stream) {
  int64_t n = y.numel() + y.size(-1) * 0 + BODY;
  FillKernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0,
               static_cast<cudaStream_t>(stream)>>>(y.data<float>(), v, n);
}
"""


def _fill(body: str):
    return kffi.compile(
        CUDA_FILL.replace("BODY", body),
        "fill_cuda",
        kffi.fake_tensor("float32", (kffi.sym_int("n"),), mut=True),
        kffi.Float32,
        kffi.fake_stream(),
    )


def _built_sources(f) -> dict[str, str]:
    folder = os.path.dirname(f.library_path)
    return {
        name: open(os.path.join(folder, name), encoding="utf-8").read()
        for name in os.listdir(folder)
        if name.endswith((".cpp", ".cu"))
    }


@needs_contracts
@pytest.mark.skipif(not kffi.cpp.nvcc_available(), reason="no nvcc found")
def test_cuda_source_compiles_against_the_view_header_with_its_export_beside_it(module_cache):
    # A CUDA source that names only the views is compiled with kffi/tensor_view.h alone, and its
    # contract export goes into a C++ file that declares the function.
    f = _fill("0")
    sources = _built_sources(f)
    assert sorted(sources) == ["fill_cuda.cpp", "fill_cuda_cuda.cu"]
    assert "void fill_cuda(kffi::TensorView y, float v, void* stream);" in sources["fill_cuda.cpp"]
    assert "KFFI_EXPORT_CONTRACT_DOC(fill_cuda" in sources["fill_cuda.cpp"]
    assert "KFFI_EXPORT" not in sources["fill_cuda_cuda.cu"]
    assert f.contract.startswith(
        "y: Tensor([n], float32, device=cuda, contiguous, mut), v: float32"
    )
    x = np.zeros(4, np.float32)
    assert _message(lambda: f(x, 1.0))[0] is ValueError  # checked in the C++ file's export


@needs_contracts
@pytest.mark.skipif(not kffi.cpp.nvcc_available(), reason="no nvcc found")
@pytest.mark.parametrize(
    "body",
    [
        "static_cast<int64_t>(y.shape().ToVector().size()) * 0",  # compiles only with the whole
        "static_cast<int64_t>(kffi::Tensor().defined())",  # a name the view header lacks
    ],
)
def test_cuda_source_that_needs_more_than_the_views_builds_whole(module_cache, body):
    f = _fill(body)
    sources = _built_sources(f)
    assert sorted(sources) == ["fill_cuda_cuda.cu"]  # one file, with <kffi/kffi.h>
    assert "KFFI_EXPORT_CONTRACT_DOC(fill_cuda" in sources["fill_cuda_cuda.cu"]


@needs_contracts
@pytest.mark.skipif(not kffi.cpp.nvcc_available(), reason="no nvcc found")
def test_cuda_source_with_an_error_reports_it_from_the_whole_build(module_cache):
    with pytest.raises(kffi.cpp.BuildError) as e:
        _fill("undeclared_thing")
    assert "undeclared_thing" in str(e.value)
