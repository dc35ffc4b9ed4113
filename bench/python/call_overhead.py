#!/usr/bin/env python3
"""bench/python/call_overhead.py: Python -> native call overhead of kffi against its anchors.

One run measures, side by side and interleaved, the same tiny kernels bound seven ways:

  kffi         a kernel library built with kffi-config, loaded with kffi.load_module
  tvm-ffi      the same kernels built with tvm-ffi-config (TVM_FFI_DLL_EXPORT_TYPED_FUNC),
               loaded with tvm_ffi.load_module
  nanobind     an extension module compiled here with nanobind's sources (nb::ndarray for tensors)
  pybind11     an extension module (py::array for NumPy, the __dlpack__ protocol for torch)
  torch.ops    a torch.library custom op with a C++ kernel (torch.utils.cpp_extension.load_inline);
               falls back to a Python-registered custom op when the C++ build fails
  torch+pyb11  the same torch extension's pybind11 functions taking at::Tensor (the classic
               "torch C++ extension" binding)
  python       a plain Python function with an empty body (the interpreter's own call floor)

Cases: no-op with 0 args; 3 ints; 1 str; 3 NumPy arrays; 3 torch CPU tensors; 3 torch CUDA
tensors with stream pickup (only when torch.cuda.is_available()). Every case runs twice: with the
GIL held during the native call and with it released (bindings whose policy is fixed are shown in
both rows and marked). Ratios are kffi / anchor measured in the same run. These rows are tuned
(kffi.torch's reader asked for up front, --torch-import); below them, the default-path rows of
default_path.py (kffi and tvm-ffi in a fresh process with an empty cache and no compiler, nothing
tuned), unless --no-default-path.

Method: each cell (case x binding x GIL mode) is warmed up, calibrated to ~--sample-ms per
sample, then sampled --reps times in a shuffled order per repetition (interleaved, so drift hits
all bindings alike); the median per-call time of the samples is reported. The clock is this
thread's CPU time by default (robust on a busy machine); --clock wall uses wall time, and the
JSON keeps both.

Process state: a process that has only ever had one thread gets glibc's single-thread mutexes
(plain stores), and every GIL release + re-take is ~17 ns cheaper than once any second thread
has existed (atomics from then on, for good). The main table is measured in the first state
(builds in a child process, BLAS pools pinned to one thread, CUDA cells last); the no-op rows are
then measured again in the second state and printed below the table.

Usage: python3 bench/python/call_overhead.py [--out build/bench_python.json] [--reps 21]
                                             [--sample-ms 6] [--clock cpu|wall]
                                             [--compare old.json] [--skip BINDING ...]
Native builds are cached in build/bench_cache/ keyed by a hash of source, flags and versions.
The script never fails on a missed goal; a binding that cannot be built is skipped and named.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import argparse
import concurrent.futures
import gc
import hashlib
import importlib.util
import itertools
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import sysconfig
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / "build" / "bench_cache"
CXX = os.environ.get("CXX", "c++")
OPT = ["-O3", "-DNDEBUG"]

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


# ---------------------------------------------------------------------------------------------
# Bindings and cases
# ---------------------------------------------------------------------------------------------

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


_PY_OPS = []  # keeps the Python-registered custom ops alive


def register_python_ops(torch, add):
    """torch.library.custom_op ops with empty Python kernels (when the C++ extension is out)."""
    ns = "kbench_py"
    ops = getattr(torch.ops, ns)
    if not hasattr(ops, "noop"):
        # Explicit schemas: this module's annotations are strings (from __future__ import).
        for name, schema, params in [
            ("noop", "() -> ()", ""),
            ("ints3", "(int a, int b, int c) -> ()", "a, b, c"),
            ("str1", "(str s) -> ()", "s"),
            ("tensors3", "(Tensor a, Tensor b, Tensor c) -> ()", "a, b, c"),
        ]:
            fn = eval(f"lambda {params}: None")
            _PY_OPS.append(
                torch.library.custom_op(f"{ns}::{name}", fn, mutates_args=(), schema=schema)
            )
    for case, fname in [
        ("noop", "noop"),
        ("ints3", "ints3"),
        ("str1", "str1"),
        ("torch3", "tensors3"),
        ("cuda3", "tensors3"),
    ]:
        add("torch.ops", case, FIXED, getattr(ops, fname).default)
    return "Python-registered (torch.library.custom_op)"


def cuda_case_args():
    import torch

    return tuple(torch.zeros(16, device="cuda") for _ in range(3))


def os_thread_count():
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return None


def selected_builders(args):
    builders = {
        "kffi": build_kffi,
        "tvm-ffi": build_tvm,
        "nanobind": build_nanobind,
        "pybind11": build_pybind11,
    }
    skip = set(args.skip or [])
    if args.torch_op != "python" and not args.no_torch_ext and "torch.ops" not in skip:
        builders["torch-ext"] = build_torch_ext
    return {k: v for k, v in builders.items() if k not in skip}


def build_all(args):
    """--build-only: compiles every selected binding concurrently (a thread per compiler
    process); errors are left for the measuring process to report."""
    for mod in ("kffi", "tvm_ffi", "nanobind"):  # import in this thread first
        try:
            importlib.import_module(mod)
        except ImportError as e:
            log(f"  ! cannot import {mod}: {e}")
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as ex:
        for fut in [ex.submit(fn) for fn in selected_builders(args).values()]:
            try:
                fut.result()
            except Exception:  # noqa: S110 (failures are reported by the run itself)
                pass
    import torch  # asked here: initialising CUDA starts driver threads (see setup_bindings)

    print(json.dumps({"cuda_available": bool(torch.cuda.is_available())}))
    return 0


def setup_bindings(args):
    """Builds and loads every binding. Returns (funcs, skipped, info)

    funcs[(binding, case, gil)] = callable taking the case's args; gil is held/released/fixed.
    """
    import numpy as np
    import torch

    funcs, skipped, info = {}, {}, {}
    builders = selected_builders(args)
    skip = set(args.skip or [])
    t0 = time.perf_counter()
    # This process stays single-threaded until the CPU cells are measured (see
    # measure_threaded_state): the compiles run concurrently in a child process (build_all),
    # which also asks whether CUDA is there (initialising CUDA starts driver threads); here
    # every build is then a cache hit, made in this thread.
    child = subprocess.run(
        [sys.executable, __file__, "--build-only", *args.build_flags],
        text=True,
        stdout=subprocess.PIPE,
    )
    cuda_available = False
    if child.returncode != 0:
        log(f"  ! the build process exited with {child.returncode}; building here instead")
    else:
        cuda_available = json.loads(child.stdout.strip().splitlines()[-1])["cuda_available"]
    cuda = cuda_available and not args.no_cuda
    paths, errors = {}, {}
    for name, fn in builders.items():
        try:
            paths[name] = fn()
        except Exception as e:
            errors[name] = f"{type(e).__name__}: {str(e).strip()[:400]}"
    info["build_seconds"] = round(time.perf_counter() - t0, 2)
    for name, err in errors.items():
        log(f"  ! {name}: {err}")

    xs_np = tuple(np.zeros(16, np.float32) for _ in range(3))
    xs_t = tuple(torch.zeros(16) for _ in range(3))
    case_args = {
        "noop": (),
        "ints3": (1, 2, 3),
        "str1": ("hello",),
        "numpy3": xs_np,
        "torch3": xs_t,
    }
    if cuda:
        case_args["cuda3"] = (None,) * 3  # the tensors: cuda_case_args(), when the cells run
    exchange_cap = getattr(torch.Tensor, "__dlpack_c_exchange_api__", None)
    info["torch_has_dlpack_c_exchange_api"] = exchange_cap is not None

    def add(binding, case, gil, fn):
        if case in case_args:
            funcs[(binding, case, gil)] = fn

    # kffi
    if "kffi" in paths:
        import kffi

        mod = kffi.load_module(paths["kffi"])
        for case, fname in [
            ("noop", "noop"),
            ("ints3", "ints3"),
            ("str1", "str1"),
            ("numpy3", "tensors3"),
            ("torch3", "tensors3"),
            ("cuda3", "tensors3_stream"),
        ]:
            held = mod.get_function(fname)
            held.release_gil = False
            rel = mod.get_function(fname)
            rel.release_gil = True
            add("kffi", case, "held", held)
            add("kffi", case, "released", rel)
        torch_import = "exchange"
        if args.torch_import == "kffi.torch":
            import kffi.torch

            if kffi.torch.fast_tensor_import():
                torch_import = "kffi.torch"
            else:
                log("  ! kffi.torch's tensor import is unavailable; kffi uses the exchange API")
        info["kffi"] = {
            "version": kffi.__version__,
            "path": os.path.dirname(kffi.__file__),
            "default_release_gil": kffi.get_default_release_gil(),
            "torch_import": torch_import,
        }
    elif "kffi" in errors:
        skipped["kffi"] = errors["kffi"]
    # tvm-ffi
    if "tvm-ffi" in paths:
        import tvm_ffi

        mod = tvm_ffi.load_module(str(paths["tvm-ffi"]))
        for case, fname in [
            ("noop", "noop"),
            ("ints3", "ints3"),
            ("str1", "str1"),
            ("numpy3", "tensors3"),
            ("torch3", "tensors3"),
            ("cuda3", "tensors3_stream"),
        ]:
            held = mod.get_function(fname)
            held.release_gil = False
            rel = mod.get_function(fname)
            info["tvm_ffi_default_release_gil"] = bool(rel.release_gil)
            rel.release_gil = True  # its default (TVM_FFI_RELEASE_GIL_BY_DEFAULT=1), made sure
            add("tvm-ffi", case, "held", held)
            add("tvm-ffi", case, "released", rel)
        info["tvm_ffi"] = tvm_ffi.__version__
    elif "tvm-ffi" in errors:
        skipped["tvm-ffi"] = errors["tvm-ffi"]
    # nanobind and pybind11: each module has `<fn>` (GIL held) and `<fn>_nogil` (released)
    ext_cases = {
        "nanobind": (
            "kbench_nb",
            {"numpy3": "tensors3", "torch3": "tensors3", "cuda3": "tensors3_stream"},
        ),
        "pybind11": (
            "kbench_pb",
            {"numpy3": "arrays3", "torch3": "dlpack3", "cuda3": "dlpack3_stream"},
        ),
    }
    for binding, (module_name, tensor_fns) in ext_cases.items():
        if binding not in paths:
            if binding in errors:
                skipped[binding] = errors[binding]
            continue
        m = import_extension(module_name, paths[binding])
        if exchange_cap is not None:
            m.set_exchange_api(exchange_cap)
        fns = {"noop": "noop", "ints3": "ints3", "str1": "str1", **tensor_fns}
        for case, fname in fns.items():
            add(binding, case, "held", getattr(m, fname))
            add(binding, case, "released", getattr(m, fname + "_nogil"))
    # torch extension: torch.ops + pybind11(at::Tensor)
    torch_op_kind = None
    if "torch-ext" in paths:
        try:
            torch.ops.load_library(str(paths["torch-ext"]))
            m = import_extension(paths["torch-ext"].name.split(".")[0], paths["torch-ext"])
            ops = torch.ops.kbench
            for case, fname in [
                ("noop", "noop"),
                ("ints3", "ints3"),
                ("str1", "str1"),
                ("torch3", "tensors3"),
                ("cuda3", "tensors3_stream"),
            ]:
                add("torch.ops", case, FIXED, getattr(ops, fname).default)
                add("torch+pyb11", case, "held", getattr(m, fname))
                add("torch+pyb11", case, "released", getattr(m, fname + "_nogil"))
            torch_op_kind = "C++ kernel (load_inline, TORCH_LIBRARY)"
        except Exception as e:
            errors["torch-ext"] = f"{type(e).__name__}: {e}"
    if "torch-ext" in errors:
        skipped["torch+pyb11"] = errors["torch-ext"]
        log(
            f"  ! torch C++ extension unavailable ({errors['torch-ext'][:200]}); "
            "using a Python-registered custom op"
        )
    if torch_op_kind is None and args.torch_op != "none" and "torch.ops" not in skip:
        try:
            torch_op_kind = register_python_ops(torch, add)
        except Exception as e:
            skipped["torch.ops"] = f"{type(e).__name__}: {e}"
    info["torch_op_kind"] = torch_op_kind

    # plain Python
    def py0():
        pass

    def py1(a):
        pass

    def py3(a, b, c):
        pass

    for case in case_args:
        add("python", case, FIXED, {0: py0, 1: py1, 3: py3}[len(case_args[case])])
    info["cuda"] = cuda
    return funcs, case_args, skipped, info


# ---------------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------------


class CallTimer:
    """Times n calls of fn(*args) in a loop where fn and the arguments are locals (LOAD_FAST),
    like timeit but without a global lookup per call."""

    def __init__(self, fn, args):
        names = [f"a{i}" for i in range(len(args))]
        params = "".join(f", {n}" for n in names)
        src = (
            f"def inner(_it, _timer, _f{params}):\n"
            f"    _t0 = _timer()\n"
            f"    for _ in _it:\n"
            f"        _f({', '.join(names)})\n"
            f"    return _timer() - _t0\n"
        )
        ns = {}
        exec(src, ns)  # noqa: S102 - our own template
        self._inner, self._fn, self._args = ns["inner"], fn, tuple(args)

    def timeit(self, number, clock=time.perf_counter):
        return self._inner(itertools.repeat(None, number), clock, self._fn, *self._args)


def make_timer(fn, args):
    return CallTimer(fn, args)


def calibrate(timer, sample_s):
    n = 64
    while True:
        t = timer.timeit(n)
        if t > 0.2 * sample_s or n >= 1 << 24:
            return max(64, int(n * sample_s / max(t, 1e-9)))
        n *= 4


def run_benchmark(funcs, case_args, args):
    sample_s = args.sample_ms / 1000.0
    cells = []
    for (binding, case, gil), fn in funcs.items():
        try:
            fn(*case_args[case])  # smoke + first-call setup
        except Exception as e:
            log(f"  ! {binding}/{case}: call failed: {type(e).__name__}: {e}")
            continue
        timer = make_timer(fn, case_args[case])
        timer.timeit(2000)  # warm-up
        cells.append(
            {
                "binding": binding,
                "case": case,
                "gil": gil,
                "timer": timer,
                "number": calibrate(timer, sample_s),
                "samples_cpu": [],
                "samples_wall": [],
            }
        )
    rng = random.Random(1234)
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for _rep in range(args.reps):
            order = list(range(len(cells)))
            rng.shuffle(order)
            for i in order:
                c = cells[i]
                # Thread CPU time and wall time of the same loop: CPU time does not count the
                # time this thread was preempted (a shared or busy machine), wall time does.
                w0 = time.perf_counter()
                cpu = c["timer"].timeit(c["number"], time.thread_time)
                wall = time.perf_counter() - w0
                c["samples_cpu"].append(cpu / c["number"] * 1e9)
                c["samples_wall"].append(wall / c["number"] * 1e9)
    finally:
        if gc_was:
            gc.enable()
    # The timing loop plus one of the cheapest C calls there is (an empty list's bound clear(),
    # METH_NOARGS): a floor under every binding's number.
    empty = CallTimer([].clear, ())
    floor = statistics.median(
        empty.timeit(200_000, time.thread_time if args.clock == "cpu" else time.perf_counter)
        / 200_000
        * 1e9
        for _ in range(9)
    )
    overhead = {"loop_plus_c_call_ns": round(floor, 2)}
    return cells, overhead


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------

GOALS = [
    # (name, case, anchor, max ratio kffi/anchor)
    ("0 args vs nanobind", "noop", "nanobind", 1.0),
    ("0 args vs tvm-ffi", "noop", "tvm-ffi", 0.65),
    ("3 torch tensors vs tvm-ffi", "torch3", "tvm-ffi", 0.6),
    ("3 NumPy arrays vs tvm-ffi", "numpy3", "tvm-ffi", 0.8),
]


def median_of(results, binding, case, gil):
    r = results.get(case, {}).get(gil, {}).get(binding)
    if r is None:
        r = results.get(case, {}).get(FIXED, {}).get(binding)
    return None if r is None else r["median_ns"]


def summarize(cells, clock):
    results = {}
    for c in cells:
        s = c["samples_" + clock]
        q = statistics.quantiles(s, n=4) if len(s) >= 2 else [s[0], s[0], s[0]]
        results.setdefault(c["case"], {}).setdefault(c["gil"], {})[c["binding"]] = {
            "median_ns": round(statistics.median(s), 2),
            "min_ns": round(min(s), 2),
            "iqr_ns": round(q[2] - q[0], 2),
            "median_cpu_ns": round(statistics.median(c["samples_cpu"]), 2),
            "median_wall_ns": round(statistics.median(c["samples_wall"]), 2),
            "calls_per_sample": c["number"],
            "samples_cpu_ns": [round(x, 2) for x in c["samples_cpu"]],
            "samples_wall_ns": [round(x, 2) for x in c["samples_wall"]],
        }
    ratios = {}
    for case, _ in CASES:
        for gil in GILS:
            k = median_of(results, "kffi", case, gil)
            if k is None:
                continue
            for b in BINDINGS[1:]:
                o = median_of(results, b, case, gil)
                if o:
                    ratios.setdefault(case, {}).setdefault(gil, {})[b] = round(k / o, 3)
    goals = []
    for name, case, anchor, limit in GOALS:
        for gil in GILS:
            r = ratios.get(case, {}).get(gil, {}).get(anchor)
            goals.append(
                {
                    "goal": name,
                    "case": case,
                    "gil": gil,
                    "anchor": anchor,
                    "max_ratio": limit,
                    "ratio": r,
                    "status": "n/a" if r is None else ("PASS" if r <= limit else "MISS"),
                }
            )
    return results, ratios, goals


def gil_round_trip(results):
    """What releasing and re-taking the GIL adds to a no-op call, per binding (released - held),
    and what the 0-args goal against tvm-ffi leaves kffi when both release: the evidence for
    whether that goal is reachable at all on this interpreter and machine."""
    out = {}
    for b in ("kffi", "tvm-ffi", "nanobind", "pybind11"):
        held = median_of(results, b, "noop", "held")
        rel = median_of(results, b, "noop", "released")
        if held is not None and rel is not None:
            out[b] = round(rel - held, 2)
    tvm_rel = median_of(results, "tvm-ffi", "noop", "released")
    k_held = median_of(results, "kffi", "noop", "held")
    if tvm_rel is not None and k_held is not None:
        out["budget_for_release_at_0.65x_tvm"] = round(0.65 * tvm_rel - k_held, 2)
    return out


def contend_gil_once(seconds=0.05):
    """Runs a second thread that waits for the GIL while this one runs, then ends it."""
    stop = time.perf_counter() + seconds

    def spin():
        while time.perf_counter() < stop:
            pass

    t = threading.Thread(target=spin)
    t.start()
    spin()
    t.join()


def measure_threaded_state(funcs, case_args, args):
    """The no-op rows again once this process has had a second thread.

    A process that has only ever had one thread gets glibc's single-thread fast path: its mutex
    lock and unlock are plain stores, and CPython's GIL release + re-take (two mutexes, a
    condition variable) costs ~22 ns (dev VM, Python 3.11) / ~33 ns (H200 host, 3.12). From the
    first second thread on (a thread pool, a BLAS pool, CUDA's driver threads) they are atomic
    read-modify-writes for good, even after that thread ends: ~40 / ~46 ns, for every binding
    that releases the GIL. The main table is measured in the first state (builds run in a child
    process, CUDA cells last); these rows show the second, so both are on record."""
    contend_gil_once()
    noop = {k: v for k, v in funcs.items() if k[1] == "noop"}
    cells, _ = run_benchmark(noop, case_args, args)
    results, ratios, _ = summarize(cells, args.clock)
    return {
        "results": {
            g: {b: r["median_ns"] for b, r in v.items()} for g, v in results.get("noop", {}).items()
        },
        "ratios_kffi_over": ratios.get("noop", {}),
        "gil_round_trip_ns": gil_round_trip(results),
        "results_full": results,
    }


def print_threaded_state(threaded):
    results = threaded["results_full"]
    print(
        "\nno-op, 0 args once the process has had a second thread (glibc's mutexes then use "
        "atomics; same goals, informational):"
    )
    for gil in GILS:
        k = median_of(results, "kffi", "noop", gil)
        if k is None:
            continue
        parts = [f"kffi {fmt_ns(k)}"]
        for b in ("tvm-ffi", "nanobind", "pybind11"):
            o = median_of(results, b, "noop", gil)
            if o:
                parts.append(f"{b} {fmt_ns(o)} ({k / o:.2f}x)")
        print(f"  GIL {gil:<8} " + ", ".join(parts))
    rt = threaded["gil_round_trip_ns"]
    if rt:
        print(f"  GIL release + re-take (released - held, ns): {fmt_round_trip(rt)}")


def fmt_round_trip(rt):
    """The per-binding entries of gil_round_trip() as "kffi 23.1, tvm-ffi 22.4, ..."."""
    return ", ".join(f"{b} {v:.1f}" for b, v in rt.items() if not b.startswith("budget"))


def fmt_ns(x):
    return "-" if x is None else (f"{x:.0f}" if x >= 100 else f"{x:.1f}")


def print_table(results, ratios, goals, info, overhead, skipped, clock):
    present = [b for b in BINDINGS if any(b in g for c in results.values() for g in c.values())]
    op_kind = "py" if str(info.get("torch_op_kind", "")).startswith("Python") else "C++"
    hdr = ["case", "GIL", "kffi ns"] + [
        f"torch.ops[{op_kind}]" if b == "torch.ops" else b for b in present if b != "kffi"
    ]
    rows = []
    for case, label in CASES:
        if case not in results:
            continue
        for gil in GILS:
            k = median_of(results, "kffi", case, gil)
            row = [label, gil, fmt_ns(k)]
            for b in present:
                if b == "kffi":
                    continue
                o = median_of(results, b, case, gil)
                if o is None:
                    row.append("n/a")
                    continue
                fixed = FIXED in results[case] and b in results[case][FIXED]
                r = ratios.get(case, {}).get(gil, {}).get(b)
                cell = f"{fmt_ns(o)}{'*' if fixed else ''}"
                if r is not None:
                    cell += f" ({r:.2f}x)"
                row.append(cell)
            rows.append(row)
    widths = [max(len(str(r[i])) for r in rows + [hdr]) for i in range(len(hdr))]

    def line(r):
        return "  ".join(
            str(v).ljust(w) if i < 2 else str(v).rjust(w) for i, (v, w) in enumerate(zip(r, widths))
        )

    print()
    print(
        f"Python call overhead, median ns per call ({clock} clock; ratio = kffi / that binding, "
        "<1 = kffi faster)"
    )
    print(line(hdr))
    print("  ".join("-" * w for w in widths))
    prev = None
    for r in rows:
        if prev is not None and r[0] != prev:
            pass
        print(line(r))
        prev = r[0]
    print()
    print(
        "* GIL policy fixed by the binding (measured once, shown in both rows): torch.ops "
        "always releases the GIL; python never does."
    )
    print(
        f"torch.ops kernel: {info.get('torch_op_kind')}; "
        f"floor (timing loop + [].clear() call): {overhead['loop_plus_c_call_ns']:.1f} ns, "
        "included in every number."
    )
    blas = {v: os.environ.get(v) for v in BLAS_VARS}
    print(
        "BLAS/OpenMP pools: "
        + ", ".join(f"{k}={v}" for k, v in blas.items())
        + f" (a pool of several threads makes the process multi-threaded; see --blas-threads); "
        f"OS threads while the CPU cells ran: {info.get('os_threads_at_cpu_cells')}"
    )
    for b, why in skipped.items():
        print(f"skipped {b}: {why}")
    print()
    print(
        "What each binding does (the same work per case: nothing / sum 3 int64 / length of a "
        "str / data pointer + ndim of 3 tensors, + the current stream for CUDA):"
    )
    import textwrap

    for b in present:
        d = DESCRIBE["torch.ops(py)"] if b == "torch.ops" and op_kind == "py" else DESCRIBE[b]
        print(
            textwrap.fill(
                d, width=100, initial_indent=f"  {b + ':':<13}", subsequent_indent=" " * 15
            )
        )
    print()
    print("Goals (informational):")
    for g in goals:
        r = "-" if g["ratio"] is None else f"{g['ratio']:.2f}x"
        print(
            f"  {g['status']:4}  {g['goal']:<28} GIL {g['gil']:<8} kffi/{g['anchor']} = {r} "
            f"(goal <= {g['max_ratio']:g}x)"
        )
    rt = gil_round_trip(results)
    if rt:
        print(
            f"\nGIL release + re-take on a no-op call (released - held, ns): {fmt_round_trip(rt)}"
        )
        if "budget_for_release_at_0.65x_tvm" in rt:
            print(
                f"  0 args <= 0.65x tvm-ffi with both releasing leaves kffi "
                f"{rt['budget_for_release_at_0.65x_tvm']:.1f} ns for the release itself "
                f"(0.65 x tvm-ffi released - kffi held)"
            )


def print_compare(results, old_path):
    try:
        old = json.loads(Path(old_path).read_text())["results"]
    except (OSError, ValueError, KeyError) as e:
        log(f"cannot read {old_path}: {e}")
        return
    print()
    print(f"kffi vs {old_path} (median ns: old -> new)")
    for case, _ in CASES:
        for gil in GILS:
            n = median_of(results, "kffi", case, gil)
            o = median_of(old, "kffi", case, gil)
            if n is None or o is None:
                continue
            print(f"  {case:<8} {gil:<9} {o:8.1f} -> {n:8.1f}  ({(n / o - 1) * 100:+.1f}%)")


def environment(info):
    import numpy
    import torch

    env = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "cxx": cxx_version(),
        "numpy": numpy.__version__,
        "torch": torch.__version__,
    }
    try:
        with open("/proc/cpuinfo") as f:
            for ln in f:
                if ln.startswith("model name"):
                    env["cpu"] = ln.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        env["nanobind"] = __import__("nanobind").__version__
    except ImportError:
        pass
    try:
        env["pybind11"] = pybind11_include()[1]
    except Exception:  # noqa: S110 (pybind11 is optional: its version is left out)
        pass
    env.update({k: v for k, v in info.items()})
    return env


def check_stale_install():
    """Warns when python/src is newer than the installed kffi extension (bench measures that)."""
    try:
        import kffi

        core = Path(kffi._core.__file__)
        newest = max((p.stat().st_mtime for p in (ROOT / "python" / "src").glob("*")), default=0)
        if newest > core.stat().st_mtime:
            log(
                "  ! python/src is newer than the installed kffi._core: reinstall "
                "(pip install --no-build-isolation .) to measure the current sources"
            )
    except Exception:  # noqa: S110 (the staleness warning is best effort)
        pass


BLAS_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def set_blas_threads(mode):
    """Pins the BLAS/OpenMP thread pools that NumPy and torch start at import to one thread.

    Why: a pool of more than one thread makes this process multi-threaded from the import on,
    and then every GIL release + re-take costs ~17 ns more for every binding (glibc's mutexes
    switch from plain stores to atomics; see measure_threaded_state). The call-overhead rows are
    measured single-threaded by default; --blas-threads default keeps the pools (variables the
    caller set are left alone either way)."""
    if mode == "default":
        return
    if "numpy" in sys.modules or "torch" in sys.modules:
        log("warning: NumPy/torch already imported: --blas-threads 1 has no effect")
    for var in BLAS_VARS:
        os.environ.setdefault(var, "1")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "build" / "bench_python.json"))
    ap.add_argument("--reps", type=int, default=21, help="timing samples per cell (median)")
    ap.add_argument("--sample-ms", type=float, default=6.0, help="target duration of one sample")
    ap.add_argument(
        "--torch-op",
        choices=["cpp", "python", "none"],
        default="cpp",
        help="torch custom op kernel: C++ (fallback python), python, or none",
    )
    ap.add_argument(
        "--no-torch-ext",
        action="store_true",
        help="skip the torch C++ extension (torch.ops C++ kernel, torch+pyb11)",
    )
    ap.add_argument("--no-cuda", action="store_true", help="skip the CUDA case")
    ap.add_argument(
        "--torch-import",
        choices=["kffi.torch", "exchange"],
        default="kffi.torch",
        help="how kffi reads torch tensors: kffi.torch's direct read (kffi.torch."
        "fast_tensor_import, on where kffi.torch is set up) or torch's DLPack exchange API",
    )
    ap.add_argument(
        "--skip",
        nargs="*",
        choices=["kffi", "tvm-ffi", "nanobind", "pybind11", "torch.ops"],
        help="bindings to leave out",
    )
    ap.add_argument(
        "--clock",
        choices=["cpu", "wall"],
        default="cpu",
        help="what median_ns (table, ratios, goals) uses: this thread's CPU time "
        "(robust on a shared machine) or wall time; the JSON keeps both",
    )
    ap.add_argument("--compare", help="a previous JSON to compare kffi's medians with")
    ap.add_argument(
        "--no-default-path",
        action="store_true",
        help="skip the default-path rows (fresh processes, empty cache, nothing tuned)",
    )
    ap.add_argument(
        "--blas-threads",
        choices=["1", "default"],
        default="1",
        help="1 (default): BLAS/OpenMP pools of NumPy and torch get one thread, set "
        "before they load; default: leave them as the environment says",
    )
    ap.add_argument("--build-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    set_blas_threads(args.blas_threads)
    args.build_flags = [
        "--torch-op",
        args.torch_op,
        *(["--no-torch-ext"] if args.no_torch_ext else []),
        *(["--skip", *args.skip] if args.skip else []),
    ]
    if args.build_only:
        return build_all(args)

    t_start = time.perf_counter()
    log("building / loading bindings (cached in build/bench_cache) ...")
    check_stale_install()
    funcs, case_args, skipped, info = setup_bindings(args)
    log(f"measuring {len(funcs)} cells x {args.reps} samples ...")
    # CPU cells first, while this process has only ever had one thread; then the no-op rows in
    # the multi-threaded state; then the CUDA cells (CUDA starts driver threads).
    info["os_threads_at_cpu_cells"] = os_thread_count()
    cpu_funcs = {k: v for k, v in funcs.items() if k[1] != "cuda3"}
    cells, overhead = run_benchmark(cpu_funcs, case_args, args)
    threaded = measure_threaded_state(funcs, case_args, args)
    cuda_funcs = {k: v for k, v in funcs.items() if k[1] == "cuda3"}
    if cuda_funcs:
        case_args["cuda3"] = cuda_case_args()
        cells += run_benchmark(cuda_funcs, case_args, args)[0]
    results, ratios, goals = summarize(cells, args.clock)
    print_table(results, ratios, goals, info, overhead, skipped, args.clock)
    print_threaded_state(threaded)
    default = None
    if not args.no_default_path:
        # What a user gets untuned, beside the tuned rows above (bench/python/default_path.py):
        # run after them, so its processes do not share this one's threads.
        import default_path

        default = default_path.percall_rows(max(9, args.reps // 2), info.get("cuda", False))
        default_path.print_percall(default)
    if args.compare:
        print_compare(results, args.compare)
    doc = {
        "schema": 1,
        "what": "Python call overhead: median ns per call over interleaved timing samples",
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "settings": {
            "reps": args.reps,
            "sample_ms": args.sample_ms,
            "opt": OPT,
            "clock": args.clock,
            "blas_threads": args.blas_threads,
            "blas_env": {v: os.environ.get(v) for v in BLAS_VARS},
        },
        "environment": environment(info),
        "loop_overhead": overhead,
        "bindings": {b: DESCRIBE[b] for b in BINDINGS if b in DESCRIBE},
        "cases": dict(CASES),
        "results": results,
        "ratios_kffi_over": ratios,
        "goals": goals,
        "gil_round_trip_ns": gil_round_trip(results),
        "multi_threaded_process": {k: v for k, v in threaded.items() if k != "results_full"},
        "default_path": default,
        "skipped": skipped,
        "total_seconds": round(time.perf_counter() - t_start, 1),
    }
    if str(info.get("torch_op_kind") or "").startswith("Python"):
        doc["bindings"]["torch.ops"] = DESCRIBE["torch.ops(py)"]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1))
    print(f"\nJSON: {out}  (total {doc['total_seconds']}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
