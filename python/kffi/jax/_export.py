"""python/kffi/jax/_export.py: stable XLA target names, ``kffi.jax.export`` and reloading.

A kffi call lowers to an XLA custom call whose target name is derived from content only:

    kffi.v1.<sha256 of the library file, 16 hex>.<function name>[.<layout item>...][.G]

The layout items are the call's arg_spec (``A``/``R``: every input/result, ``a<i>``/``r<j>``:
input/result i, ``k<name>``: attribute, ``S``: stream, ``N``: none, ``b<hex>``: a record
parameter, its ``<param>:<type key>:<fields>`` in hex); ``G`` marks a target safe to capture into
CUDA graphs. The same library, function and layout give the same name in every
process, and the name carries all that the handler needs: in a fresh process, a deserialized
``jax.export.Exported`` finds its targets registered when it is lowered, from the libraries
given to :func:`register_module` (kffi wraps the lowering of jax's ``call_exported``
primitive). A target whose library was not registered is a :class:`UnregisteredTargetError`
naming the function and how to register it.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import hashlib
import os
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import jax

from .._lazy import lazy
from ..runtime._api import loaded_file_changed
from ..runtime._objects import Function, Module
from . import _bind
from ._call_primitive import kffi_call_p
from ._ffi import _RECORD_ITEM, is_registered, register_content_target

if TYPE_CHECKING:  # _primitive imports this module
    from ._primitive import CallPlan

__all__ = [
    "UnregisteredTargetError",
    "deserialize",
    "export",
    "library_digest",
    "register_module",
    "stable_target_name",
]

PREFIX = "kffi.v1."
_NAME = re.compile(r"kffi\.v1\.[0-9a-f]{16}\.[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)*")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

_lock = threading.Lock()
# path -> ((st_dev, st_ino, st_size, st_mtime_ns), digest)
_digests: dict[str, tuple[tuple[int, int, int, int], str]] = {}
# (digest, function name) -> kffi.Function or (Module, name)
_known: dict[tuple[str, str], Function | tuple[Module, str]] = {}
_M = TypeVar("_M", Module, Function)


class UnregisteredTargetError(LookupError):
    """A deserialized computation calls a kffi function whose library this process has not
    registered with :func:`register_module`."""


# ---------------------------------------------------------------------------------------------
# Names.
# ---------------------------------------------------------------------------------------------


def library_digest(path: str) -> str:
    """The first 16 hex digits of the SHA-256 of the library file at ``path`` (cached while the
    file's identity, size and mtime stay the same). A library this process loaded is hashed only
    while its file is the one the code was loaded from: the digest names the code that runs."""
    if loaded_file_changed(path):
        raise RuntimeError(
            f"kffi.jax: the library file {path!r} was replaced or changed after this process "
            f"loaded it, so its content is not the code that runs here and cannot name that "
            f"code's targets; load the new file in a new process"
        )
    try:
        st = os.stat(path)
    except OSError as e:
        raise RuntimeError(
            f"kffi.jax: cannot read the library {path!r} to name its targets by content ({e})"
        ) from None
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    with _lock:
        hit = _digests.get(path)
    if hit is not None and hit[0] == key:
        return hit[1]
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    digest = h.hexdigest()[:16]
    with _lock:
        _digests[path] = (key, digest)
    return digest


def _clean(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", name) or "_"


def origin_of(fn: object) -> tuple[str, str] | None:
    """(library digest, function name) of a function loaded from a library, else None."""
    named = getattr(fn, "_content_origin", None)  # (digest, name): kffi.cuda names its kernels
    if isinstance(named, tuple) and len(named) == 2:
        return str(named[0]), _clean(named[1])
    origin = getattr(fn, "_origin", None)
    if not (isinstance(origin, tuple) and len(origin) == 2):
        return None
    path, name = origin
    return library_digest(path), _clean(name)


_FIXED_CODES = {"args": "A", "rets": "R", "stream": "S", "none": "N"}
_FIXED_ITEMS = {code: item for item, code in _FIXED_CODES.items()}


def _layout_code(item: str) -> str:
    """The target-name code of one arg_spec item (letters, digits and _ only: the name's parts
    are separated by dots); _layout_item reads every code this writes."""
    if item in _FIXED_CODES:
        return _FIXED_CODES[item]
    if item.startswith("attrs.") and _IDENT.fullmatch(item[len("attrs.") :]):
        return "k" + item[len("attrs.") :]
    m = re.fullmatch(r"(args|rets)\.(\d+)", item)
    if m is not None:
        return ("a" if m.group(1) == "args" else "r") + str(int(m.group(2)))
    if _RECORD_ITEM.fullmatch(item):
        # A record's item holds a type key's dots and other punctuation: spelled in hex.
        return "b" + item[len("record.") :].encode("ascii").hex()
    raise ValueError(f"kffi.jax: arg_spec item {item!r} has no layout code in a kffi target name")


def _layout_item(code: str) -> str:
    """The arg_spec item of a target name's layout code (ValueError for anything else)."""
    if code in _FIXED_ITEMS:
        return _FIXED_ITEMS[code]
    if code[:1] == "k" and _IDENT.fullmatch(code[1:]):
        return "attrs." + code[1:]
    if code[:1] in ("a", "r") and code[1:].isdigit():
        return ("args." if code[0] == "a" else "rets.") + str(int(code[1:]))
    if code[:1] == "b" and re.fullmatch(r"(?:[0-9a-f]{2})+", code[1:]):
        item = "record." + bytes.fromhex(code[1:]).decode("ascii", errors="replace")
        if _RECORD_ITEM.fullmatch(item):
            return item
    raise ValueError(f"kffi.jax: unknown layout item {code!r} in a kffi target name")


def stable_target_name(fn: Function, arg_spec: Iterable[str], allow_cuda_graph: bool) -> str | None:
    """The content-derived target name of ``fn`` called with ``arg_spec``; None for a function
    that no library file holds (a Python callable, a wrapper made in this process)."""
    origin = origin_of(fn)
    if origin is None:
        return None
    digest, name = origin
    codes = [_layout_code(item) for item in arg_spec]
    if allow_cuda_graph:
        codes.append("G")
    return PREFIX + ".".join([digest, name, *codes])


def parse_target_name(target: str) -> tuple[str, str, list[str], bool]:
    """(digest, function name, arg_spec, allow_cuda_graph) of a kffi target name."""
    parts = target[len(PREFIX) :].split(".")
    digest, name, codes = parts[0], parts[1], parts[2:]
    graph = bool(codes) and codes[-1] == "G"
    if graph:
        codes = codes[:-1]
    return digest, name, [_layout_item(c) for c in codes], graph


# ---------------------------------------------------------------------------------------------
# Registering libraries in a fresh process.
# ---------------------------------------------------------------------------------------------


def register_module(module_or_function: _M) -> _M:
    """Makes the functions of a loaded library (a ``kffi.Module`` from ``kffi.load_module``, or
    one ``kffi.Function`` from it or from ``kffi.compile``) available to deserialized
    ``jax.export`` computations: their kffi targets are registered with XLA when the
    ``Exported`` is called. The library is matched by content, so any copy of the same file
    serves. Returns the argument."""
    _install_hook()
    if isinstance(module_or_function, Module):
        digest = library_digest(module_or_function.name)
        entries: dict[tuple[str, str], Function | tuple[Module, str]] = {
            (digest, _clean(n)): (module_or_function, n) for n in module_or_function.functions()
        }
    elif isinstance(module_or_function, Function):
        origin = origin_of(module_or_function)
        if origin is None:
            raise TypeError(
                "kffi.jax.register_module: this kffi.Function was not loaded from a library "
                "(kffi.load_module or kffi.compile), so it cannot stand for an exported target"
            )
        entries = {origin: module_or_function}
    else:
        raise TypeError(
            f"kffi.jax.register_module: expected a kffi.Module or kffi.Function, got "
            f"{type(module_or_function).__name__}"
        )
    with _lock:
        _known.update(entries)
    return module_or_function


def remember(fn: Function) -> None:
    """Records a function whose content-named target this process made, so that an Exported
    of it runs here on any platform without register_module."""
    origin = origin_of(fn)
    if origin is not None:
        with _lock:
            _known.setdefault(origin, fn)


def _function_for(digest: str, name: str) -> Function | None:
    with _lock:
        entry = _known.get((digest, name))
    if isinstance(entry, tuple):
        module, fname = entry
        return module[fname]
    return entry


def _missing(target: str, name: str, digest: str) -> UnregisteredTargetError:
    base, _, key = name.partition("__c")  # "<name>__c<key>": under a kffi.with_contract contract
    if key:
        what = f"`{base}` under a kffi.with_contract contract (contract key {key})"
        how = (
            f"pass the function that kffi.with_contract makes of its `{base}` with the same "
            f"contract and name to kffi.jax.register_module"
        )
    else:
        what = f"`{base}`"
        how = "call kffi.jax.register_module(module_or_function)"
    return UnregisteredTargetError(
        f"kffi.jax: the exported computation calls the kffi function {what} (XLA target "
        f"{target!r}) from a library whose content digest is {digest} (the first 16 hex digits "
        f"of its SHA-256), and no such library is registered in this process. Load the same "
        f"library file (kffi.load_module(path)) or build the same kffi.compile function, then "
        f"{how} before calling the deserialized function"
    )


def ensure_targets(targets: Iterable[str], platforms: Sequence[str]) -> None:
    """Registers the kffi targets among ``targets`` for each of ``platforms`` (lowering
    platforms: "cpu", "cuda", "rocm") from the registered libraries."""
    for target in targets:
        digest, name, spec, graph = parse_target_name(target)
        fn = None
        for platform in platforms:
            if platform not in ("cpu", "cuda", "rocm") or is_registered(target, platform):
                continue
            if fn is None:
                fn = _function_for(digest, name)
                if fn is None:
                    raise _missing(target, name, digest)
            # An artifact exported for another platform than the kernel's contract allows would
            # hand it the wrong memory: refused here, as kffi.jax.call refuses it when lowering.
            _bind.check_platform(f"`{name}`", _bind.metadata(fn), platform)
            register_content_target(target, fn, platform, spec, graph)


def targets_in_text(text: str) -> list[str]:
    """The kffi target names that an MLIR module's text calls, in order, once each."""
    return list(dict.fromkeys(_NAME.findall(text)))


_scanned: dict[bytes, list[str]] = {}  # serialized module -> its kffi targets (a few recent ones)


def targets_of(exported: Any) -> list[str]:
    """The kffi targets that a ``jax.export.Exported`` calls (its module's text, scanned once)."""
    key = exported.mlir_module_serialized
    with _lock:
        hit = _scanned.get(key)
    if hit is None:
        hit = targets_in_text(exported.mlir_module())
        with _lock:
            if len(_scanned) >= 16:
                _scanned.pop(next(iter(_scanned)))
            _scanned[key] = hit
    return hit


def deserialize(blob: bytearray, platforms: Sequence[str] | None = None) -> Any:
    """``jax.export.deserialize(blob)``, with the kffi targets it calls registered now for
    ``platforms`` (default: the Exported's own) from the libraries given to
    :func:`register_module`, or an :class:`UnregisteredTargetError`. ``jax.export.deserialize``
    followed by ``.call`` does the same when the call is lowered; this one reports a missing
    library at once."""
    exported = jax.export.deserialize(blob)
    lowering = {"gpu": "cuda"}
    wanted = platforms or exported.platforms
    ensure_targets(targets_of(exported), tuple(lowering.get(p, p) for p in wanted))
    return exported


# ---------------------------------------------------------------------------------------------
# Calling a deserialized Exported: its kffi targets are registered as it is lowered.
# ---------------------------------------------------------------------------------------------


@lazy
def _install_hook() -> None:
    """Wraps the lowering rules of jax's ``call_exported`` primitive (what ``Exported.call``
    binds; one common rule, or one per platform in older jax) so that the kffi targets of the
    module are registered first, or reported clearly. Where jax's internals differ, nothing is
    wrapped and :func:`deserialize` is the way to register a computation's targets."""
    try:  # jax internals
        from jax._src.export import _export as jax_export
        from jax._src.interpreters import mlir as jax_mlir

        prim = jax_export.call_exported_p
        rules: list[tuple[str | None, Any]] = []
        if prim in jax_mlir._lowerings:
            rules.append((None, jax_mlir._lowerings[prim]))
        for platform, table in list(jax_mlir._platform_specific_lowerings.items()):
            if prim in table:
                rules.append((platform, table[prim]))
    except (ImportError, AttributeError):  # pragma: no cover (other jax)
        return
    for where, entry in rules:
        jax_mlir.register_lowering(prim, _wrapped(getattr(entry, "rule", entry)), where)


def _wrapped(original: Callable[..., Any]) -> Callable[..., Any]:
    def lowering(ctx: Any, *args: Any, exported: Any, **params: Any) -> Any:
        targets = targets_of(exported)
        if targets:
            ensure_targets(targets, tuple(ctx.module_context.platforms))
        return original(ctx, *args, exported=exported, **params)

    return lowering


# ---------------------------------------------------------------------------------------------
# kffi.jax.export
# ---------------------------------------------------------------------------------------------


def _walk(jaxpr: Any, out: list[CallPlan]) -> None:
    """Appends the (plan, eqn) of every kffi_call in a jaxpr and its sub-jaxprs."""
    inner = getattr(jaxpr, "jaxpr", jaxpr)  # ClosedJaxpr -> Jaxpr
    for eqn in getattr(inner, "eqns", ()):
        if eqn.primitive is kffi_call_p:
            out.append(eqn.params["plan"])
        for value in eqn.params.values():
            for v in value if isinstance(value, (tuple, list)) else (value,):
                if hasattr(v, "eqns") or hasattr(getattr(v, "jaxpr", None), "eqns"):
                    _walk(v, out)


def export(
    f: Callable[..., Any], platforms: Sequence[str] | None = None, **kwargs: Any
) -> Callable[..., Any]:
    """Like ``jax.export.export(f, platforms=...)``: returns a function of the arguments (arrays
    or ``jax.ShapeDtypeStruct``s, with ``jax.export.symbolic_shape`` dimensions for shape
    polymorphism) that gives a ``jax.export.Exported``. The custom-call safety check is
    disabled for kffi's own targets only (their names are content-derived: the same in every
    process), so a foreign custom call without compatibility guarantees is still refused.
    ``f`` is jitted if it is not already. In the process that runs it: ``kffi.load_module``
    of the same library (or the same ``kffi.compile``), then
    ``kffi.jax.register_module(...)``, then ``jax.export.deserialize(blob).call(...)``."""
    from jax import export as jax_export

    _install_hook()
    jitted = f if hasattr(f, "trace") and hasattr(f, "lower") else jax.jit(f)
    extra = list(kwargs.pop("disabled_checks", ()))

    def do_export(*args: Any, **kw: Any) -> Any:
        plans: list[CallPlan] = []
        _walk(jitted.trace(*args, **kw).jaxpr, plans)
        names = []
        for plan in plans:
            name = plan.stable_name()
            if name is None:
                raise TypeError(
                    f"kffi.jax.export: {plan.label} is not a function of a library file "
                    f"(kffi.load_module or kffi.compile), so its XLA target has no name that "
                    f"another process can resolve; export functions loaded from libraries"
                )
            names.append(name)
        checks = extra + [
            jax_export.DisabledSafetyCheck.custom_call(n) for n in dict.fromkeys(names)
        ]
        return jax_export.export(jitted, platforms=platforms, disabled_checks=checks, **kwargs)(
            *args, **kw
        )

    return do_export
