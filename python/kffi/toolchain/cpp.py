"""python/kffi/toolchain/cpp.py: build and load C++/CUDA kernel libraries at run time (JIT), cached on disk.

    mod = kffi.cpp.load_inline("scale", cpp_sources=SRC, functions=["scale"])
    mod.scale(y, x, 2.0)

Every build is keyed by a hash of its sources, flags, compilers (path and ``--version``), the kffi
version, ABI version and headers. The library lands in ``$KFFI_CACHE_DIR`` (default
``$XDG_CACHE_HOME/kffi`` or ``~/.cache/kffi``) under ``<name>_<hash>/``; a later call with the same
key loads it without running any compiler, in this process or another. Processes that build the
same key at once take turns on a lock file (``fcntl.flock``) and the library appears by an atomic
rename, so none ever loads a half-written file. Beside the library lies its size and SHA-256
(``<library>.sha256``): a library that does not match them (a damaged cache entry) is built again.

Environment: ``CXX`` (C++ compiler, default ``c++``), ``KFFI_NVCC`` / ``CUDA_HOME`` (nvcc),
``KFFI_CUDA_ARCH`` (e.g. ``90``, ``8.0;9.0a``, ``90+PTX``; default: the architectures of the GPUs
on this machine, as NVML reports them, else nvcc's own),
``KFFI_CACHE_DIR``, ``KFFI_BUILD_QUIET=1`` (no progress lines).
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from .. import _core, config, libinfo
from .._lazy import lazy
from ..runtime._api import load_module
from ..runtime._objects import Module
from ._compilers import (  # noqa: F401 (re-exported: kffi.cpp is the toolchain's face)
    BuildError,
    _Compiler,
    _compiler_output,
    _cuda_homes,
    _cxx,
    _nvcc,
    _nvcc_path,
    _resolve,
    _run,
    get_compiler_invocations,
    nvcc_available,
)
from ._files import (  # noqa: F401 (re-exported: kffi.cpp is the toolchain's face)
    _cache_entry_intact,
    _keep_record,
    _locked,
    _LockSite,
    _write_atomic,
    cache_dir,
)
from ._source import (  # noqa: F401 (re-exported: kffi.cpp is the toolchain's face)
    _split_top_level,
    c_string_literal,
    cpp_param_names,
    export_lines,
    names_undeclared,
    strip_comments,
)

# What the public functions take: one path or flag, or a list of them.
StrPath: TypeAlias = "str | os.PathLike[str]"
Paths: TypeAlias = "StrPath | Sequence[StrPath] | None"
Flags: TypeAlias = "str | Sequence[str] | None"
Texts: TypeAlias = "str | Sequence[str] | None"

__all__ = [
    "PRE_INCLUDES",
    "BuildError",
    "build",
    "build_inline",
    "c_string_literal",
    "cache_dir",
    "cpp_param_names",
    "get_compiler_invocations",
    "load_inline",
    "nvcc_available",
]

_CUDA_SUFFIXES = (".cu", ".cuh")
# Headers included before inline sources by load_inline: those of <kffi/kffi.h> but the contract
# compiler, whose parsing alone costs a cold build about 0.7 s of CPU (kffi.compile, which needs
# it, includes <kffi/kffi.h>; tests/python/contract/test_contract_features.py holds the list to
# kffi.h's).
PRE_INCLUDES = (
    "kffi/any.h",
    "kffi/container/containers.h",
    "kffi/dispatch.h",
    "kffi/dtype.h",
    "kffi/env.h",
    "kffi/error.h",
    "kffi/export.h",
    "kffi/function.h",
    "kffi/half.h",
    "kffi/module.h",
    "kffi/object.h",
    "kffi/optional.h",
    "kffi/string.h",
    "kffi/tensor.h",
    "kffi/tensor_checks.h",
    "kffi/variant.h",
)
_KEY_SCHEMA = "kffi.cpp/2"  # bump when the layout or the commands change meaning


# ---------------------------------------------------------------------------------------------
# Where builds go, and which compilers make them.
# ---------------------------------------------------------------------------------------------


def _gencode(arch: str, ptx: bool = False) -> list[str]:
    flags = [f"-gencode=arch=compute_{arch},code=sm_{arch}"]
    if ptx:
        flags.append(f"-gencode=arch=compute_{arch},code=compute_{arch}")
    return flags


@lazy
def _machine_gpu_archs() -> tuple[str, ...]:
    """The compute capabilities ("90", "80", ...) of the NVIDIA GPUs on this machine, ascending.

    () without a driver or a GPU. Read through NVML (libnvidia-ml), not the CUDA driver API:
    cuInit would create driver state in this process, and a process forked after it cannot use
    CUDA (multiprocessing's default start method on Linux). All GPUs count, visible or not: a
    library built for each of them runs wherever CUDA_VISIBLE_DEVICES points later.
    """
    import ctypes

    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return ()
    if nvml.nvmlInit_v2() != 0:
        return ()
    try:
        count = ctypes.c_uint(0)
        if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
            return ()
        archs: set[int] = set()
        for i in range(count.value):
            handle = ctypes.c_void_p()
            major, minor = ctypes.c_int(0), ctypes.c_int(0)
            if (
                nvml.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(handle)) == 0
                and nvml.nvmlDeviceGetCudaComputeCapability(
                    handle, ctypes.byref(major), ctypes.byref(minor)
                )
                == 0
                and major.value > 0
            ):
                archs.add(major.value * 10 + minor.value)
        return tuple(str(a) for a in sorted(archs))
    finally:
        nvml.nvmlShutdown()


def _nvcc_gpu_codes(nvcc: _Compiler) -> tuple[str, ...]:
    """The real architectures ("75", "90", ...) nvcc generates code for, ascending.

    From its --list-gpu-code; () when it cannot say (an old nvcc).
    """
    out = _compiler_output(nvcc.argv, nvcc.path, "--list-gpu-code") or ""
    codes = {int(m.group(1)) for m in re.finditer(r"^sm_(\d{2,3})\s*$", out, re.MULTILINE)}
    return tuple(str(c) for c in sorted(codes))


def _cuda_arch_flags(nvcc: _Compiler | None = None) -> list[str]:
    """-gencode flags from $KFFI_CUDA_ARCH ("90", "9.0", "sm_90a", "80;90+PTX").

    Unset: native code for each GPU architecture of this machine that nvcc supports (so nothing is JIT-compiled from
    PTX at load, and the kernels are the ones the hardware runs best; PTX of nvcc's newest
    architecture is added for a GPU newer than nvcc). [] = nvcc's default (no GPU found).
    """
    spec = os.environ.get("KFFI_CUDA_ARCH", "").strip()
    if not spec:
        return _machine_arch_flags(nvcc)
    flags: list[str] = []
    for item in re.split(r"[;,\s]+", spec):
        if not item:
            continue
        ptx = item.upper().endswith("+PTX")
        arch = item[:-4] if ptx else item
        arch = re.sub(r"^(sm_|compute_)", "", arch).replace(".", "")
        if not re.fullmatch(r"\d{2,3}[af]?", arch):
            raise ValueError(
                f"KFFI_CUDA_ARCH: cannot read {item!r} (expected e.g. 90, 9.0, sm_90a or 90+PTX)"
            )
        flags += _gencode(arch, ptx)
    return flags


def _machine_arch_flags(nvcc: _Compiler | None) -> list[str]:
    gpus = _machine_gpu_archs()
    codes = _nvcc_gpu_codes(nvcc or _nvcc()) if gpus else ()
    if not codes:
        return []  # no GPU, or nvcc cannot list its architectures: nvcc's default
    flags: list[str] = []
    for arch in gpus:
        if arch in codes:
            flags += _gencode(arch)
    if int(gpus[-1]) > int(codes[-1]):  # a GPU newer than nvcc: its newest PTX, JIT-compiled
        flags.append(f"-gencode=arch=compute_{codes[-1]},code=compute_{codes[-1]}")
    return flags


def _cuda_lib_dir(nvcc_path: str) -> str | None:
    """The folder of libcudart.so: beside the nvcc in use, else in a CUDA home."""
    homes = [os.path.dirname(os.path.dirname(nvcc_path))] + _cuda_homes()
    for home in homes:
        for sub in ("lib64", os.path.join("targets", "x86_64-linux", "lib"), "lib"):
            if os.path.exists(os.path.join(home, sub, "libcudart.so")):
                return os.path.join(home, sub)
    return None  # let the linker search its default paths


# ---------------------------------------------------------------------------------------------
# The cache key.
# ---------------------------------------------------------------------------------------------


def _headers_digest(root: str, names: Sequence[str] | None = None) -> str:
    """SHA-256 (hex) of the headers a build depends on.

    Each file's path relative to ``root`` and its bytes, in order. ``names`` lists the files (paths relative to root); None takes every
    file under root, in sorted order. The one digest of headers for every build key (kffi's own
    headers here, torch's headers in kffi.torch); a file that cannot be read raises OSError,
    which the caller words (it knows which package should have shipped the file).
    """
    if names is None:
        found: list[str] = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            found += [os.path.relpath(os.path.join(dirpath, fn), root) for fn in sorted(filenames)]
        names = found
    h = hashlib.sha256()
    for name in names:
        with open(os.path.join(root, name), "rb") as f:
            h.update(name.encode() + b"\0" + f.read())
    return h.hexdigest()


def _headers_key(root: str, names: Sequence[str] | None, what: str, remedy: str) -> str:
    """_headers_digest as a build key (24 hex digits).

    An unreadable header is a RuntimeError naming it: "<what> <path> cannot be read (<why>);
    <remedy>".
    """
    try:
        return _headers_digest(root, names)[:24]
    except OSError as e:
        raise RuntimeError(f"{what} {e.filename} cannot be read ({e}); {remedy}") from None


@lazy
def _kffi_identity() -> str:
    """The kffi version, ABI version and a digest of the installed headers.

    The headers change in development without a version bump.
    """
    version = repr(tuple(_core.runtime_version()))
    # The names libkffi is installed under: a library links to the SONAME it finds (libkffi.so
    # in the Python package, libkffi.so.0 from a CMake install), so another layout is another key.
    try:
        names = sorted(n for n in os.listdir(libinfo.lib_dir()) if n.startswith("libkffi.so"))
    except OSError:
        names = []
    return hashlib.sha256(
        f"{version}\0{_headers_digest(libinfo.include_dir())}\0{names}".encode()
    ).hexdigest()


@dataclass
class _Source:
    filename: str  # name of the file the compiler reads (inside the build dir when text is set)
    text: bytes
    path: str | None  # a user's file, compiled where it is; None: written into the build dir

    @property
    def inline(self) -> bool:
        return self.path is None

    @property
    def is_cuda(self) -> bool:
        return self.filename.endswith(_CUDA_SUFFIXES)


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", name):
        raise ValueError(
            f"kffi.cpp: a build name is letters, digits, '_', '.', '-' (a file name), got {name!r}"
        )


def _str_list(value: Any, what: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, (str, os.PathLike)):
        return [os.fspath(value)]
    try:
        items = list(value)
    except TypeError:
        raise TypeError(
            f"kffi.cpp: {what} must be a str or a list of str, got {type(value).__name__}"
        ) from None
    for i, v in enumerate(items):
        if not isinstance(v, (str, os.PathLike)):
            raise TypeError(
                f"kffi.cpp: {what} must be a str or a list of str, got {type(v).__name__} "
                f"{v!r} at index {i}"
            )
    return [os.fspath(v) for v in items]


def _depends_key(depends: Paths, where: str) -> list[tuple[str, str]]:
    """[(absolute path, SHA-256 of its bytes)] of the extra files a build depends on.

    Headers the sources include, data they embed: a change to any of them makes a new build key.
    """
    out = []
    for p in _str_list(depends, "depends"):
        p = os.path.abspath(p)
        try:
            with open(p, "rb") as f:
                out.append((p, hashlib.sha256(f.read()).hexdigest()))
        except OSError as e:
            raise FileNotFoundError(f"{where}: cannot read depends file {p!r}: {e}") from None
    return out


@lazy
def _config_flags() -> dict[str, list[str]]:
    """What kffi-config prints (its --cxxflags, --nvccflags, and --ldflags --libs), as lists.

    The one source of the flags a library built against kffi needs, the same script that
    builds without CMake use (cmake/kffi-config.in). Its folders are asked for alone and kept
    whole, so a path with spaces stays one argument.
    """
    script = config._SCRIPT

    def ask(*options: str) -> str:
        try:
            proc = subprocess.run(["sh", script, *options], capture_output=True, text=True)
        except OSError as e:
            raise RuntimeError(f"kffi.cpp: cannot run kffi-config ({script}): {e}") from None
        if proc.returncode != 0:
            raise RuntimeError(
                f"kffi.cpp: kffi-config ({script}) failed: {proc.stderr.strip()}; reinstall kffi"
            )
        return proc.stdout.rstrip("\n")

    dirs = {"\0I\0": ask("--includedir"), "\0L\0": ask("--libdir")}

    def args(*options: str) -> list[str]:
        text = ask(*options)
        for mark, path in dirs.items():
            text = text.replace(path, mark)
        out = []
        for arg in text.split():
            for mark, path in dirs.items():
                arg = arg.replace(mark, path)
            out.append(arg)
        return out

    return {
        "cxx": args("--cxxflags"),
        "nvcc": args("--nvccflags"),
        "link": args("--ldflags", "--libs"),
    }


class _Plan:
    """One build: what to compile with which flags, its key and where it goes."""

    def __init__(
        self,
        name: str,
        sources: list[_Source],
        cflags: list[str],
        cuda_cflags: list[str],
        ldflags: list[str],
        include_paths: list[str],
        build_directory: StrPath | None,
        pre_includes: Sequence[str] = PRE_INCLUDES,
        depends: Paths = (),
    ) -> None:
        _check_name(name)
        self.name = name
        self.sources = sources
        self.cflags = cflags
        self.cuda_cflags = cuda_cflags
        self.ldflags = ldflags
        self.include_paths = [os.path.abspath(p) for p in include_paths]
        self.pre_includes = tuple(pre_includes)
        self.cuda = any(s.is_cuda for s in sources)
        self.cxx = _cxx()
        self.nvcc = _nvcc() if self.cuda else None
        self.arch_flags = _cuda_arch_flags(self.nvcc) if self.cuda else []
        # nvcc names its temporary files after its process ID, and that name lands in the
        # object's symbol table; with -objtemp (CUDA 12.x and later) it names them after the
        # object, whose name here is fixed.
        self.nvcc_objtemp = self.nvcc is not None and "--objdir-as-tempdir" in (
            _compiler_output(self.nvcc.argv, self.nvcc.path, "--help") or ""
        )
        key: dict[str, Any] = {
            "schema": _KEY_SCHEMA,
            "name": name,
            "kffi": _kffi_identity(),
            "kffi_flags": _config_flags(),  # kffi-config's: -I, -L and the rpath among them
            "sources": [(s.filename, s.path, hashlib.sha256(s.text).hexdigest()) for s in sources],
            "cflags": cflags,
            "cuda_cflags": cuda_cflags,
            "ldflags": ldflags,
            "include_paths": self.include_paths,
            "cxx": [self.cxx.argv, self.cxx.path, self.cxx.version],
            "nvcc": [self.nvcc.argv, self.nvcc.path, self.nvcc.version] if self.nvcc else None,
            "arch": self.arch_flags,
            "platform": sys.platform,
            "pre_includes": self.pre_includes,
        }
        if depends:  # absent when empty: builds without depends= keep their keys
            key["depends"] = _depends_key(depends, "kffi.cpp")
        self.hash = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
        if build_directory is None:
            self.dir = os.path.join(cache_dir(), f"{name}_{self.hash}")
        elif isinstance(build_directory, (str, os.PathLike)):
            self.dir = os.path.abspath(os.fspath(build_directory))
        else:
            raise TypeError(
                "kffi.cpp: build_directory must be a str or an os.PathLike, got "
                f"{type(build_directory).__name__}"
            )
        # The hash is in the file name as well: the dynamic loader caches libraries by path, so a
        # rebuilt library in a caller's build_directory must not reuse an old path.
        self.output = os.path.join(self.dir, f"{name}_{self.hash}.so")

    # -- commands -----------------------------------------------------------------------------

    def _reproducible(self) -> str:
        """The flag that keeps the build folder's path out of the library.

        ``__FILE__`` in kffi's macros and debug info then say ``<name>_<hash>``, the same in
        every cache, so the same build in another cache, process or machine gives the same
        bytes: a content address of the file (kffi.jax.export's target names are ones) names a
        library any of them rebuilds. The build ID is the linker's content hash, so it follows.
        """
        return f"-ffile-prefix-map={self.dir}={self.name}_{self.hash}"

    def _cxx_flags(self) -> list[str]:
        return [
            *_config_flags()["cxx"],
            "-O2",
            self._reproducible(),
            *("-I" + p for p in self.include_paths),
            *self.cflags,
        ]

    def _nvcc_flags(self) -> list[str]:
        return [
            *_config_flags()["nvcc"],
            "-O2",
            "-Xcompiler=" + self._reproducible(),
            *(["-objtemp"] if self.nvcc_objtemp else []),
            *("-I" + p for p in self.include_paths),
            *self.arch_flags,
            *self.cuda_cflags,
        ]

    def compile_command(self, src: _Source, src_path: str, obj: str) -> list[str]:
        pre = [f for h in self.pre_includes for f in ("-include", h)] if src.inline else []
        if src.is_cuda:
            assert self.nvcc is not None  # a CUDA source made the plan find nvcc
            return [*self.nvcc.argv, "-c", src_path, "-o", obj, *pre, *self._nvcc_flags()]
        return [*self.cxx.argv, "-c", src_path, "-o", obj, *pre, *self._cxx_flags()]

    def link_command(self, objs: list[str], out: str) -> list[str]:
        cmd = [*self.cxx.argv, "-shared", "-o", out, *objs, *_config_flags()["link"]]
        if self.cuda:
            assert self.nvcc is not None  # a CUDA source made the plan find nvcc
            cudalib = _cuda_lib_dir(self.nvcc.path)
            if cudalib:
                cmd += ["-L" + cudalib, "-Wl,-rpath," + cudalib]
            cmd.append("-lcudart")
        return cmd + list(self.ldflags)


def _quiet(quiet: bool | None) -> bool:
    if quiet is not None:
        return quiet
    return os.environ.get("KFFI_BUILD_QUIET", "") not in ("", "0")


def _compile_and_link(plan: _Plan, verbose: bool) -> None:
    """Runs the commands (sources compile in parallel) and renames the library into place."""
    work = tempfile.mkdtemp(dir=plan.dir, prefix=f".build-{os.getpid()}-")
    try:
        jobs = []
        for i, s in enumerate(plan.sources):
            if s.path is None:  # in-memory source: the build dir keeps it for error messages
                src_path = os.path.join(plan.dir, s.filename)
                _write_atomic(src_path, s.text)
            else:
                src_path = s.path
            obj = os.path.join(work, f"{i}_{os.path.basename(s.filename)}.o")
            jobs.append((plan.compile_command(s, src_path, obj), obj))

        def run(cmd: list[str]) -> None:
            if verbose:
                print("kffi.cpp:", shlex.join(cmd), file=sys.stderr, flush=True)
            proc = _run(cmd, cwd=plan.dir)
            if verbose and proc.stdout:
                print(proc.stdout, file=sys.stderr, end="", flush=True)
            if proc.returncode != 0:
                raise BuildError(plan.name, cmd, proc.stdout, proc.returncode, plan.dir)

        workers = max(1, min(len(jobs), os.cpu_count() or 1))
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            for fut in [pool.submit(run, cmd) for cmd, _ in jobs]:
                fut.result()  # the first failure (in source order) is raised
        tmp_out = os.path.join(work, os.path.basename(plan.output))
        run(plan.link_command([obj for _, obj in jobs], tmp_out))
        os.replace(tmp_out, plan.output)
        _keep_record(plan.output)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _build(plan: _Plan, verbose: bool, quiet: bool | None, announce_failure: bool = True) -> str:
    if _cache_entry_intact(plan.output):
        return plan.output
    quiet = _quiet(quiet)
    with _locked(plan, quiet):
        if _cache_entry_intact(plan.output):  # another process built it while we waited
            return plan.output
        start = time.monotonic()
        if not quiet:
            n = len(plan.sources)
            print(
                f"kffi.cpp: building {plan.name!r} ({n} source{'s' * (n != 1)}) in {plan.dir}",
                file=sys.stderr,
                flush=True,
            )
        try:
            _compile_and_link(plan, verbose)
        except BuildError:
            if not quiet and announce_failure:
                print(
                    f"kffi.cpp: building {plan.name!r} failed after "
                    f"{time.monotonic() - start:.1f} s",
                    file=sys.stderr,
                    flush=True,
                )
            raise
        if not quiet:
            print(
                f"kffi.cpp: built {plan.name!r} in {time.monotonic() - start:.1f} s",
                file=sys.stderr,
                flush=True,
            )
    return plan.output


# ---------------------------------------------------------------------------------------------
# Public API.
# ---------------------------------------------------------------------------------------------


def _plan_from_files(
    name: str,
    sources: Paths,
    extra_cflags: Flags,
    extra_cuda_cflags: Flags,
    extra_ldflags: Flags,
    extra_include_paths: Paths,
    build_directory: StrPath | None,
    depends: Paths = None,
) -> _Plan:
    paths = _str_list(sources, "sources")
    if not paths:
        raise ValueError("kffi.cpp.build: give at least one source file")
    srcs = []
    for p in paths:
        p = os.path.abspath(p)
        try:
            with open(p, "rb") as f:
                srcs.append(_Source(os.path.basename(p), f.read(), p))
        except OSError as e:
            raise FileNotFoundError(f"kffi.cpp.build: cannot read source {p!r}: {e}") from None
    return _Plan(
        name,
        srcs,
        _str_list(extra_cflags, "extra_cflags"),
        _str_list(extra_cuda_cflags, "extra_cuda_cflags"),
        _str_list(extra_ldflags, "extra_ldflags"),
        _str_list(extra_include_paths, "extra_include_paths"),
        build_directory,
        depends=depends or (),
    )


def build(
    name: str,
    sources: Paths,
    extra_cflags: Flags = None,
    extra_ldflags: Flags = None,
    extra_include_paths: Paths = None,
    build_directory: StrPath | None = None,
    verbose: bool = False,
    *,
    extra_cuda_cflags: Flags = None,
    quiet: bool | None = None,
    depends: Paths = None,
) -> str:
    """Compiles source files into a shared library linked with libkffi, and returns its path.

    ``.cc``/``.cpp`` with ``$CXX``, ``.cu`` with nvcc. Cached: see the module docstring.

    ``extra_cflags`` go to the C++ compiler, ``extra_cuda_cflags`` to nvcc, ``extra_ldflags`` to
    the link. ``verbose`` prints every command and its output; ``quiet`` drops the progress
    lines (default: ``$KFFI_BUILD_QUIET``). ``depends``: more files whose content enters the
    build key (headers the sources include, data they read at compile time): the sources'
    own text is keyed always, their includes only when listed here or under kffi's headers.
    A failing command raises :class:`BuildError`.
    """
    plan = _plan_from_files(
        name,
        sources,
        extra_cflags,
        extra_cuda_cflags,
        extra_ldflags,
        extra_include_paths,
        build_directory,
        depends,
    )
    return _build(plan, verbose, quiet)


def _join(sources: Texts) -> str:
    if sources is None:
        return ""
    if isinstance(sources, str):
        return sources
    return "\n".join(sources)


def _inline_plan(
    name: str,
    cpp_sources: Texts,
    cuda_sources: Texts,
    epilogue: str,
    extra_cflags: Flags,
    extra_cuda_cflags: Flags,
    extra_ldflags: Flags,
    extra_include_paths: Paths,
    build_directory: StrPath | None,
    pre_includes: Sequence[str] = PRE_INCLUDES,
    depends: Paths = None,
) -> _Plan:
    cpp = _join(cpp_sources)
    cuda = _join(cuda_sources)
    if not cpp.strip() and not cuda.strip():
        raise ValueError("kffi.cpp.load_inline: give cpp_sources or cuda_sources")
    srcs = []
    # The exports go at the end of the C++ translation unit (where the functions are declared),
    # or of the CUDA one when there is no C++ source.
    # The kffi headers come in by -include (see PRE_INCLUDES), so the file on disk is exactly the
    # caller's text and compiler messages point at the caller's line numbers.
    if cpp.strip():
        srcs.append(_Source(f"{name}.cpp", f"{cpp}\n\n{epilogue}".encode(), None))
    if cuda.strip():
        tail = "" if cpp.strip() else "\n\n" + epilogue
        srcs.append(_Source(f"{name}_cuda.cu", f"{cuda}{tail}".encode(), None))
    return _Plan(
        name,
        srcs,
        _str_list(extra_cflags, "extra_cflags"),
        _str_list(extra_cuda_cflags, "extra_cuda_cflags"),
        _str_list(extra_ldflags, "extra_ldflags"),
        _str_list(extra_include_paths, "extra_include_paths"),
        build_directory,
        pre_includes,
        depends or (),
    )


def _load(path: str) -> Module:
    return load_module(path)


def build_inline(
    name: str,
    cpp_sources: Texts = None,
    cuda_sources: Texts = None,
    epilogue: str = "",
    *,
    extra_cflags: Flags = None,
    extra_cuda_cflags: Flags = None,
    extra_ldflags: Flags = None,
    extra_include_paths: Paths = None,
    build_directory: StrPath | None = None,
    verbose: bool = False,
    quiet: bool | None = None,
    pre_includes: Sequence[str] = PRE_INCLUDES,
    depends: Paths = None,
    announce_failure: bool = True,
) -> str:
    """Builds source text into a kernel library and returns its path, without loading it.

    Cached like :func:`build`. ``epilogue`` is appended to the C++ source (or to the CUDA one when
    there is no C++ source): export lines such as ``KFFI_EXPORT(f, f);`` (see
    :func:`export_lines`, :func:`c_string_literal`). ``pre_includes`` come in first by
    ``-include`` (default :data:`PRE_INCLUDES`: the headers of ``<kffi/kffi.h>`` but
    ``<kffi/contract.h>``), so compiler messages keep the caller's line numbers.
    :func:`load_inline` and :func:`kffi.compile` are built on it. ``depends`` as in
    :func:`build`. ``announce_failure=False`` leaves out the "failed" line of a build that is
    not quiet (for an attempt whose caller builds another way when it fails).
    """
    plan = _inline_plan(
        name,
        cpp_sources,
        cuda_sources,
        epilogue,
        extra_cflags,
        extra_cuda_cflags,
        extra_ldflags,
        extra_include_paths,
        build_directory,
        pre_includes,
        depends,
    )
    return _build(plan, verbose, quiet, announce_failure)


def load_inline(
    name: str,
    cpp_sources: Texts = None,
    cuda_sources: Texts = None,
    functions: Sequence[str] | Mapping[str, str] | None = None,
    extra_cflags: Flags = None,
    extra_cuda_cflags: Flags = None,
    extra_ldflags: Flags = None,
    extra_include_paths: Paths = None,
    build_directory: StrPath | None = None,
    verbose: bool = False,
    *,
    quiet: bool | None = None,
    depends: Paths = None,
) -> Module:
    """Builds C++ (and CUDA) source text into a kernel library and loads it as a kffi.Module.

    ``functions``: names of C++ functions in the sources to export (``KFFI_EXPORT_DOC`` lines
    are appended after the sources, with the parameter names of the C++ definitions), or
    ``{name: docstring}``. Leave it out when the sources export with ``KFFI_EXPORT``
    themselves. The headers of ``<kffi/kffi.h>`` (but ``<kffi/contract.h>``: include it for
    ``KFFI_EXPORT_CONTRACT``, or use :func:`kffi.compile`) come in before the sources (by
    ``-include``), so the files keep the caller's line numbers. ``depends`` as in :func:`build`.
    """
    source = _join(cpp_sources) + "\n" + _join(cuda_sources)
    path = build_inline(
        name,
        cpp_sources,
        cuda_sources,
        export_lines(functions, source),
        extra_cflags=extra_cflags,
        extra_cuda_cflags=extra_cuda_cflags,
        extra_ldflags=extra_ldflags,
        extra_include_paths=extra_include_paths,
        build_directory=build_directory,
        verbose=verbose,
        quiet=quiet,
        depends=depends,
    )
    return _load(path)
