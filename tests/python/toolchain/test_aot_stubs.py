"""tests/python/toolchain/test_aot_stubs.py: kffi-stubgen / kffi.stubgen write .pyi stubs that mypy
accepts and that make mypy flag wrong calls; the header generator's C++ types; the package's own
typing (py.typed, _core.pyi); examples/aot runs."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import kffi
import pytest
from kffi.aot import parse_type, render_header
from kffi.toolchain.stubgen import python_type, render_stub

REPO = Path(__file__).resolve().parents[3]

AXPY = r"""
void axpy(kffi::TensorView y, kffi::ConstTensorView x, double alpha, kffi::Optional<double> beta,
          int32_t k) {
  float* out = y.data<float>();
  const float* in = x.data<float>();
  for (int64_t i = 0; i < x.shape()[0]; ++i)
    out[i] = static_cast<float>(alpha * in[i] + beta.value_or(0.0) + k);
}
"""


def _mypy_available() -> bool:
    return (
        subprocess.run([sys.executable, "-m", "mypy", "--version"], capture_output=True).returncode
        == 0
    )


needs_mypy = pytest.mark.skipif(not _mypy_available(), reason="needs mypy (pip install mypy)")


@pytest.fixture(scope="module")
def axpy():
    n = kffi.sym_int("n")
    return kffi.compile(
        AXPY,
        "axpy",
        kffi.fake_tensor("float32", (n,), mut=True),
        kffi.fake_tensor("float32", (n,)),
        kffi.Float64,
        kffi.Optional(kffi.Float64),
        kffi.Int32,
        options={"doc": "y = alpha * x + beta + k"},
    )


@pytest.fixture(scope="module")
def plain_module():
    return kffi.cpp.load_inline(
        "aot_stub_plain",
        cpp_sources=r"""
            double norm(kffi::Array<double> xs, kffi::Optional<double> scale) { return 0; }
            kffi::String greet(kffi::String who, bool loud) { return who; }
            int64_t count(kffi::Map<kffi::String, int64_t> m) { return 0; }
        """,
        functions={"norm": "The norm.", "greet": "", "count": ""},
    )


def test_stub_of_a_contract_export(axpy, tmp_path):
    lib = axpy.export(tmp_path / "libaxpy.so")
    text = kffi.stubgen(lib, tmp_path / "axpy.pyi")
    assert (tmp_path / "axpy.pyi").read_text() == text
    assert (
        "def axpy(y: TensorLike, x: TensorLike, alpha: float, beta: float | None = None, "
        "k: int) -> None:" not in text
    )  # a default is only given where every later parameter has one
    assert (
        "def axpy(y: TensorLike, x: TensorLike, alpha: float, beta: float | None, k: int) -> None:"
        in text
    )
    assert "Optional<" not in text and "Optional[" not in text.split('"""')[0]
    assert "from kffi.typing import TensorLike" in text
    assert "    y = alpha * x + beta + k" in text
    assert (
        "    Contract: y: Tensor([n], float32, device=cpu, contiguous, mut), x: Tensor([n], float32"
        in text
    )


def test_stub_of_plain_exports(plain_module):
    text = kffi.stubgen(plain_module)
    assert "def norm(xs: Sequence[float], scale: float | None = None) -> float:" in text
    assert "def greet(who: str, loud: bool) -> str:" in text
    assert "def count(m: Mapping[str, int]) -> int:" in text
    assert "from collections.abc import Mapping, Sequence" in text
    assert '    """norm(xs: Array<float>, scale: Optional<float>) -> float\n\n    The norm.' in text


def test_python_types():
    cases = {
        "Optional<float>": "float | None",
        "Optional[Tensor([n], float32)]": "TensorLike | None",
        "Tuple[int, float]": "tuple[int, float]",
        "Array<Tuple<int, str>>": "Sequence[tuple[int, str]]",
        "int32[0, 10]": "int",
        "Stream": "StreamLike",
        "Callable(int) -> int": "Callable[..., Any]",
        "Map<str, Array<int>>": "Mapping[str, Sequence[int]]",
        "something odd": "Any",
        "": "Any",
    }
    for text, want in cases.items():
        assert python_type(parse_type(text)) == want, text
    assert python_type(parse_type("Array<int>"), result=True) == "tuple[int, ...]"
    assert python_type(parse_type("Tensor"), result=True) == "Any"


def test_render_stub_keywords_and_missing_metadata():
    text = render_stub(
        {
            "lambda": {"name": "lambda", "params": [], "return": "None"},
            "f": {"name": "f", "params": [{"name": "from", "type": "int"}], "return": "int"},
            "g": None,
        }
    )
    assert "# 'lambda' is not a Python identifier" in text
    assert "def f(_arg0: int, /) -> int:" in text
    assert "def g(*args: Any, **kwargs: Any) -> Any: ..." in text


@needs_mypy
def test_mypy_accepts_the_stubs_and_flags_wrong_calls(axpy, tmp_path):
    lib = axpy.export(tmp_path / "libaxpy.so")
    kffi.stubgen(lib, tmp_path / "kernels.pyi")
    (tmp_path / "kernels.py").write_text(
        f"import kffi\naxpy = kffi.load_module({str(lib)!r}).axpy\n"
    )
    (tmp_path / "good.py").write_text(
        "import numpy as np\n"
        "from kernels import axpy\n"
        "x = np.zeros(4, np.float32)\n"
        "y = np.zeros(4, np.float32)\n"
        "axpy(y, x, 2.0, None, 3)\n"
        "axpy(y, x, alpha=2, beta=1.5, k=0)\n"
        "axpy(y, x, 1.0, 0.5, k=1)\n"
    )
    (tmp_path / "bad.py").write_text(
        "import numpy as np\n"
        "from kernels import axpy\n"
        "x = np.zeros(4, np.float32)\n"
        "axpy(x, x, 'two', None, 3)\n"
        "axpy(x, x, 2.0)\n"
        "axpy(x, [1.0], 2.0, None, 3)\n"
    )

    def mypy(*files):
        return subprocess.run(
            [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", *files],
            cwd=tmp_path,
            capture_output=True,
            text=True,
        )

    ok = mypy("kernels.pyi", "good.py")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    # The stubs run: the good calls work against the library.
    run = subprocess.run([sys.executable, "good.py"], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    bad = mypy("bad.py")
    assert bad.returncode == 1, bad.stdout
    out = bad.stdout
    assert (
        'bad.py:4: error: Argument 3 to "axpy" has incompatible type "str"; expected "float"' in out
    )
    assert 'bad.py:5: error: Missing positional arguments "beta", "k" in call to "axpy"' in out
    assert 'bad.py:6: error: Argument 2 to "axpy" has incompatible type "list[float]"' in out


def _stubgen_command() -> list:
    """The installed `kffi-stubgen` console script, else its entry point run by this Python."""
    exe = Path(sys.executable).parent / "kffi-stubgen"
    if exe.exists():
        return [str(exe)]
    return [
        sys.executable,
        "-c",
        "import sys; from kffi.toolchain.stubgen import main; sys.exit(main())",
    ]


def test_kffi_stubgen_command(axpy, tmp_path):
    lib = axpy.export(tmp_path / "libaxpy.so")
    cmd = _stubgen_command()
    proc = subprocess.run([*cmd, lib, "-o", tmp_path / "out.pyi"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert "def axpy(" in (tmp_path / "out.pyi").read_text()
    shown = subprocess.run([*cmd, lib], capture_output=True, text=True)
    assert shown.stdout == (tmp_path / "out.pyi").read_text()
    missing = subprocess.run([*cmd, tmp_path / "nope.so"], capture_output=True, text=True)
    assert missing.returncode == 1
    assert missing.stderr.startswith("kffi-stubgen: Cannot load kffi module: no such file")
    # kffi.stubgen is the function: the module is kffi.toolchain.stubgen, and importing it leaves the
    # name alone (no module shadowed by a function).
    import kffi.toolchain.stubgen

    assert callable(kffi.stubgen) and kffi.stubgen.__module__ == "kffi"


def test_header_types_and_entry_point_text():
    meta = {
        "name": "aot_add3",
        "params": [
            {"name": "a", "type": "int"},
            {"name": "b", "type": "int"},
            {"name": "c", "type": "int"},
        ],
        "return": "int",
        "doc": "",
    }
    header = render_header(meta, "x.o")
    # bench/cpp/bench_aot.cc times this exact entry point.
    assert (
        "inline int64_t aot_add3(int64_t a, int64_t b, int64_t c) {\n"
        "  return kffi::Module::InvokeSafeCall<&__kffi_aot_add3>(a, b, c).cast<int64_t>();\n}"
        in header
    )
    meta = {
        "name": "mixed",
        "params": [
            {"name": "t", "type": "Tensor([n], float32)", "kind": "tensor"},
            {"name": "k", "type": "int32[0, 8]", "kind": "int"},
            {"name": "f", "type": "float32", "kind": "float"},
            {"name": "s", "type": "Stream", "kind": "stream"},
            {"name": "p", "type": "Tuple[int, float]", "kind": "tuple"},
            {
                "name": "o",
                "type": "Optional[Tensor([n], float32)]",
                "optional": True,
                "default": None,
            },
        ],
        "return": "Tensor",
        "contract": "t: Tensor([n], float32), ... */ tricky",
        "doc": "line one\nline */ two",
    }
    header = render_header(meta, "mixed.o")
    assert (
        "inline kffi::Tensor mixed(kffi::ConstTensorView t, int32_t k, float f, void* s, "
        "kffi::Tuple<int64_t, double> p, kffi::Optional<kffi::ConstTensorView> o = std::nullopt) {"
        in header
    )
    # Comment terminators in the texts cannot end the header's comment early.
    assert "... * / tricky" in header and " * line * / two" in header


@pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")
def test_generated_header_compiles_as_c_and_cpp(tmp_path):
    meta = {
        "name": "mixed",
        "params": [
            {"name": "t", "type": "Tensor", "kind": "tensor"},
            {"name": "xs", "type": "Array<float>"},
            {"name": "o", "type": "Optional<int>", "default": None},
        ],
        "return": "str",
    }
    (tmp_path / "mixed.h").write_text(render_header(meta, "mixed.o"))
    (tmp_path / "a.cc").write_text('#include "mixed.h"\n#include "mixed.h"\n')
    (tmp_path / "b.c").write_text('#include "mixed.h"\n')
    inc = "-I" + kffi.libinfo.include_dir()
    for cmd in (
        ["c++", "-std=c++17", "-Wall", "-Wextra", "-Werror", inc, "-c", "a.cc"],
        ["cc", "-std=c99", "-Wall", "-Wextra", "-Werror", inc, "-c", "b.c"],
    ):
        proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr


def test_package_ships_typing_files():
    pkg = Path(kffi.__file__).parent
    assert (pkg / "py.typed").exists()
    assert (pkg / "_core.pyi").exists()
    assert (pkg / "typing.py").exists()


@needs_mypy
def test_mypy_reads_the_package_with_its_extension_stub(tmp_path):
    (tmp_path / "use.py").write_text(
        "import kffi\n"
        "m: kffi.Module = kffi.system_lib()\n"
        "names: list[str] = m.functions()\n"
        "v: int = kffi._core.runtime_version()[0]\n"
        "kffi._core.load_object(3)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary", "use.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1, proc.stdout
    assert proc.stdout.strip().splitlines() == [
        'use.py:5: error: Argument 1 to "load_object" has incompatible type "int"; '
        'expected "str"  [arg-type]'
    ]


@pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")
def test_examples_aot_runs(tmp_path):
    env = dict(os.environ, PYTHON=sys.executable, KFFI_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run(
        ["bash", str(REPO / "examples" / "aot" / "run.sh"), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout.splitlines()
    assert "exported add_one.o + add_one.h, libadd_one.so, add_one.pyi" in out
    assert "add_one: 2 3 4" in out
    assert "ValueError: y.shape[0]: expected n = 3 (as x.shape[0]), got 2" in out
    assert "system_lib add_one: 3 4 5" in out
    assert "load_object add_one: [1.0, 2.0, 3.0]" in out
    if _mypy_available():
        assert any(
            line.startswith(
                'mypy line 4: error: Missing positional argument "y" in call to "add_one"'
            )
            for line in out
        ), out
