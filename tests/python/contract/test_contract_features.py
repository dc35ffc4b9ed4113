"""tests/python/contract/test_contract_features.py: contract features beyond the catalogue of
test_compile.py: `mut` tensors, explicit stream parameters, structured metadata (read through
kffi.load_module and kffi.compile), output shapes from `shape_rpn`, text outside the Basic
Multilingual Plane in docstrings and bodies, the limits checked before any compiler runs, unknown
dtypes and hostile contracts failing load_module, and the C++ parameter names kept by
kffi.cpp.load_inline."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import ctypes
import os

import kffi
import kffi.contract
import kffi.cpp
import numpy as np
import pytest

needs_contracts = pytest.mark.skipif(
    not kffi.contract.has_contract_support(),
    reason="this kffi has no KFFI_EXPORT_CONTRACT (kffi/contract.h): kffi.compile cannot build",
)


@pytest.fixture(scope="module")
def module_cache(tmp_path_factory):
    root = tmp_path_factory.mktemp("contract-features-cache")
    old = os.environ.get("KFFI_CACHE_DIR")
    os.environ["KFFI_CACHE_DIR"] = str(root)
    yield root
    if old is None:
        os.environ.pop("KFFI_CACHE_DIR", None)
    else:
        os.environ["KFFI_CACHE_DIR"] = old


def _message(call):
    try:
        call()
    except (TypeError, ValueError) as e:
        return type(e), str(e)
    return None, "no error"


# ---------------------------------------------------------------------------------------------
# Rendering and the limits checked in Python (no compiler).
# ---------------------------------------------------------------------------------------------


def test_mut_streams_and_expressions_render():
    n = kffi.sym_int("n")
    text = kffi.contract.render_contract(
        kffi.fake_tensor("float32", (n,), mut=True),
        kffi.fake_tensor("float32", (n,)),
        kffi.fake_stream(env=False),
        kffi.fake_stream(),
        param_names=["y", "x", "s", "env"],
        outputs=[kffi.fake_tensor("float32", (n % 4, -n, -(n - 1), 7 % (n + 1)))],
    )
    assert text == (
        "y: Tensor([n], float32, contiguous, mut), x: Tensor([n], float32, contiguous), "
        "s: Stream, env: EnvStream -> Tensor([n % 4, -n, -(n - 1), 7 % (n + 1)], float32); "
        "n: int64"
    )
    assert repr(kffi.fake_stream(env=False)) == "kffi.fake_stream(env=False)"
    assert (
        repr(kffi.fake_tensor("float32", (2,), mut=True))
        == "kffi.fake_tensor(Tensor([2], float32, contiguous, mut))"
    )


# Output-shape expressions, built from symbols exactly as from ints.
SHAPE_FORMS = [
    lambda n, m: n * (m % 3),
    lambda n, m: n * (m // 2),
    lambda n, m: n * (m * 2),
    lambda n, m: n + (m - 1),
    lambda n, m: n - (m - 1),
    lambda n, m: (n % 4) * m,
    lambda n, m: -(n * m),
    lambda n, m: (-n) * m,
    lambda n, m: n // -3,
    lambda n, m: 7 - -n,
    lambda n, m: n % (m + 1) // 2,
    lambda n, m: 5 % n,
]
SHAPE_VALUES = ({"n": 7, "m": 5}, {"n": -9, "m": 4}, {"n": 3, "m": -2})


def _rendered_shapes(n, m):
    x = kffi.fake_tensor("float32", (n, m))
    out = kffi.fake_tensor("float32", [f(n, m) for f in SHAPE_FORMS])
    text = kffi.contract.render_contract(x, outputs=[out])
    return text.split("-> Tensor([")[1].split("], float32)")[0].split(", ")


def test_expressions_keep_their_meaning_when_rendered():
    rendered = _rendered_shapes(kffi.sym_int("n"), kffi.sym_int("m"))
    assert rendered[:4] == ["n * (m % 3)", "n * (m // 2)", "n * m * 2", "n + m - 1"]
    # The grammar's operators are Python's: the rendered text evaluates as the expression did.
    for values in SHAPE_VALUES:
        expected = [f(values["n"], values["m"]) for f in SHAPE_FORMS]
        assert [eval(t, {}, dict(values)) for t in rendered] == expected


def test_mut_and_streams_only_where_the_grammar_allows_them():
    t = kffi.fake_tensor("float32", (2,), mut=True)
    with pytest.raises(ValueError, match="a tensor inside a tuple cannot be mut=True"):
        kffi.contract.render_contract((t, kffi.Int32))
    with pytest.raises(
        ValueError, match="outputs are written by definition; mut=True is for parameters"
    ):
        kffi.contract.render_contract(kffi.Int32, outputs=[t])
    with pytest.raises(TypeError, match="a stream cannot be Optional"):
        kffi.Optional(kffi.fake_stream(env=False))
    with pytest.raises(TypeError, match="a stream cannot be inside a tuple"):
        kffi.contract.render_contract((kffi.Int32, kffi.fake_stream(env=False)))


def test_integers_beyond_int64_and_too_many_dimensions_fail_before_compiling(module_cache):
    before = kffi.cpp.get_compiler_invocations()
    big = 1 << 63
    with pytest.raises(
        ValueError,
        match=r"kffi.fake_tensor: a dimension must fit int64 "
        r"\[-9223372036854775808, 9223372036854775807\], got "
        r"9223372036854775808",
    ):
        kffi.fake_tensor("float32", (big,))
    with pytest.raises(ValueError, match="kffi.fake_tensor: a stride must fit int64"):
        kffi.fake_tensor("float32", (2,), strides=(big,))
    with pytest.raises(ValueError, match="33 dimensions; a contract tensor has at most 32"):
        kffi.fake_tensor("float32", (1,) * 33)
    with pytest.raises(ValueError, match="divisibility must fit int64"):
        kffi.sym_int(divisibility=big)
    with pytest.raises(ValueError, match=r"Int64.range: a bound must fit int64"):
        kffi.Int64.range(0, big)
    with pytest.raises(
        ValueError,
        match=r"Int32.range: a bound must fit int32 "
        r"\[-2147483648, 2147483647\], got 2147483648",
    ):
        kffi.Int32.range(0, 1 << 31)
    with pytest.raises(ValueError, match="an integer in a shape expression must fit int64"):
        kffi.sym_int() * big
    with pytest.raises(ValueError, match="the contract is .* bytes long; at most 65536"):
        kffi.contract.render_contract(*[kffi.Int32] * 8000)
    # kffi.compile refuses them before running anything.
    with pytest.raises(ValueError, match="at most 32"):
        kffi.compile(
            "void f(kffi::ConstTensorView x) {}", "f", kffi.fake_tensor("float32", (1,) * 40)
        )
    assert kffi.cpp.get_compiler_invocations() == before


def test_eval_shape_rpn_follows_python_semantics():
    ev = kffi.contract.eval_shape_rpn
    assert ev(["n", 3, "//"], {"n": -4}) == -2
    assert ev(["n", 3, "%"], {"n": -4}) == 2
    assert ev(["n", -3, "%"], {"n": 5}) == -1
    assert ev(["n", "neg", 1, "+"], {"n": 5}) == -4
    assert ev([7], {}) == 7
    # One evaluator serves the public API and the framework integrations (kffi.contract._abstract).
    assert ev is kffi.contract._abstract.eval_shape_rpn
    assert ev(["n", 2, "*"], {"n": np.int64(3)}) == 6
    with pytest.raises(ValueError, match="symbol 'm' is not bound by any input \\(bound: n\\)"):
        ev(["m"], {"n": 1})
    with pytest.raises(ValueError, match="division by zero"):
        ev(["n", 0, "//"], {"n": 1})
    with pytest.raises(ValueError, match="modulo by zero"):
        ev(["n", 0, "%"], {"n": 1})
    with pytest.raises(ValueError, match="int64 overflow"):
        ev(["n", "n", "*"], {"n": 1 << 40})
    with pytest.raises(ValueError, match="int64 overflow"):
        ev(["n"], {"n": 1 << 63})
    with pytest.raises(ValueError, match="operator '\\+' needs two operands"):
        ev(["n", "+"], {"n": 1})
    with pytest.raises(ValueError, match="symbol 'n' is bound to 2.5, not an integer"):
        ev(["n"], {"n": 2.5})
    with pytest.raises(ValueError, match="shape_rpn must be a list of tokens, got str"):
        ev("n", {"n": 1})


def test_c_string_literal_takes_any_text():
    lit = kffi.cpp.c_string_literal
    assert lit('a"b\\c\n?') == '"a\\"b\\\\c\\n\\?"'
    assert lit("é😀") == '"\\303\\251\\360\\237\\230\\200"'
    assert lit("\x01\x7f") == '"\\001\\177"'
    with pytest.raises(ValueError, match="cannot write .* as UTF-8"):
        lit("\ud800")


def test_inline_builds_pre_include_kffi_h_but_the_contract_compiler():
    # load_inline's pre-included headers are exactly those of <kffi/kffi.h> but <kffi/contract.h>
    # (kffi.compile includes <kffi/kffi.h>); the CUDA helpers stay opt-in as before.
    import re
    from pathlib import Path

    from kffi import libinfo

    text = (Path(libinfo.include_dir()) / "kffi" / "kffi.h").read_text()
    included = re.findall(r"^#include <(kffi/[\w/.]+)>", text, flags=re.MULTILINE)
    assert sorted(kffi.cpp.PRE_INCLUDES) == sorted(
        h for h in included if h not in ("kffi/contract.h", "kffi/cuda.h")
    )


def test_cpp_param_names_is_public_in_kffi_cpp():
    assert kffi.cpp.cpp_param_names("void f(int a, float* b) {}", "f") == ["a", "b"]
    assert kffi.contract.cpp_param_names is kffi.cpp.cpp_param_names


# ---------------------------------------------------------------------------------------------
# Compiled.
# ---------------------------------------------------------------------------------------------

SCALE = r"""
// y = x * factor 😀 (a comment outside the BMP)
void scale(kffi::TensorView y, kffi::ConstTensorView x, double factor) {
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) yp[i] = static_cast<float>(xp[i] * factor);
}
std::string smile() { return "😀 ünïcödé"; }
"""

DOC = 'Scales 𝑥 into 𝑦 😀 ("quoted", \\backslash, ??= no trigraph)'


@pytest.fixture(scope="module")
def scale(module_cache):
    n = kffi.sym_int("n")
    return kffi.compile(
        SCALE,
        "scale",
        kffi.fake_tensor("float32", (n,), mut=True),
        kffi.fake_tensor("float32", (n,)),
        kffi.Float64,
        outputs=[kffi.fake_tensor("float32", (n * 2 % 5, -n))],
        options={"doc": DOC},
    )


@needs_contracts
def test_mut_parameter_writes_and_is_in_the_metadata(scale):
    x = np.arange(4, dtype=np.float32)
    y = np.zeros(4, np.float32)
    scale(y, x, 2.0)
    np.testing.assert_array_equal(y, x * 2)
    scale(y, np.arange(4, dtype=np.float32), 1.0)  # a non-mut input may be anything
    meta = kffi.load_module(scale.library_path).metadata("scale")
    assert meta["mutates"] == ["y"]
    assert meta["params"][0] == {
        "name": "y",
        "type": "Tensor([n], float32, device=cpu, contiguous, mut)",
        "kind": "tensor",
        "optional": False,
        "shape": ["n"],
        "dtypes": ["float32"],
        "device": "cpu",
        "mutable": True,
    }
    assert meta["params"][1]["mutable"] is False
    assert meta["params"][2] == {
        "name": "factor",
        "type": "float64",
        "kind": "float",
        "optional": False,
    }
    assert meta["doc"] == DOC and DOC in scale.__doc__
    out = meta["outputs"][0]
    assert out["shape"] == ["n * 2 % 5", "-n"]
    assert out["shape_rpn"] == [["n", 2, "*", 5, "%"], ["n", "neg"]]
    assert [kffi.contract.eval_shape_rpn(d, {"n": 4}) for d in out["shape_rpn"]] == [3, -4]


@needs_contracts
def test_read_only_array_for_a_mut_parameter_is_a_value_error(scale):
    x = np.arange(4, dtype=np.float32)
    y = np.zeros(4, np.float32)
    y.flags.writeable = False
    sig = (
        "`scale(y: Tensor([n], float32, device=cpu, contiguous, mut), x: Tensor([n], float32, "
        "device=cpu, contiguous), factor: float64)`"
    )
    assert _message(lambda: scale(y, x, 2.0)) == (
        ValueError,
        f"y: expected a writable tensor (the parameter is declared `mut`), got a "
        f"read-only tensor (argument #0 of {sig})",
    )
    assert not y.any()


@needs_contracts
def test_text_outside_the_bmp_in_docstrings_and_bodies(module_cache):
    mod = kffi.cpp.load_inline(
        "non_bmp_lib", cpp_sources=SCALE, functions={"smile": "Returns 😀 and ünïcödé 𝑥."}
    )
    assert mod.smile() == "😀 ünïcödé"
    assert mod.metadata("smile")["doc"] == "Returns 😀 and ünïcödé 𝑥."


STREAMS = r"""
#include <cstdint>
int64_t with_stream(kffi::ConstTensorView x, void* stream) {
  return x.numel() * 1000000 + static_cast<int64_t>(reinterpret_cast<intptr_t>(stream));
}
"""


@pytest.fixture(scope="module")
def with_stream(module_cache):
    n, m = kffi.sym_int("n"), kffi.sym_int("m")
    return kffi.compile(
        STREAMS,
        "with_stream",
        kffi.fake_tensor("float32", (n, m)),
        kffi.fake_stream(env=False),
        outputs=[kffi.fake_tensor("float32", [f(n, m) for f in SHAPE_FORMS])],
    )


@needs_contracts
def test_explicit_stream_parameter_takes_ints_none_and_pointers(with_stream):
    assert with_stream.contract.startswith(
        "x: Tensor([n, m], float32, device=cpu, contiguous), stream: Stream -> Tensor(["
    )
    x = np.zeros((1, 3), np.float32)
    assert with_stream(x, 0x1234) == 3000000 + 0x1234
    assert with_stream(x, None) == 3000000
    assert with_stream(x, ctypes.c_void_p(0x42)) == 3000000 + 0x42
    sig = "`with_stream(x: Tensor([n, m], float32, device=cpu, contiguous), stream: Stream)`"
    assert _message(lambda: with_stream(x, "stream")) == (
        TypeError,
        f"stream: expected Stream (an opaque pointer, an int handle or None), got str "
        f"(argument #1 of {sig})",
    )
    assert _message(lambda: with_stream(x, 1.5)) == (
        TypeError,
        f"stream: expected Stream (an opaque pointer, an int handle or None), got "
        f"float (argument #1 of {sig})",
    )
    meta = kffi.load_module(with_stream.library_path).metadata("with_stream")
    assert meta["params"][1] == {
        "name": "stream",
        "type": "Stream",
        "kind": "stream",
        "optional": False,
        "default": None,
    }
    assert meta["env_stream"] is False


@needs_contracts
def test_cpp_reads_rendered_shapes_as_python_evaluates_them(with_stream):
    # The C++ parser's reverse Polish notation, evaluated by eval_shape_rpn, gives what Python
    # gives for the expressions the shapes were built from.
    rpn = kffi.load_module(with_stream.library_path).metadata("with_stream")["outputs"][0]
    assert len(rpn["shape_rpn"]) == len(SHAPE_FORMS)
    for values in SHAPE_VALUES:
        expected = [f(values["n"], values["m"]) for f in SHAPE_FORMS]
        assert [kffi.contract.eval_shape_rpn(d, values) for d in rpn["shape_rpn"]] == expected


@needs_contracts
def test_unnamed_parameters_are_arg0_arg1(module_cache):
    f = kffi.compile(
        "double add2(double, double b) { return b; }", "add2", kffi.Float64, kffi.Float64
    )
    assert f.contract == "arg0: float64, arg1: float64"
    assert str(f.__signature__).startswith("(arg0: 'float64', arg1: 'float64')")
    assert _message(lambda: f("x", 1.0)) == (
        TypeError,
        "arg0: expected float64, got str (argument #0 of `add2(arg0: float64, arg1: float64)`)",
    )


@needs_contracts
def test_load_inline_keeps_the_cpp_parameter_names(module_cache):
    src = r"""
    #include <cstdint>
    int64_t axpy(int64_t alpha, int64_t x, int64_t y) { return alpha * x + y; }
    int64_t unnamed(int64_t, int64_t y) { return y; }
    """
    mod = kffi.cpp.load_inline("names_lib", cpp_sources=src, functions=["axpy", "unnamed"])
    assert [p["name"] for p in mod.metadata("axpy")["params"]] == ["alpha", "x", "y"]
    assert [p["name"] for p in mod.metadata("unnamed")["params"]] == ["arg0", "arg1"]
    assert str(mod.axpy.__signature__).startswith("(alpha: 'int', x: 'int', y: 'int')")
    assert mod.axpy(2, 3, 4) == 10


BAD_LIBS = {
    "float23": 'KFFI_EXPORT_CONTRACT(f, F, "x: Tensor([n], float23)");',
    "int3": 'KFFI_EXPORT_CONTRACT(f, F, "x: Tensor([n], int3)");',
}


@needs_contracts
@pytest.mark.parametrize("dtype", sorted(BAD_LIBS))
def test_unknown_dtypes_fail_load_module(module_cache, dtype):
    src = "#include <kffi/contract.h>\nstatic void F(kffi::ConstTensorView) {}\n" + BAD_LIBS[dtype]
    with pytest.raises(ValueError) as info:
        kffi.cpp.load_inline(f"bad_dtype_{dtype}", cpp_sources=src, quiet=True)
    msg = str(info.value)
    assert msg.startswith("Cannot load module `")
    assert f"Invalid contract for `f` at column 16: unknown dtype `{dtype}`" in msg


@needs_contracts
def test_a_library_with_a_deeply_nested_contract_fails_load_module(module_cache):
    src = r"""
    #include <kffi/contract.h>
    #include <string>
    static void G(kffi::Any) {}
    static const std::string kText = [] {
      std::string s = "x: ";
      for (int i = 0; i < 6000; ++i) s += "Tuple[";
      s += "int";
      for (int i = 0; i < 6000; ++i) s += "]";
      return s;
    }();
    KFFI_EXPORT_CONTRACT(g, G, kText.c_str());
    """
    with pytest.raises(
        ValueError,
        match=r"Invalid contract for `g` at column \d+: Optional and "
        r"Tuple types nest more than 16 deep",
    ):
        kffi.cpp.load_inline("deep_contract", cpp_sources=src, quiet=True)


@needs_contracts
@pytest.mark.skipif(not kffi.cpp.nvcc_available(), reason="no nvcc found")
def test_cuda_kernel_on_an_explicit_stream(module_cache):
    src = r"""
    __global__ void AddOneKernel(const float* a, float* b, int64_t n) {
      int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
      if (i < n) b[i] = a[i] + 1.0f;
    }
    void add_one_on(kffi::ConstTensorView a, kffi::TensorView b, void* stream) {
      int64_t n = a.numel();
      AddOneKernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0,
                     static_cast<cudaStream_t>(stream)>>>(a.data<float>(), b.data<float>(), n);
      KFFI_CUDA_CHECK(cudaGetLastError());
    }
    """
    n = kffi.sym_int()
    f = kffi.compile(
        src,
        "add_one_on",
        kffi.fake_tensor("float32", (n,)),
        kffi.fake_tensor("float32", (n,), mut=True),
        kffi.fake_stream(env=False),
    )
    assert f.contract == (
        "a: Tensor([n0], float32, device=cuda, contiguous), b: Tensor([n0], float32, "
        "device=cuda, contiguous, mut), stream: Stream; n0: int64"
    )
    x = np.zeros(8, np.float32)
    assert _message(lambda: f(x, x, None))[1].startswith("a.device: expected cuda, got cpu")
    try:
        import torch

        has_gpu = torch.cuda.is_available()
    except ImportError:
        has_gpu = False
    if not has_gpu:
        pytest.skip("compiled and checked; no GPU to run the kernel on")
    a = torch.arange(1 << 20, dtype=torch.float32, device="cuda")
    b = torch.empty_like(a)
    s = torch.cuda.Stream()
    f(a, b, s.cuda_stream)  # a raw handle (int): the kernel runs on that stream
    s.synchronize()
    assert torch.equal(b, a + 1)
    b.zero_()
    f(a, b, None)  # None: the default stream
    torch.cuda.synchronize()
    assert torch.equal(b, a + 1)
