"""python/kffi/cuda/__init__.py: runtime CUDA compilation (NVRTC), a cubin launcher and a cache.

``kffi.cuda.compile(source, name, *fake_args, grid=..., block=...)`` compiles CUDA device code
with NVRTC (no nvcc, no host compiler), loads it through the CUDA driver and returns a kffi
Function: its contract is checked in compiled code before each launch, which runs on the
environment stream of the first CUDA tensor's device. ``kffi.cuda.load_cubin`` launches cubins
made elsewhere (Triton, CuTe DSL, nvcc). NVRTC output is cached by content (docs:
runtime_compilation.md). Importing this module loads neither NVRTC nor the CUDA driver.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ..runtime._objects import Function
from ._cache import clear_memory_cache, compile_count, prebuilt_roots
from ._launch import CubinModule, load_cubin
from ._nvrtc import NVRTCError, normalize_arch, nvrtc_version

__all__ = [
    "CubinModule",
    "NVRTCError",
    "Program",
    "clear_memory_cache",
    "compile",
    "compile_count",
    "default_archs",
    "load_cubin",
    "nvrtc_compile",
    "nvrtc_version",
    "prebuilt_roots",
    "precompile",
]

DEFAULT_OPTIONS = ("-std=c++17",)


class Program:
    """NVRTC's output for one source: ``images`` ({arch: cubin bytes, or PTX for compute_XX}),
    ``lowered_names`` ({name expression: symbol}), ``log`` (warnings), ``cache_path`` (the cache
    file it came from or went to; None uncached)."""

    def __init__(
        self,
        name: str,
        images: dict[str, bytes],
        lowered_names: dict[str, str],
        log: str,
        cache_path: str | None,
    ) -> None:
        self.name = name
        self.images = images
        self.lowered_names = lowered_names
        self.log = log
        self.cache_path = cache_path

    def load(self) -> CubinModule:
        """The images as one :class:`CubinModule`."""
        return CubinModule(self.images, f"the NVRTC program {self.name!r}")

    def __repr__(self) -> str:
        return f"<kffi.cuda.Program {self.name!r} archs={list(self.images)}>"


def default_archs() -> list[str]:
    """``$KFFI_CUDA_ARCH`` (as kffi.cpp reads it: "80;90a", "sm_90", "9.0"), else sm_XX of each
    GPU on this machine (read through NVML, without initialising CUDA); ValueError when neither
    says (a machine without a GPU must name its targets)."""
    from ..toolchain import cpp as _cpp

    spec = os.environ.get("KFFI_CUDA_ARCH", "").strip()
    if spec:
        out: list[str] = []
        for item in spec.replace(",", ";").replace(" ", ";").split(";"):
            if item:
                ptx = item.upper().endswith("+PTX")
                a = normalize_arch(item[:-4] if ptx else item)
                out.append(a)
                if ptx:
                    out.append("compute_" + a.split("_", 1)[1])
        return out
    gpus = _cpp._machine_gpu_archs()
    if not gpus:
        raise ValueError(
            "kffi.cuda: no GPU found to compile for: pass arch= (e.g. ['sm_80', 'sm_90a']) or set"
            " KFFI_CUDA_ARCH"
        )
    return [f"sm_{a}" for a in gpus]


def _archs(arch: Any) -> list[str]:
    if arch is None:
        return default_archs()
    items = [arch] if isinstance(arch, (str, int)) else list(arch)
    if not items:
        raise ValueError("kffi.cuda: arch lists at least one target")
    out: list[str] = []
    for a in items:
        n = normalize_arch(a)
        if n not in out:
            out.append(n)
    return out


def _options(options: Any) -> list[str]:
    if options is None:
        return list(DEFAULT_OPTIONS)
    if isinstance(options, str):
        raise TypeError("kffi.cuda: options is a list of NVRTC options, not one str")
    out = list(options)
    for o in out:
        if not isinstance(o, str) or "\0" in o:
            raise TypeError(f"kffi.cuda: each option is a str, got {o!r}")
        if o.startswith(("--gpu-architecture", "-arch")):
            raise ValueError("kffi.cuda: give targets with arch=, not as an option")
    return out


def nvrtc_compile(
    source: str,
    name_expressions: str | Iterable[str] = (),
    *,
    arch: Any = None,
    options: Sequence[str] | None = None,
    cache: bool = True,
    cache_dir: str | os.PathLike[str] | None = None,
) -> Program:
    """Compiles CUDA device code with NVRTC for each arch of ``arch`` (one or a list of
    ``"sm_80"``, ``"sm_90a"``, ``"sm_100f"``: cubins; ``"compute_90"``: PTX; default
    :func:`default_archs`). No GPU is needed. ``name_expressions``: kernels whose symbols to
    report (``"axpy"``, ``"scale<float>"``). ``options``: NVRTC options (default
    ``["-std=c++17"]``). The result is cached by content (memory and disk; ``cache=False``
    compiles anew, ``cache_dir`` writes to another cache root). A compile error is
    :class:`NVRTCError` with NVRTC's log.
    """
    from . import _cache, _nvrtc

    if not isinstance(source, str):
        raise TypeError(f"kffi.cuda: source is CUDA text, got {type(source).__name__}")
    if "\0" in source:
        raise ValueError("kffi.cuda: source contains a NUL character")
    names = [name_expressions] if isinstance(name_expressions, str) else list(name_expressions)
    for n in names:
        if not isinstance(n, str) or not n or "\0" in n:
            raise ValueError(f"kffi.cuda: a name expression is a non-empty str, got {n!r}")
    archs = _archs(arch)
    opts = _options(options)
    label = names[0] if names else "program"
    version = _nvrtc.nvrtc_version()
    key = _cache.cache_key(source, names, archs, opts, version)
    res, path = _cache.lookup_or_compile(
        label,
        key,
        lambda: _nvrtc.compile_images(source, label, names, archs, opts),
        cache_root=os.fspath(cache_dir) if cache_dir is not None else None,
        use_cache=bool(cache),
    )
    return Program(label, dict(res["images"]), dict(res["lowered"]), res["log"], path)


def compile(
    source: str,
    name: str,
    *fake_args: Any,
    grid: Any = None,
    block: Any = None,
    shared_mem: Any = 0,
    launch: Callable[..., Any] | None = None,
    arch: Any = None,
    options: Sequence[str] | None = None,
    param_names: Any = None,
    outputs: Any = None,
    doc: str = "",
    cache: bool = True,
    params: Any = None,
) -> Function:
    """Compiles the CUDA kernel ``name`` of ``source`` with NVRTC and returns it as a kffi
    Function that checks the contract of ``fake_args`` (as :func:`kffi.compile` takes them; one
    str is the contract's text) in compiled code, then launches the kernel on the environment
    stream of the first CUDA tensor's device. No nvcc and no host compiler run.

    ``name``: the kernel (``extern "C"`` or not; a template instance such as ``"scale<float>"``).
    The contract lists the kernel's parameters in order: tensors become their data pointers,
    ``kffi.Int32`` an ``int``, ``kffi.Int64`` a ``long long``, ``kffi.Float32`` a ``float``,
    ``kffi.Float64`` a ``double``, ``kffi.Bool`` a ``bool``. ``grid``, ``block``, ``shared_mem``
    or ``launch``, and ``params`` (kernel parameters that are not the contract's arguments one to
    one, e.g. structs by value): see :meth:`CubinModule.kernel`. ``arch``, ``options``, ``cache``: see
    :func:`nvrtc_compile`. The result has ``.contract``, ``.program`` (the :class:`Program`) and
    the metadata kffi.torch.register_op and kffi.jax read.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"kffi.cuda.compile: name is the kernel's name, got {name!r}")
    prog = nvrtc_compile(source, [name], arch=arch, options=options, cache=cache)
    mod = CubinModule(prog.images, f"the NVRTC program {name!r}")
    fn = mod.kernel(
        prog.lowered_names[name],
        *fake_args,
        grid=grid,
        block=block,
        shared_mem=shared_mem,
        launch=launch,
        param_names=param_names,
        outputs=outputs,
        name=_function_name(name),
        doc=doc,
        params=params,
    )
    fn.program = prog
    return fn


def _function_name(name: str) -> str:
    import re

    base = re.sub(r"\W", "_", name.split("<")[0].split("::")[-1]).strip("_") or "kernel"
    return base if not base[0].isdigit() else "k" + base


def precompile(
    kernels: Iterable[dict[str, Any]], cache_dir: str | os.PathLike[str] | None = None
) -> list[str | None]:
    """Compiles each of ``kernels`` into the cache, so that a later :func:`compile` or
    :func:`nvrtc_compile` of the same source, names, archs and options compiles nothing. Each is
    a dict of :func:`nvrtc_compile`'s arguments (``source``, ``name_expressions`` or ``name``,
    ``arch``, ``options``). ``cache_dir``: the cache root to fill (default: kffi's cache); ship
    it and point ``$KFFI_CUDA_PREBUILT`` at it (read-only) in the deployment. Returns the cache
    files written or found.
    """
    paths: list[str | None] = []
    for i, k in enumerate(kernels):
        if not isinstance(k, dict):
            raise TypeError(f"kffi.cuda.precompile: kernel {i} is a dict, got {type(k).__name__}")
        k = dict(k)
        unknown = set(k) - {"source", "name", "name_expressions", "arch", "options"}
        if unknown or "source" not in k:
            raise TypeError(
                f"kffi.cuda.precompile: kernel {i} takes source, name or name_expressions, arch "
                f"and options (unknown: {sorted(unknown)})"
            )
        names = k.get("name_expressions", [k["name"]] if "name" in k else [])
        prog = nvrtc_compile(
            k["source"], names, arch=k.get("arch"), options=k.get("options"), cache_dir=cache_dir
        )
        paths.append(prog.cache_path)
    return paths
