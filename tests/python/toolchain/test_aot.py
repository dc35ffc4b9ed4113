"""tests/python/toolchain/test_aot.py: ahead of time: compiled.export("x.o") writes an object and a
header; programs link objects statically (C++ through the header and the system library, C through
the safe call, an embedded interpreter through kffi.system_lib()); kffi.load_object; defaults."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import kffi
import numpy as np
import pytest

pytestmark = pytest.mark.skipif(
    shutil.which("c++") is None or shutil.which("objcopy") is None,
    reason="needs a C++ compiler and binutils",
)

ADD_ONE = r"""
void add_one(kffi::ConstTensorView a, kffi::TensorView b) {
  const float* x = a.data<float>();
  float* y = b.data<float>();
  for (int64_t i = 0; i < a.shape()[0]; ++i) y[i] = x[i] + 1.0f;
}
"""

AXPY = r"""
void axpy(kffi::TensorView y, kffi::ConstTensorView x, double alpha,
          kffi::Optional<double> beta) {
  float* out = y.data<float>();
  const float* in = x.data<float>();
  double b = beta.value_or(0.0);
  for (int64_t i = 0; i < x.shape()[0]; ++i) out[i] = static_cast<float>(alpha * in[i] + b);
}
"""

MUL_INTS = r"""
#include <kffi/export.h>
#include <cstdint>
static int64_t MulInts(int64_t a, int64_t b) { return a * b; }
KFFI_EXPORT_DOC(mul_ints, MulInts, "a * b", "a, b");
"""


def _flags(*what: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-m", "kffi.config", *what], check=True, capture_output=True, text=True
    ).stdout
    return out.split()


def _run(cmd, **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [str(c) for c in cmd], capture_output=True, text=True, check=False, **kwargs
    )
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))}\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def add_one():
    n = kffi.sym_int()
    return kffi.compile(
        ADD_ONE,
        "add_one",
        kffi.fake_tensor("float32", (n,)),
        kffi.fake_tensor("float32", (n,), mut=True),
        options={"doc": "b = a + 1"},
    )


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
    )


@pytest.fixture(scope="module")
def objects(add_one, tmp_path_factory):
    """add_one.o (+ .h), the same function as v2_add_one.o (prefix) and mul_ints.o, a plain
    KFFI_EXPORT compiled for the system library by hand."""
    d = tmp_path_factory.mktemp("aot")
    assert add_one.export(d / "add_one.o") == str(d / "add_one.o")
    add_one.export(d / "v2_add_one.o", prefix="v2_")
    (d / "mul.cc").write_text(MUL_INTS)
    _run(
        [
            "c++",
            "-c",
            "-fPIC",
            "-DKFFI_EXPORT_TO_SYSTEM_LIB=1",
            *_flags("--cxxflags"),
            d / "mul.cc",
            "-o",
            d / "mul_ints.o",
        ]
    )
    return d


def _symbols(obj: Path) -> dict:
    out = _run(["nm", "-P", obj]).stdout
    return {line.split()[0]: line.split()[1] for line in out.splitlines() if len(line.split()) > 1}


def test_export_o_writes_an_object_and_its_header(objects):
    syms = _symbols(objects / "add_one.o")
    assert syms["__kffi_add_one"] == "T"
    assert syms["__kffi__meta_add_one"] == "T"
    # The kernel's own definition is local: two objects of one source link together.
    assert syms["_Z7add_oneN4kffi15ConstTensorViewENS_10TensorViewE"] == "t"
    header = (objects / "add_one.h").read_text()
    assert (
        "int __kffi_add_one(void* handle, const KFFIAny* args, int32_t num_args, "
        "KFFIAny* result);" in header
    )
    assert "inline void add_one(kffi::ConstTensorView a, kffi::TensorView b) {" in header
    contract = (
        "a: Tensor([n0], float32, device=cpu, contiguous), "
        "b: Tensor([n0], float32, device=cpu, contiguous, mut); n0: int64"
    )
    assert f"/// Contract: {contract}" in header
    assert f" *   {contract}" in header
    assert " * b = a + 1" in header
    v2 = (objects / "v2_add_one.h").read_text()
    assert "inline void v2_add_one(kffi::ConstTensorView a, kffi::TensorView b) {" in v2
    assert _symbols(objects / "v2_add_one.o")["__kffi_v2_add_one"] == "T"


def test_export_so_and_bad_names(add_one, tmp_path):
    lib = add_one.export(tmp_path / "libadd_renamed.so", function_name="inc")
    mod = kffi.load_module(lib)
    assert mod.functions() == ["inc"]
    a = np.arange(3, dtype=np.float32)
    b = np.zeros(3, np.float32)
    mod.inc(a, b)
    assert b.tolist() == [1.0, 2.0, 3.0]
    with pytest.raises(ValueError, match=r"function_name is a C identifier .* got '_x'"):
        add_one.export(tmp_path / "x.o", function_name="_x")
    with pytest.raises(ValueError, match=r"prefix is empty or a C identifier .* got 'a-b'"):
        add_one.export(tmp_path / "x.o", prefix="a-b")


APP = r"""
#include "add_one.h"
#include "v2_add_one.h"

#include <iostream>
#include <vector>

static DLTensor Vec(std::vector<float>& v, int64_t* shape) {
  shape[0] = static_cast<int64_t>(v.size());
  return DLTensor{v.data(), DLDevice{kDLCPU, 0}, 1, DLDataType{kDLFloat, 32, 1}, shape, nullptr, 0};
}

int main() {
  std::vector<float> a{1, 2, 3}, b(3), c(2);
  int64_t sa[1], sb[1], sc[1];
  DLTensor ta = Vec(a, sa), tb = Vec(b, sb), tc = Vec(c, sc);
  add_one(kffi::ConstTensorView(&ta), kffi::TensorView(&tb));  // the typed entry point
  std::cout << "header: " << b[0] << " " << b[1] << " " << b[2] << "\n";
  v2_add_one(kffi::TensorView(&tb), kffi::TensorView(&tb));
  std::cout << "v2: " << b[0] << " " << b[1] << " " << b[2] << "\n";
  kffi::Module sys = kffi::Module::SystemLib();
  for (const std::string& n : sys.ListFunctions()) std::cout << "system_lib: " << n << "\n";
  std::cout << "mul_ints: " << sys.GetFunctionRequired("mul_ints")(6, 7).cast<int64_t>() << "\n";
  std::string meta = sys.GetFunctionMetadata("add_one").value();
  std::cout << "has contract: " << (meta.find("\"contract\":\"a: Tensor([n0]") != meta.npos) << "\n";
  sys.GetFunctionRequired("add_one")(kffi::TensorView(&tb), kffi::TensorView(&tb));
  std::cout << "system_lib call: " << b[0] << "\n";
  try {
    add_one(kffi::ConstTensorView(&ta), kffi::TensorView(&tc));
  } catch (const kffi::Error& e) {
    std::cout << "header error: " << e.kind() << ": " << e.message() << "\n";
  }
  try {
    sys.GetFunctionRequired("add_one")(kffi::ConstTensorView(&ta), kffi::TensorView(&tc));
  } catch (const kffi::Error& e) {
    std::cout << "system_lib error: " << e.kind() << ": " << e.message() << "\n";
  }
  return 0;
}
"""


def test_cpp_app_links_two_objects_statically(objects):
    (objects / "app.cc").write_text(APP)
    objs = [objects / f for f in ("add_one.o", "v2_add_one.o", "mul_ints.o")]
    _run(
        ["c++", objects / "app.cc", *objs, "-o", objects / "app"]
        + _flags("--cxxflags", "--ldflags", "--libs"),
        cwd=objects,
    )
    out = _run([objects / "app"]).stdout.splitlines()
    assert out[0] == "header: 2 3 4"
    assert out[1] == "v2: 3 4 5"
    listed = [line.split(": ", 1)[1] for line in out if line.startswith("system_lib: ")]
    assert {"add_one", "mul_ints", "v2_add_one"} <= set(listed)
    assert "mul_ints: 42" in out
    assert "has contract: 1" in out
    assert "system_lib call: 4" in out
    blame = "b.shape[0]: expected n0 = 3 (as a.shape[0]), got 2"
    errors = [line for line in out if "error: " in line]
    assert len(errors) == 2, out
    for line in errors:
        assert f"error: ValueError: {blame}" in line, line
        assert "add_one(a: Tensor([n0], float32, device=cpu, contiguous)" in line, line


C_PROGRAM = r"""
#include "add_one.h"
#include <stdio.h>

int main(void) {
  float a[3] = {1, 2, 3}, b[3] = {0, 0, 0};
  int64_t shape[1] = {3}, short_shape[1] = {2};
  DLTensor ta = {a, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, shape, NULL, 0};
  DLTensor tb = {b, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, shape, NULL, 0};
  KFFIAny args[2], result;
  args[0].type_index = kKFFIDLTensorPtr; args[0].zero_padding = 0; args[0].v_ptr = &ta;
  args[1].type_index = kKFFIDLTensorPtr; args[1].zero_padding = 0; args[1].v_ptr = &tb;
  result.type_index = kKFFINone;
  int rc = __kffi_add_one(NULL, args, 2, &result);
  printf("rc=%d result=%d b=%g %g %g\n", rc, (int)result.type_index, b[0], b[1], b[2]);
  tb.shape = short_shape;
  rc = __kffi_add_one(NULL, args, 2, &result);
  KFFIObjectHandle err = NULL;
  KFFIErrorMoveFromRaised(&err);
  const KFFIErrorCell* cell = KFFIErrorGetCellPtr(err);
  printf("rc=%d %.*s: %.*s\n", rc, (int)cell->kind.size, cell->kind.data,
         (int)cell->message.size, cell->message.data);
  KFFIObjectDecRef(err);
  return 0;
}
"""


def test_c_program_calls_the_safe_call_through_the_header(objects):
    (objects / "prog.c").write_text(C_PROGRAM)
    _run(
        ["cc", "-std=c99", "-Wall", "-c", objects / "prog.c", "-o", objects / "prog.o"]
        + _flags("--cflags")
    )
    # The object is C++: the C++ driver links its runtime.
    _run(
        ["c++", objects / "prog.o", objects / "add_one.o", "-o", objects / "prog"]
        + _flags("--ldflags", "--libs")
    )
    out = _run([objects / "prog"]).stdout.splitlines()
    assert out[0] == "rc=0 result=0 b=2 3 4"
    assert out[1].startswith("rc=-1 ValueError: b.shape[0]: expected n0 = 3 (as a.shape[0]), got 2")


EMBED = r"""
#include <Python.h>

int main() {
  Py_Initialize();
  int rc = PyRun_SimpleString(
      "import kffi, numpy as np\n"
      "m = kffi.system_lib()\n"
      "print('functions:', m.functions())\n"
      "print('contract:', m.metadata('add_one')['contract'])\n"
      "a = np.arange(3, dtype=np.float32); b = np.zeros(3, np.float32)\n"
      "m.add_one(a, b)\n"
      "print('call:', b.tolist())\n"
      "try:\n"
      "    m.add_one(a, np.zeros(2, np.float32))\n"
      "except ValueError as e:\n"
      "    print('error:', type(e).__name__, str(e).splitlines()[0])\n");
  if (Py_FinalizeEx() < 0) return 120;
  return rc == 0 ? 0 : 1;
}
"""


def test_embedded_interpreter_finds_the_linked_object_in_system_lib(objects):
    libdir = sysconfig.get_config_var("LIBDIR")
    ldlib = sysconfig.get_config_var("LDLIBRARY") or ""
    if not sysconfig.get_config_var("Py_ENABLE_SHARED") or not ldlib.endswith(".so"):
        pytest.skip("this Python has no shared libpython to embed")
    (objects / "embed.cc").write_text(EMBED)
    version = sysconfig.get_config_var("LDVERSION") or sysconfig.get_python_version()
    _run(
        [
            "c++",
            objects / "embed.cc",
            objects / "add_one.o",
            "-o",
            objects / "embed",
            "-I" + sysconfig.get_paths()["include"],
            "-L" + libdir,
            "-Wl,-rpath," + libdir,
            "-lpython" + version,
        ]
        + _flags("--cxxflags", "--ldflags", "--libs")
    )
    paths = {str(Path(kffi.__file__).parent.parent), str(Path(np.__file__).parent.parent)}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sorted(paths)), PYTHONHOME=sys.base_prefix)
    out = _run([objects / "embed"], env=env).stdout.splitlines()
    assert out[0] == "functions: ['add_one']"
    assert out[1].startswith("contract: a: Tensor([n0], float32, device=cpu, contiguous), b: ")
    assert out[2] == "call: [1.0, 2.0, 3.0]"
    assert out[3].startswith("error: ValueError b.shape[0]: expected n0 = 3 (as a.shape[0]), got 2")


def test_load_object_runs_an_exported_object(objects):
    mod = kffi.load_object(objects / "add_one.o")
    assert mod.functions() == ["add_one"]
    assert mod.name.endswith(".so") and "/objects/add_one_" in mod.name
    a = np.arange(4, dtype=np.float32)
    b = np.zeros(4, np.float32)
    mod.add_one(a, b)
    assert b.tolist() == [1.0, 2.0, 3.0, 4.0]
    assert mod.metadata("add_one")["contract"].startswith("a: Tensor([n0], float32")
    with pytest.raises(ValueError, match=r"b\.shape\[0\]: expected n0 = 4 \(as a\.shape\[0\]\)"):
        mod.add_one(a, np.zeros(3, np.float32))
    # Loading it again, or a copy of the same name elsewhere (the cache is keyed by the name's
    # stem and the bytes), gives the same module; its registration stayed out of the system library.
    (objects / "copy").mkdir(exist_ok=True)
    shutil.copyfile(objects / "add_one.o", objects / "copy" / "add_one.o")
    assert kffi.load_object(objects / "copy" / "add_one.o").same_as(mod)
    assert kffi.load_object(objects / "add_one.o").same_as(mod)
    assert "add_one" not in kffi.system_lib().functions()


def test_load_object_refuses_other_files(objects, library_paths):
    with pytest.raises(FileNotFoundError, match="no such file"):
        kffi.load_object(objects / "missing.o")
    with pytest.raises(
        RuntimeError, match=r"Cannot load object `.*mul\.cc`: not an ELF object file"
    ):
        kffi.load_object(objects / "mul.cc")
    with pytest.raises(RuntimeError, match="it is a shared library, not a relocatable object"):
        kffi.load_object(library_paths["testing_lib"])
    with pytest.raises(ValueError, match="NUL byte"):
        kffi.load_object("a\0b.o")


def test_defaults_fill_in_left_out_optional_arguments(axpy, tmp_path):
    """Issue 12 item 6: an Optional parameter left out of a Python call passes None."""
    meta = axpy._metadata
    assert meta["params"][3]["default"] is None
    x = np.arange(3, dtype=np.float32)
    y = np.zeros(3, np.float32)
    axpy(y, x, 2.0)
    assert y.tolist() == [0.0, 2.0, 4.0]
    axpy(y, x, 2.0, 1.0)
    assert y.tolist() == [1.0, 3.0, 5.0]
    axpy(y, x, alpha=1.0)
    assert y.tolist() == [0.0, 1.0, 2.0]
    with pytest.raises(TypeError, match="alpha"):
        axpy(y, x)
    # The same through a C++ export (Optional<T> parameters default to None).
    mod = kffi.cpp.load_inline(
        "aot_defaults",
        cpp_sources="double pick(double a, kffi::Optional<double> b) { return b.value_or(-a); }",
        functions=["pick"],
    )
    assert mod.pick(2.0) == -2.0
    assert mod.pick(2.0, 5.0) == 5.0
    # The object's header gives the typed C++ entry point the same default.
    axpy.export(tmp_path / "axpy.o")
    header = (tmp_path / "axpy.h").read_text()
    assert (
        "inline void axpy(kffi::TensorView y, kffi::ConstTensorView x, double alpha, "
        "kffi::Optional<double> beta = std::nullopt) {" in header
    )


CUDA_KERNEL = r"""
__global__ void add_one_kernel(const float* x, float* y, int64_t n) {
  int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = x[i] + 1.0f;
}
void add_one_cuda(kffi::ConstTensorView a, kffi::TensorView b, void* stream) {
  int64_t n = a.shape()[0];
  add_one_kernel<<<(n + 255) / 256, 256, 0, static_cast<cudaStream_t>(stream)>>>(
      a.data<float>(), b.data<float>(), n);
}
"""

CUDA_APP = r"""
#include "add_one_cuda.h"
#include <cuda_runtime.h>
#include <cstdio>

int main() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("no GPU\n");
    return 77;
  }
  float host[4] = {1, 2, 3, 4};
  float* d_a = nullptr;
  float* d_b = nullptr;
  cudaMalloc(&d_a, sizeof(host));
  cudaMalloc(&d_b, sizeof(host));
  cudaMemcpy(d_a, host, sizeof(host), cudaMemcpyHostToDevice);
  int64_t shape[1] = {4};
  DLTensor ta{d_a, DLDevice{kDLCUDA, 0}, 1, DLDataType{kDLFloat, 32, 1}, shape, nullptr, 0};
  DLTensor tb = ta;
  tb.data = d_b;
  add_one_cuda(kffi::ConstTensorView(&ta), kffi::TensorView(&tb));
  cudaDeviceSynchronize();
  cudaMemcpy(host, d_b, sizeof(host), cudaMemcpyDeviceToHost);
  std::printf("gpu: %g %g %g %g\n", host[0], host[1], host[2], host[3]);
  DLTensor tc = ta;
  tc.device = DLDevice{kDLCPU, 0};
  try {
    add_one_cuda(kffi::ConstTensorView(&tc), kffi::TensorView(&tb));
  } catch (const kffi::Error& e) {
    std::printf("error: %s\n", e.kind().c_str());
  }
  return 0;
}
"""


def _cuda_home() -> Path | None:
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and (Path(home) / "include" / "cuda_runtime.h").exists():
            return Path(home)
    return None


@pytest.mark.skipif(not kffi.cpp.nvcc_available(), reason="needs nvcc")
def test_cuda_kernel_exported_linked_statically_and_run(tmp_path):
    """Builds everywhere nvcc is; runs the program where a GPU is (else it exits 77: skip)."""
    home = _cuda_home()
    if home is None:
        pytest.skip("no CUDA toolkit headers found")
    n = kffi.sym_int()
    f = kffi.compile(
        CUDA_KERNEL,
        "add_one_cuda",
        kffi.fake_tensor("float32", (n,)),
        kffi.fake_tensor("float32", (n,), mut=True),
        kffi.fake_stream(),
    )
    f.export(tmp_path / "add_one_cuda.o")
    header = (tmp_path / "add_one_cuda.h").read_text()
    assert "inline void add_one_cuda(kffi::ConstTensorView a, kffi::TensorView b) {" in header
    # load_object links the CUDA runtime in by itself.
    assert kffi.load_object(tmp_path / "add_one_cuda.o").functions() == ["add_one_cuda"]
    (tmp_path / "app.cc").write_text(CUDA_APP)
    libdir = next((home / d for d in ("lib64", "lib") if (home / d).exists()), home / "lib64")
    _run(
        ["c++", tmp_path / "app.cc", tmp_path / "add_one_cuda.o", "-o", tmp_path / "app"]
        + _flags("--cxxflags", "--ldflags", "--libs")
        + [f"-I{home / 'include'}", f"-L{libdir}", f"-Wl,-rpath,{libdir}", "-lcudart"]
    )
    proc = subprocess.run([tmp_path / "app"], capture_output=True, text=True, check=False)
    if proc.returncode == 77:
        pytest.skip("built and linked; running needs a CUDA GPU")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines() == ["gpu: 2 3 4 5", "error: ValueError"]
