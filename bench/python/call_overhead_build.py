"""bench/python/call_overhead_build.py: the kernels call_overhead.py times, and their builds for
each binding (kffi, tvm-ffi, nanobind, pybind11, the torch extension), cached by content hash."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / "build" / "bench_cache"
CXX = os.environ.get("CXX", "c++")
OPT = ["-O3", "-DNDEBUG"]

# What is measured: the cases, the bindings and how each binds.
CASES = [
    ("noop", "no-op, 0 args"),
    ("ints3", "3 ints"),
    ("str1", "1 str"),
    ("numpy3", "3 NumPy arrays"),
    ("torch3", "3 torch CPU tensors"),
    ("cuda3", "3 torch CUDA tensors + stream"),
]
BINDINGS = ["kffi", "tvm-ffi", "nanobind", "pybind11", "torch.ops", "torch+pyb11", "python"]
GILS = ["held", "released"]
FIXED = "fixed"  # bindings whose GIL policy cannot be chosen: measured once per case

DESCRIBE = {
    "kffi": "kffi.load_module(lib built with kffi-config, KFFI_EXPORT); params int64_t, "
    "kffi::String, kffi::ConstTensorView (a, b) and kffi::TensorView (c, the output: refuses "
    "read-only memory) (NumPy: direct field read; torch: kffi.torch's direct "
    "read of the TensorImpl, or with --torch-import exchange torch's DLPack C exchange "
    "API; CUDA stream picked up automatically, read with KFFIEnvGetStream). "
    "GIL held: f.release_gil=False; released: kffi default.",
    "tvm-ffi": "tvm_ffi.load_module(lib built with tvm-ffi-config, TVM_FFI_DLL_EXPORT_TYPED_FUNC); "
    "params int64_t, tvm::ffi::String, tvm::ffi::TensorView (torch: DLPack C exchange "
    "API; NumPy: __dlpack__ via Python; CUDA stream picked up automatically, read with "
    "TVMFFIEnvGetStream). GIL: tvm-ffi releases by default (Function.release_gil, "
    "TVM_FFI_RELEASE_GIL_BY_DEFAULT=1); held: f.release_gil=False.",
    "nanobind": "NB_MODULE, m.def; params int64_t, std::string_view, nb::ndarray<> (imports via "
    "__dlpack__, buffer protocol fallback); CUDA stream from "
    "torch's DLPackExchangeAPI::current_work_stream in C++. Released: "
    "nb::call_guard<nb::gil_scoped_release>.",
    "pybind11": "PYBIND11_MODULE, m.def; params int64_t, std::string_view, py::array (NumPy), "
    "py::object + obj.__dlpack__() capsule (torch; CUDA: __dlpack__(stream=-1) and "
    "current_work_stream). Released: py::call_guard<py::gil_scoped_release> "
    "(DLPack: gil_scoped_release after reading the capsules).",
    "torch.ops": "torch.ops.kbench.<op>.default: TORCH_LIBRARY catch-all C++ kernel, schema "
    "int/str/Tensor; CUDA stream via c10 DeviceGuardImpl::getStream. GIL policy "
    "fixed: torch.ops always releases the GIL around the kernel "
    "(invokeOperatorFromPython). No NumPy.",
    "torch.ops(py)": "torch.library.custom_op registered in Python (fallback when the C++ "
    "extension does not build).",
    "torch+pyb11": "the same torch extension's PYBIND11_MODULE functions taking at::Tensor / "
    "int64_t / std::string (the classic torch C++ extension binding). Released: "
    "py::call_guard<py::gil_scoped_release>. No NumPy.",
    "python": "a Python function with an empty body (def f(a, b, c): pass); GIL policy fixed "
    "(n/a).",
}

# ---------------------------------------------------------------------------------------------
# Kernel sources. Every binding does the same work per case: nothing (noop), sum three int64
# (ints3), take the length of one str (str1), read data pointer + ndim of three tensors
# (tensors3), and for CUDA tensors also read the caller's current stream (tensors3_stream).
# Results go to a volatile sink so nothing is optimised away; every function returns None.
# ---------------------------------------------------------------------------------------------

KFFI_SRC = r"""
#include <kffi/export.h>
#include <kffi/tensor.h>
#include <kffi/string.h>
#include <kffi/c_api.h>
#include <cstdint>
static volatile int64_t g_sink;
static void Noop() {}
static void Ints3(int64_t a, int64_t b, int64_t c) { g_sink = a + b + c; }
static void Str1(kffi::String s) { g_sink = static_cast<int64_t>(s.size()); }
// a and b stand for a kernel's inputs, c for its output (its read-only check is in the row).
static void Tensors3(kffi::ConstTensorView a, kffi::ConstTensorView b, kffi::TensorView c) {
  g_sink = reinterpret_cast<intptr_t>(a.data_ptr()) + a.ndim() +
           reinterpret_cast<intptr_t>(b.data_ptr()) + b.ndim() +
           reinterpret_cast<intptr_t>(c.data_ptr()) + c.ndim();
}
static void Tensors3Stream(kffi::ConstTensorView a, kffi::ConstTensorView b, kffi::TensorView c) {
  void* s = KFFIEnvGetStream(a.device().device_type, a.device().device_id);
  g_sink = reinterpret_cast<intptr_t>(a.data_ptr()) + a.ndim() +
           reinterpret_cast<intptr_t>(b.data_ptr()) + b.ndim() +
           reinterpret_cast<intptr_t>(c.data_ptr()) + c.ndim() + reinterpret_cast<intptr_t>(s);
}
KFFI_EXPORT(noop, Noop);
KFFI_EXPORT(ints3, Ints3);
KFFI_EXPORT(str1, Str1);
KFFI_EXPORT(tensors3, Tensors3);
KFFI_EXPORT(tensors3_stream, Tensors3Stream);
"""

TVM_SRC = r"""
#include <tvm/ffi/function.h>
#include <tvm/ffi/string.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <cstdint>
static volatile int64_t g_sink;
static void Noop() {}
static void Ints3(int64_t a, int64_t b, int64_t c) { g_sink = a + b + c; }
static void Str1(tvm::ffi::String s) { g_sink = static_cast<int64_t>(s.size()); }
using TV = tvm::ffi::TensorView;
static void Tensors3(TV a, TV b, TV c) {
  g_sink = reinterpret_cast<intptr_t>(a.data_ptr()) + a.ndim() +
           reinterpret_cast<intptr_t>(b.data_ptr()) + b.ndim() +
           reinterpret_cast<intptr_t>(c.data_ptr()) + c.ndim();
}
static void Tensors3Stream(TV a, TV b, TV c) {
  void* s = TVMFFIEnvGetStream(a.device().device_type, a.device().device_id);
  g_sink = reinterpret_cast<intptr_t>(a.data_ptr()) + a.ndim() +
           reinterpret_cast<intptr_t>(b.data_ptr()) + b.ndim() +
           reinterpret_cast<intptr_t>(c.data_ptr()) + c.ndim() + reinterpret_cast<intptr_t>(s);
}
TVM_FFI_DLL_EXPORT_TYPED_FUNC(noop, Noop);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(ints3, Ints3);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(str1, Str1);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(tensors3, Tensors3);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(tensors3_stream, Tensors3Stream);
"""

# The stream of a CUDA tensor, for bindings without a stream mechanism of their own: the C
# function the framework exports for exactly this (DLPackExchangeAPI::current_work_stream, from
# torch.Tensor.__dlpack_c_exchange_api__), fetched once by set_exchange_api(capsule).
STREAM_HELPER = r"""
#include <kffi/dlpack.h>
static const DLPackExchangeAPI* g_api = nullptr;
static void* CurrentStream(int device_type, int device_id) {
  void* s = nullptr;
  if (g_api != nullptr && g_api->current_work_stream != nullptr)
    g_api->current_work_stream(static_cast<DLDeviceType>(device_type), device_id, &s);
  return s;
}
static void SetExchangeAPI(PyObject* cap) {
  g_api = static_cast<const DLPackExchangeAPI*>(PyCapsule_GetPointer(cap, "dlpack_exchange_api"));
  if (g_api == nullptr) PyErr_Clear();
}
"""

NB_SRC = (
    r"""
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string_view.h>
#include <cstdint>
#include <string_view>
namespace nb = nanobind;
static volatile int64_t g_sink;
"""
    + STREAM_HELPER
    + r"""
using Arr = nb::ndarray<>;
static void Noop() {}
static void Ints3(int64_t a, int64_t b, int64_t c) { g_sink = a + b + c; }
static void Str1(std::string_view s) { g_sink = static_cast<int64_t>(s.size()); }
static void Tensors3(const Arr& a, const Arr& b, const Arr& c) {
  g_sink = reinterpret_cast<intptr_t>(a.data()) + static_cast<int64_t>(a.ndim()) +
           reinterpret_cast<intptr_t>(b.data()) + static_cast<int64_t>(b.ndim()) +
           reinterpret_cast<intptr_t>(c.data()) + static_cast<int64_t>(c.ndim());
}
static void Tensors3Stream(const Arr& a, const Arr& b, const Arr& c) {
  void* s = CurrentStream(a.device_type(), a.device_id());
  g_sink = reinterpret_cast<intptr_t>(a.data()) + static_cast<int64_t>(a.ndim()) +
           reinterpret_cast<intptr_t>(b.data()) + static_cast<int64_t>(b.ndim()) +
           reinterpret_cast<intptr_t>(c.data()) + static_cast<int64_t>(c.ndim()) +
           reinterpret_cast<intptr_t>(s);
}
NB_MODULE(kbench_nb, m) {
  using rel = nb::call_guard<nb::gil_scoped_release>;
  m.def("noop", &Noop);
  m.def("noop_nogil", &Noop, rel());
  m.def("ints3", &Ints3);
  m.def("ints3_nogil", &Ints3, rel());
  m.def("str1", &Str1);
  m.def("str1_nogil", &Str1, rel());
  m.def("tensors3", &Tensors3);
  m.def("tensors3_nogil", &Tensors3, rel());
  m.def("tensors3_stream", &Tensors3Stream);
  m.def("tensors3_stream_nogil", &Tensors3Stream, rel());
  m.def("set_exchange_api", [](nb::handle cap) { SetExchangeAPI(cap.ptr()); });
}
"""
)

PB_SRC = (
    r"""
#include <pybind11/pybind11.h>
#include <pybind11/numpy.h>
#include <cstdint>
#include <string_view>
namespace py = pybind11;
static volatile int64_t g_sink;
"""
    + STREAM_HELPER
    + r"""
static void Noop() {}
static void Ints3(int64_t a, int64_t b, int64_t c) { g_sink = a + b + c; }
static void Str1(std::string_view s) { g_sink = static_cast<int64_t>(s.size()); }
static void Arrays3(const py::array& a, const py::array& b, const py::array& c) {
  g_sink = reinterpret_cast<intptr_t>(a.data()) + static_cast<int64_t>(a.ndim()) +
           reinterpret_cast<intptr_t>(b.data()) + static_cast<int64_t>(b.ndim()) +
           reinterpret_cast<intptr_t>(c.data()) + static_cast<int64_t>(c.ndim());
}
// A tensor through the DLPack protocol: obj.__dlpack__() -> capsule, read, release.
struct DL {
  void* data = nullptr;
  int64_t ndim = 0;
  int device_type = 1, device_id = 0;
};
static DL ReadDLPack(const py::handle& obj, bool cuda) {
  py::object cap = cuda ? obj.attr("__dlpack__")(py::arg("stream") = -1) : obj.attr("__dlpack__")();
  auto* mt = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap.ptr(), "dltensor"));
  if (mt == nullptr) throw py::error_already_set();
  DL r{mt->dl_tensor.data, mt->dl_tensor.ndim, mt->dl_tensor.device.device_type,
       mt->dl_tensor.device.device_id};
  PyCapsule_SetName(cap.ptr(), "used_dltensor");
  if (mt->deleter != nullptr) mt->deleter(mt);
  return r;
}
template <bool kRelease, bool kCuda>
static void DLPack3(const py::object& a, const py::object& b, const py::object& c) {
  DL x = ReadDLPack(a, kCuda), y = ReadDLPack(b, kCuda), z = ReadDLPack(c, kCuda);
  auto body = [&] {
    void* s = kCuda ? CurrentStream(x.device_type, x.device_id) : nullptr;
    g_sink = reinterpret_cast<intptr_t>(x.data) + x.ndim + reinterpret_cast<intptr_t>(y.data) +
             y.ndim + reinterpret_cast<intptr_t>(z.data) + z.ndim + reinterpret_cast<intptr_t>(s);
  };
  if (kRelease) {
    py::gil_scoped_release rel;
    body();
  } else {
    body();
  }
}
PYBIND11_MODULE(kbench_pb, m) {
  using rel = py::call_guard<py::gil_scoped_release>;
  m.def("noop", &Noop);
  m.def("noop_nogil", &Noop, rel());
  m.def("ints3", &Ints3);
  m.def("ints3_nogil", &Ints3, rel());
  m.def("str1", &Str1);
  m.def("str1_nogil", &Str1, rel());
  m.def("arrays3", &Arrays3);
  m.def("arrays3_nogil", &Arrays3, rel());
  m.def("dlpack3", &DLPack3<false, false>);
  m.def("dlpack3_nogil", &DLPack3<true, false>);
  m.def("dlpack3_stream", &DLPack3<false, true>);
  m.def("dlpack3_stream_nogil", &DLPack3<true, true>);
  m.def("set_exchange_api", [](py::handle cap) { SetExchangeAPI(cap.ptr()); });
}
"""
)

# One torch extension gives two anchors: torch.ops.kbench.* (the dispatcher; custom ops registered
# with TORCH_LIBRARY as catch-all kernels) and pybind11 functions taking at::Tensor.
TORCH_SRC = r"""
#include <torch/extension.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <cstdint>
#include <string>
static volatile int64_t g_sink;
static void Noop() {}
static void Ints3(int64_t a, int64_t b, int64_t c) { g_sink = a + b + c; }
static void Str1(c10::string_view s) { g_sink = static_cast<int64_t>(s.size()); }
static void Tensors3(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c) {
  g_sink = reinterpret_cast<intptr_t>(a.data_ptr()) + a.dim() +
           reinterpret_cast<intptr_t>(b.data_ptr()) + b.dim() +
           reinterpret_cast<intptr_t>(c.data_ptr()) + c.dim();
}
static void Tensors3Stream(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c) {
  c10::Stream s = c10::impl::getDeviceGuardImpl(a.device().type())->getStream(a.device());
  g_sink = reinterpret_cast<intptr_t>(a.data_ptr()) + a.dim() +
           reinterpret_cast<intptr_t>(b.data_ptr()) + b.dim() +
           reinterpret_cast<intptr_t>(c.data_ptr()) + c.dim() + static_cast<int64_t>(s.id());
}
TORCH_LIBRARY(kbench, m) {
  m.def("noop() -> ()", &Noop);
  m.def("ints3(int a, int b, int c) -> ()", &Ints3);
  m.def("str1(str s) -> ()", &Str1);
  m.def("tensors3(Tensor a, Tensor b, Tensor c) -> ()", &Tensors3);
  m.def("tensors3_stream(Tensor a, Tensor b, Tensor c) -> ()", &Tensors3Stream);
}
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using rel = py::call_guard<py::gil_scoped_release>;
  m.def("noop", &Noop);
  m.def("noop_nogil", &Noop, rel());
  m.def("ints3", &Ints3);
  m.def("ints3_nogil", &Ints3, rel());
  m.def("str1", [](const std::string& s) { g_sink = static_cast<int64_t>(s.size()); });
  m.def("str1_nogil", [](const std::string& s) { g_sink = static_cast<int64_t>(s.size()); }, rel());
  m.def("tensors3", &Tensors3);
  m.def("tensors3_nogil", &Tensors3, rel());
  m.def("tensors3_stream", &Tensors3Stream);
  m.def("tensors3_stream_nogil", &Tensors3Stream, rel());
}
"""

# ---------------------------------------------------------------------------------------------
# Building (cached by content hash)
# ---------------------------------------------------------------------------------------------


def log(msg):
    print(msg, file=sys.stderr, flush=True)


_CXX_VERSION = None


def cxx_version():
    global _CXX_VERSION
    if _CXX_VERSION is None:
        try:
            _CXX_VERSION = subprocess.run(
                [CXX, "--version"], capture_output=True, text=True, check=True
            ).stdout.splitlines()[0]
        except (OSError, subprocess.CalledProcessError):
            _CXX_VERSION = "unknown"
    return _CXX_VERSION


def tree_hash(path, suffixes=(".h", ".hpp", ".cuh")):
    """A hash of the headers under path (names and contents), for cache keys."""
    h = hashlib.sha1()
    p = Path(path)
    if p.is_dir():
        for f in sorted(p.rglob("*")):
            if f.is_file() and f.suffix in suffixes:
                h.update(str(f.relative_to(p)).encode())
                h.update(f.read_bytes())
    return h.hexdigest()[:16]


def cached_build(name, source, cmd_for, key_parts, suffix=".so", extra_sources=()):
    """Compiles source into build/bench_cache/<name>-<hash>/<name><suffix> unless it is there.

    cmd_for(src_path, out_path) gives the compiler command. Returns the output path.
    """
    key = hashlib.sha1()
    for part in [source, cxx_version(), sys.version, *key_parts, *(str(s) for s in extra_sources)]:
        key.update(str(part).encode())
        key.update(b"\0")
    d = CACHE / f"{name}-{key.hexdigest()[:12]}"
    out = d / f"{name}{suffix}"
    if out.exists():
        return out
    d.mkdir(parents=True, exist_ok=True)
    src = d / f"{name}.cc"
    src.write_text(source)
    tmp = d / f".tmp-{os.getpid()}{suffix}"
    cmd = cmd_for(src, tmp)
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        (d / "build.log").write_text(" ".join(map(str, cmd)) + "\n" + r.stdout + r.stderr)
        raise RuntimeError(
            f"building {name} failed (log: {d / 'build.log'}):\n" + (r.stderr or r.stdout)[-3000:]
        )
    os.replace(tmp, out)
    log(f"  built {name} in {time.perf_counter() - t0:.1f}s")
    return out


def py_includes():
    paths = sysconfig.get_paths()
    incs = {paths["include"], paths.get("platinclude", paths["include"])}
    return [f"-I{p}" for p in sorted(incs)]


def ext_suffix():
    return sysconfig.get_config_var("EXT_SUFFIX") or ".so"


def build_kffi():
    # kffi.cpp, the one way to build a kffi library (kffi-config's flags, cached by content), with
    # the optimisation flags every binding here gets. The other bindings are built by their own
    # toolchains (tvm-ffi-config, nanobind, pybind11, torch): cached_build below.
    import kffi.cpp

    return Path(
        kffi.cpp.build_inline("kbench_kffi", cpp_sources=KFFI_SRC, extra_cflags=OPT, quiet=True)
    )


def build_tvm():
    import tvm_ffi
    from tvm_ffi import libinfo

    inc = libinfo.find_include_path()
    libdir = os.path.dirname(libinfo.find_libtvm_ffi())

    def cmd(s, o):
        # Exactly what `tvm-ffi-config --cxxflags --ldflags --libs` prints, plus rpath/PIC.
        cfg = [sys.executable, "-m", "tvm_ffi.config", "--cxxflags", "--ldflags", "--libs"]
        flags = subprocess.run(cfg, capture_output=True, text=True, check=True).stdout.split()
        return [
            CXX,
            *OPT,
            "-shared",
            "-fPIC",
            "-fvisibility=hidden",
            str(s),
            "-o",
            str(o),
            *flags,
            f"-Wl,-rpath,{libdir}",
        ]

    return cached_build(
        "kbench_tvm", TVM_SRC, cmd, [tvm_ffi.__version__, inc, libdir, tree_hash(inc)]
    )


def build_nanobind():
    import kffi
    import nanobind

    nb_dir = Path(nanobind.__file__).parent
    inc = [
        f"-I{nanobind.include_dir()}",
        f"-I{nb_dir / 'ext' / 'robin_map' / 'include'}",
        f"-I{kffi.libinfo.include_dir()}",
    ]
    combined = Path(nanobind.source_dir()) / "nb_combined.cpp"
    # nanobind's own CMake defaults (release): -fno-strict-aliasing, compact assertions, no stack
    # protector; -O3 instead of its default -Os (the faster of the two for calls).
    flags = [
        *OPT,
        "-std=c++17",
        "-fPIC",
        "-shared",
        "-fvisibility=hidden",
        "-fno-strict-aliasing",
        "-fno-stack-protector",
        "-DNB_COMPACT_ASSERTIONS",
        *py_includes(),
        *inc,
    ]
    return cached_build(
        "kbench_nb",
        NB_SRC,
        lambda s, o: [CXX, *flags, str(s), str(combined), "-o", str(o)],
        [nanobind.__version__, " ".join(flags), tree_hash(nanobind.include_dir())],
        suffix=ext_suffix(),
    )


def pybind11_include():
    """(include dir, version) of pybind11: the package, else the copy PyTorch ships."""
    try:
        import pybind11

        return pybind11.get_include(), pybind11.__version__
    except ImportError:
        import torch.utils.cpp_extension as ce

        for d in ce.include_paths():
            common = Path(d) / "pybind11" / "detail" / "common.h"
            if common.exists():
                v = {}
                for ln in common.read_text().splitlines():
                    for k in ("MAJOR", "MINOR", "PATCH"):
                        if ln.startswith(f"#define PYBIND11_VERSION_{k} "):
                            v[k] = ln.split()[2]
                return d, "{}.{}.{} (bundled with torch)".format(
                    v.get("MAJOR", "?"), v.get("MINOR", "?"), v.get("PATCH", "?")
                )
        raise


def build_pybind11():
    import kffi

    inc, version = pybind11_include()
    flags = [
        *OPT,
        "-std=c++17",
        "-fPIC",
        "-shared",
        "-fvisibility=hidden",
        *py_includes(),
        f"-I{inc}",
        f"-I{kffi.libinfo.include_dir()}",
    ]
    return cached_build(
        "kbench_pb",
        PB_SRC,
        lambda s, o: [CXX, *flags, str(s), "-o", str(o)],
        [version, " ".join(flags)],
        suffix=ext_suffix(),
    )


def build_torch_ext():
    import torch
    from torch.utils import cpp_extension

    key = hashlib.sha1(
        "\0".join(
            [TORCH_SRC, torch.__version__, cxx_version(), sys.version, " ".join(OPT)]
        ).encode()
    ).hexdigest()[:12]
    name = f"kbench_torch_{key}"
    d = CACHE / name
    found = sorted(d.glob(f"{name}*.so")) if d.is_dir() else []
    so = found[0] if found else d / f"{name}.so"
    if not found:
        d.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        cpp_extension.load_inline(
            name=name,
            cpp_sources=[TORCH_SRC],
            build_directory=str(d),
            extra_cflags=list(OPT),
            verbose=False,
            is_python_module=False,
        )
        log(f"  built {name} in {time.perf_counter() - t0:.1f}s")
        found = sorted(d.glob(f"{name}*.so"))  # load_inline names it <name>.so
        if not found:
            raise RuntimeError("torch extension built but no .so found")
        so = found[0]
    return so


def import_extension(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
