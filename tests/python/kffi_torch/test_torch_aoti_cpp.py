"""tests/python/kffi_torch/test_torch_aoti_cpp.py: a C++ program with no Python runs an AOTInductor
package (.pt2) of a model with kffi ops, after kffi::torch::RegisterOps registers them from the
loaded kffi library (RegisterOps(module, ns)) or from the manifest kffi.torch.save_ops wrote;
without the registration kffi::torch::CheckPackage names the missing ops.

The runner (examples/torch_aoti/runner.cc) is built with its CMakeLists.txt (find_package(Torch),
find_package(kffi), kffi::torch, in either order), as docs/deploy.md shows, with no Python on the
PATH (kffi::torch is the glue kffi was built with), and cached in kffi's build cache, keyed by its
sources, kffi's CMake package, the glue library, torch's version, the order and the compiler, so
only a cold run configures and compiles it (about half a minute each on a 2-core host). The CPU
package is test_torch_export.py's (cached there too). The CUDA variant packages its own model and
is skipped without a CUDA torch and nvcc."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import kffi
import kffi.cpp
import kffi.torch
from test_torch_export import package  # noqa: F401  (the CPU .pt2, a cached fixture)
from toolchain_support import env_without_python, real_cmake
from torch_export_cases import NAMESPACE, eager, library
from torch_support import tk  # noqa: F401  (tests/python/kffi_torch/torch_kernels.cc, loaded)

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE.parents[2] / "examples" / "torch_aoti"
RUNNER_SOURCE = EXAMPLE / "runner.cc"
TORCH_INCLUDE = Path(torch.__file__).parent / "include"


def _compiler():
    exe = shutil.which(os.environ.get("CXX", "c++"))
    if exe is None:
        pytest.skip("needs a C++ compiler")
    if not (TORCH_INCLUDE / "torch" / "csrc" / "inductor" / "aoti_package").is_dir():
        pytest.skip("the installed torch ships no AOTInductor C++ headers")
    return exe


def _cmake():
    exe = real_cmake()
    if exe is None:
        pytest.skip("needs cmake")
    return exe


def build_runner(kffi_first: bool, tmp: Path) -> Path:
    """examples/torch_aoti built with CMake against the torch wheel's libtorch and kffi::torch,
    finding kffi first or Torch first, with no Python on the PATH."""
    import torch.utils
    from kffi import libinfo
    from kffi.torch import _glue

    cxx, cmake = _compiler(), _cmake()
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout
    cmake_files = sorted(Path(libinfo.cmake_dir()).glob("*.cmake"))
    key = hashlib.sha256(
        "\0".join(
            [
                RUNNER_SOURCE.read_text(),
                (EXAMPLE / "CMakeLists.txt").read_text(),
                *(f.read_text() for f in cmake_files),
                _glue.glue().name,
                torch.__version__,
                str(kffi_first),
                cxx,
                version,
            ]
        ).encode()
    ).hexdigest()[:16]
    path = Path(kffi.cpp.cache_dir()) / "aoti_runner" / f"torch_aoti_runner_{key}"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        build = path.with_name(f"{path.name}.{os.getpid()}.build")
        env = env_without_python(tmp / "bin")
        try:
            for cmd in (
                [
                    cmake,
                    "-S",
                    str(EXAMPLE),
                    "-B",
                    str(build),
                    f"-DCMAKE_CXX_COMPILER={os.path.realpath(cxx)}",
                    "-DCMAKE_BUILD_TYPE=Release",
                    f"-DCMAKE_PREFIX_PATH={torch.utils.cmake_prefix_path}",
                    f"-Dkffi_DIR={libinfo.cmake_dir()}",
                    f"-DKFFI_FIRST={'ON' if kffi_first else 'OFF'}",
                ],
                [cmake, "--build", str(build), "-j2"],
            ):
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
                assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
            (build / "runner").replace(path)  # atomic: a killed build leaves no runner behind
        finally:
            shutil.rmtree(build, ignore_errors=True)
    return path


@pytest.fixture(scope="module")
def runner(tmp_path_factory) -> Path:
    """The runner, Torch found first."""
    return build_runner(False, tmp_path_factory.mktemp("runner"))


@pytest.fixture(scope="module")
def manifest(tmp_path_factory) -> Path:
    ops = kffi.load_module(library()).torch_ops(NAMESPACE)
    return Path(kffi.torch.save_ops(tmp_path_factory.mktemp("aoti") / "model.kffi_ops", ops))


def run(runner, manifest, model, values, tmp_path, device="cpu"):
    x = tmp_path / "x.bin"
    x.write_bytes(torch.tensor(values, dtype=torch.float32).numpy().tobytes())
    return subprocess.run(
        [str(runner), str(manifest), str(model), str(x), device],
        capture_output=True,
        text=True,
        timeout=300,
    )


def outputs(proc) -> list:
    assert proc.returncode == 0, proc.stderr[-4000:]
    return [float(v) for v in proc.stdout.split()]


def test_runner_has_no_python(runner):
    # Built by CMake with kffi::torch: libkffi, libtorch and the glue kffi was built with (from
    # the installed package, not the build cache), and no libpython.
    from kffi.torch import _glue

    ldd = subprocess.run(["ldd", str(runner)], capture_output=True, text=True, check=True).stdout
    assert "libkffi.so" in ldd and "libtorch_cpu" in ldd and "libkffi_torch.so" in ldd
    assert "libpython" not in ldd
    # The glue library is needed by file name, so a deployed runner finds it by its rpath.
    (glue,) = [line.split() for line in ldd.splitlines() if "libkffi_torch.so" in line]
    assert glue[0] == "libkffi_torch.so" and glue[1] == "=>"
    assert Path(glue[2]).resolve() == Path(_glue.glue().name).resolve()
    assert Path(glue[2]).parent.parent.parent == Path(kffi.torch.__file__).parent


def test_runner_builds_with_kffi_found_first(package, tmp_path):  # noqa: F811
    """find_package(kffi) before find_package(Torch), no Python on the PATH: the same program."""
    runner = build_runner(True, tmp_path)
    x = [0.5, -1.5, 2.0, 4.0, 8.0]
    proc = run(runner, f"module:{NAMESPACE}:{library()}", package, x, tmp_path)
    assert "registered 2 kffi ops" in proc.stderr
    assert outputs(proc) == pytest.approx(eager(torch.tensor(x)), rel=1e-6)


@pytest.mark.parametrize("n", [5, 9])  # packaged at n = 4: the dynamic dimension
def test_cpp_runner_matches_eager(runner, manifest, package, tmp_path, n):  # noqa: F811
    x = [float(i) - 2.5 for i in range(n)]
    proc = run(runner, manifest, package, x, tmp_path)
    assert "registered 2 kffi ops" in proc.stderr
    assert outputs(proc) == pytest.approx(eager(torch.tensor(x)), rel=1e-6)


@pytest.mark.parametrize("n", [5, 9])
def test_cpp_runner_registers_a_module(runner, package, tmp_path, n):  # noqa: F811
    """RegisterOps(kffi::Module::Load(lib), ns): schemas and plans derived in C++ from the
    library's metadata, the same as the ones the package was exported with."""
    x = [float(i) / 2 - 1 for i in range(n)]
    proc = run(runner, f"module:{NAMESPACE}:{library()}", package, x, tmp_path)
    assert "registered 2 kffi ops" in proc.stderr
    assert outputs(proc) == pytest.approx(eager(torch.tensor(x)), rel=1e-6)


def test_cpp_runner_without_registration_fails_clearly(runner, package, tmp_path):  # noqa: F811
    proc = run(runner, "-", package, [1.0, 2.0], tmp_path)
    assert proc.returncode == 1, proc.stderr[-2000:]  # an exception, not a crash
    assert (
        f"error: ValueError: kffi::torch::CheckPackage: the package {package} calls ops this "
        f"process has not registered: {NAMESPACE}::repeat2, {NAMESPACE}::scale. Register kffi "
        "ops before loading it: kffi::torch::RegisterOps("
    ) in proc.stderr


def test_cpp_runner_with_a_bad_module_namespace(runner, package, tmp_path):  # noqa: F811
    proc = run(runner, f"module:not-a-name:{library()}", package, [1.0], tmp_path)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert 'the op namespace is an identifier, got "not-a-name"' in proc.stderr


def test_relative_library_path_is_beside_the_manifest(runner, manifest, package, tmp_path):  # noqa: F811
    deploy = tmp_path / "deploy"
    deploy.mkdir()
    shutil.copy(library(), deploy / "libdeploy.so")  # same content: the SHA-256 matches
    moved = deploy / "model.kffi_ops"
    moved.write_text(manifest.read_text().replace(library(), "libdeploy.so"))
    proc = run(runner, moved, package, [0.5, 1.5, 2.5], tmp_path)
    assert outputs(proc) == pytest.approx(eager(torch.tensor([0.5, 1.5, 2.5])), rel=1e-6)


def test_save_ops_relative_paths(manifest, tmp_path):
    ops = {q: op for q, op in kffi.torch.registered_ops().items() if q.startswith(NAMESPACE)}
    text = Path(kffi.torch.save_ops(tmp_path / "rel.kffi_ops", ops, relative=True)).read_text()
    paths = {line.split("\t")[2] for line in text.splitlines()[1:]}
    assert len(paths) == 1
    (path,) = paths
    assert not path.startswith("/")
    assert (tmp_path / path).resolve() == Path(library()).resolve()


def test_changed_library_is_refused(runner, manifest, package, tmp_path):  # noqa: F811
    changed = tmp_path / "libchanged.so"
    shutil.copy(library(), changed)
    with open(changed, "ab") as f:
        f.write(b"\0")  # still loadable; not the library the model was exported with
    text = manifest.read_text().replace(library(), str(changed))
    bad = tmp_path / "changed.kffi_ops"
    bad.write_text(text)
    proc = run(runner, bad, package, [1.0], tmp_path)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "has SHA-256" in proc.stderr and "deploy the library the model was exported with" in (
        proc.stderr
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not a manifest\n", "is not a kffi op manifest"),
        ("kffi-torch-ops 1\na\tb\n", "expected 8 tab-separated fields, got 2"),
        ("kffi-torch-ops 1\nns::f\t() -> ()\tlib.so\t" + "0" * 64 + "\tf\t\tx\t1\n", "integer"),
        ("kffi-torch-ops 1\nns::f\t() -> ()\tlib.so\tabc\tf\t\t\t1\n", "64 hex digits"),
        ("kffi-torch-ops 1\nf\t() -> ()\tlib.so\t" + "0" * 64 + "\tf\t\t\t1\n", "namespace::name"),
        (
            "kffi-torch-ops 1\nns::f\t() -> ()\tmissing.so\t" + "0" * 64 + "\tf\t\t\t1\n",
            "cannot read the kffi library",
        ),
    ],
)
def test_malformed_manifest_is_a_clear_error(runner, package, tmp_path, text, message):  # noqa: F811
    bad = tmp_path / "bad.kffi_ops"
    bad.write_text(text)
    proc = run(runner, bad, package, [1.0], tmp_path)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert message in proc.stderr
    assert re.match(r"error: (ValueError|RuntimeError): kffi::torch::RegisterOps: ", proc.stderr)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        (4, "nope", "AttributeError: kffi::torch::RegisterOps: "),  # no such function
        (1, "(Tensor x -> Tensor", "cannot define"),
        (6, "7", "written argument 7 of 1"),
    ],
)
def test_bad_op_line_is_a_clear_error(runner, manifest, package, tmp_path, field, value, message):  # noqa: F811
    lines = manifest.read_text().splitlines()
    fields = lines[1].split("\t")
    fields[field] = value
    bad = tmp_path / "op.kffi_ops"
    bad.write_text("\n".join([lines[0], "\t".join(fields)]) + "\n")
    proc = run(runner, bad, package, [1.0], tmp_path)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert message in proc.stderr
    # The refusal says where: the manifest, the line and the op.
    assert f"kffi::torch::RegisterOps: {bad} line 2: {fields[0]}: " in proc.stderr


def test_bad_plan_is_a_clear_error(runner, manifest, package, tmp_path):  # noqa: F811
    lines = manifest.read_text().splitlines()
    fields = lines[1].split("\t")
    fields[7] = "1 0 99 0 0 1 1"  # reads schema argument 99 of 1
    bad = tmp_path / "plan.kffi_ops"
    bad.write_text("\n".join([lines[0], "\t".join(fields)]) + "\n")
    proc = run(runner, bad, package, [1.0], tmp_path)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "the plan reads schema argument 99" in proc.stderr


def test_register_ops_in_process_matches_the_python_ops(manifest, tmp_path):
    """RegisterOps (through the glue library's export) under another namespace: the ops compute
    what kffi.torch's do; defining them twice is a clear error."""
    from kffi.torch import _glue

    renamed = tmp_path / "renamed.kffi_ops"
    renamed.write_text(manifest.read_text().replace(f"{NAMESPACE}::", "kffi_deploy_cxx::"))
    assert _glue.glue().register_ops(str(renamed)) == 2
    cxx, py = torch.ops.kffi_deploy_cxx, getattr(torch.ops, NAMESPACE)
    x = torch.linspace(-1, 1, 7)
    assert torch.equal(cxx.repeat2(x), py.repeat2(x))
    y = torch.empty(7)
    cxx.scale(y, x, 2.0)
    assert torch.equal(y, x * 2)
    assert str(cxx.scale.default._schema) == str(py.scale.default._schema).replace(
        NAMESPACE, "kffi_deploy_cxx"
    )
    with pytest.raises(ValueError, match="cannot define kffi_deploy_cxx::repeat2"):
        _glue.glue().register_ops(str(renamed))


def test_register_ops_carries_every_kind_of_plan(tk, tmp_path):  # noqa: F811
    """Allocated outputs (dtype from the inputs), several returns, optional arguments and
    streams go through the manifest's text: the ops RegisterOps defines compute the same."""
    from kffi.torch import _glue

    py = {
        "square_into": kffi.torch.register_op(
            tk.get_function("square_into"), "kffi_aoti_py::square_into", allocate=True
        ),
        "two_out": kffi.torch.register_op(tk.get_function("two_out"), "kffi_aoti_py::two_out"),
        "add_bias": kffi.torch.register_op(tk.get_function("add_bias"), "kffi_aoti_py::add_bias"),
        "concat": kffi.torch.register_op(tk.get_function("concat"), "kffi_aoti_py::concat"),
        "streams": kffi.torch.register_op(tk.get_function("streams"), "kffi_aoti_py::streams"),
    }
    path = tmp_path / "kinds.kffi_ops"
    kffi.torch.save_ops(path, py)
    path.write_text(path.read_text().replace("kffi_aoti_py::", "kffi_aoti_cxx::"))
    assert _glue.glue().register_ops(str(path)) == len(py)
    cxx = torch.ops.kffi_aoti_cxx
    for name, op in py.items():
        assert str(getattr(cxx, name).default._schema) == op.schema.join(
            [f"kffi_aoti_cxx::{name}", ""]
        )
    x64 = torch.linspace(-2, 2, 5, dtype=torch.float64)
    assert torch.equal(cxx.square_into(x64), py["square_into"].default(x64))
    assert cxx.square_into(x64).dtype == torch.float64
    x = torch.linspace(-2, 2, 5)
    for a, b in zip(cxx.two_out(x), py["two_out"].default(x)):
        assert torch.equal(a, b)
    for bias, shift in ((None, None), (torch.ones(5), 3)):
        y1, y2 = torch.zeros(5), torch.zeros(5)
        cxx.add_bias(x, y1, bias, shift)
        py["add_bias"].default(x, y2, bias, shift)
        assert torch.equal(y1, y2)
    a, b = torch.rand(2, 3), torch.rand(4, 3)
    assert torch.equal(cxx.concat(a, b), torch.cat([a, b]))
    # Meta kernels from the functions' contracts (the allocated output's shape and dtype too).
    m64 = cxx.square_into(torch.empty(5, dtype=torch.float64, device="meta"))
    assert m64.shape == (5,) and m64.dtype == torch.float64 and m64.device.type == "meta"
    assert cxx.concat(a.to("meta"), b.to("meta")).shape == (6, 3)
    o1, o2 = torch.full((2,), 7, dtype=torch.int64), torch.full((2,), 7, dtype=torch.int64)
    cxx.streams(o1)
    py["streams"].default(o2)
    assert torch.equal(o1, o2)


def test_save_ops_refuses_what_cpp_cannot_load(tmp_path):
    with pytest.raises(TypeError, match="expected kffi.torch ops"):
        kffi.torch.save_ops(tmp_path / "m", [object()])


def test_flags_command():
    def flags(*args):
        return subprocess.run(
            [sys.executable, "-m", "kffi.torch", *args], capture_output=True, text=True
        )

    cxx, ld, both = flags("--cxxflags"), flags("--ldflags"), flags("--cxxflags", "--ldflags")
    assert cxx.returncode == ld.returncode == both.returncode == 0, cxx.stderr + ld.stderr
    assert "-std=c++20" in cxx.stdout and "kffi_torch" not in cxx.stdout
    assert "-l:libkffi_torch.so" in ld.stdout and "-ltorch" in ld.stdout and "-I" not in ld.stdout
    assert both.stdout.split() == cxx.stdout.split() + ld.stdout.split()
    bad = flags("--cpp")
    assert bad.returncode == 2 and "usage: python -m kffi.torch" in bad.stderr


def _configure(tmp_path: Path, body: str) -> subprocess.CompletedProcess:
    """Configures a CMake project of `body` (after project()) with kffi's package, no Python on
    the PATH."""
    from kffi import libinfo

    _compiler()
    src = tmp_path / "src"
    src.mkdir(parents=True)
    (src / "CMakeLists.txt").write_text(
        f"cmake_minimum_required(VERSION 3.19)\nproject(probe CXX)\n{body}\n"
    )
    return subprocess.run(
        [_cmake(), "-S", str(src), "-B", str(tmp_path / "b"), f"-Dkffi_DIR={libinfo.cmake_dir()}"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env_without_python(tmp_path / "bin"),
    )


def test_cmake_refuses_a_torch_kffi_has_no_glue_for(tmp_path):
    """A torch minor version kffi was not built for: no kffi::torch, a message saying why and
    what to do; with COMPONENTS torch, find_package fails."""
    proc = _configure(
        tmp_path,
        'set(Torch_VERSION "1.99.0")\nfind_package(kffi REQUIRED)\n'
        'if(TARGET kffi::torch)\n  message(FATAL_ERROR "defined")\nendif()',
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = " ".join(proc.stderr.split())
    assert (
        "kffi::torch is not defined: find_package(Torch) found torch 1.99.0, but this kffi has"
        in text
    )
    assert "build kffi again with that torch installed" in text
    proc = _configure(
        tmp_path / "required",
        'set(Torch_VERSION "1.99.0")\nfind_package(kffi REQUIRED COMPONENTS torch)',
    )
    assert proc.returncode != 0
    assert "kffi::torch: find_package(Torch) found torch 1.99.0" in " ".join(proc.stderr.split())


def test_cmake_refuses_a_torch_found_after_kffi_that_differs(tmp_path):
    """kffi first picks its glue; a Torch found later in the same folder must be that torch."""
    proc = _configure(
        tmp_path,
        'find_package(kffi REQUIRED COMPONENTS torch)\nset(Torch_VERSION "1.99.0")',
    )
    assert proc.returncode != 0
    text = " ".join(proc.stderr.split())
    assert "find_package(Torch) found torch 1.99.0 after find_package(kffi) chose" in text


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cpp_runner_on_cuda(runner, tmp_path):
    if not kffi.cpp.nvcc_available():
        pytest.skip("needs nvcc")
    model, manifest_path = tmp_path / "cuda.pt2", tmp_path / "cuda.kffi_ops"
    made = subprocess.run(
        [sys.executable, str(HERE / "torch_aoti_cases.py"), str(model), str(manifest_path), "cuda"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert made.returncode == 0, made.stderr[-4000:]
    packaged = json.loads(made.stdout.strip().splitlines()[-1])
    assert packaged["model"] == pytest.approx(packaged["eager"], rel=1e-6)
    x = [float(i) / 3 for i in range(7)]
    proc = run(runner, manifest_path, model, x, tmp_path, device="cuda")
    assert outputs(proc) == pytest.approx(eager(torch.tensor(x)), rel=1e-5)
    # The same ops registered from the library itself (RegisterOps(module, ns)).
    first = manifest_path.read_text().splitlines()[1].split("\t")
    ns, lib = first[0].split("::")[0], first[2]
    proc = run(runner, f"module:{ns}:{lib}", model, x, tmp_path, device="cuda")
    assert outputs(proc) == pytest.approx(eager(torch.tensor(x)), rel=1e-5)
