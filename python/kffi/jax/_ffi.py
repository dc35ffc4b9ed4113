"""python/kffi/jax/_ffi.py: kffi functions as XLA FFI targets (``register_ffi_target``)."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.ffi

from ..runtime._api import to_kffi
from ..runtime._objects import Function
from ._glue import handler_module

__all__ = [
    "handler_traits",
    "is_registered",
    "parse_arg_spec",
    "register_content_target",
    "register_ffi_target",
    "registered_targets",
    "target_count",
]

# SpecKind in _xla_handler.cc.
_ARGS, _RETS, _ARG, _RET, _ATTR, _STREAM, _NONE, _RECORD = 0, 1, 2, 3, 4, 5, 6, 7
_ATTR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# "record.<param>:<type key>:<field>,...": an object of the type, each field from attribute
# <param>_<field> (kffi/jax/_records.py).
_RECORD_ITEM = re.compile(
    r"record\.([A-Za-z_][A-Za-z0-9_]*):([A-Za-z_][A-Za-z0-9_.]*):"
    r"([A-Za-z_][A-Za-z0-9_]*(?:,[A-Za-z_][A-Za-z0-9_]*)*)?"
)
_KDL_CPU, _KDL_CUDA, _KDL_ROCM = 1, 2, 10
# XLA_FFI_HANDLER_TRAITS_COMMAND_BUFFER_COMPATIBLE: calls may be captured into CUDA graphs.
TRAIT_COMMAND_BUFFER_COMPATIBLE = 1

_lock = threading.Lock()
# An arg_spec item as the handler reads it: (kind, index, attribute name).
_Spec = list[tuple[int, int, str]]
# (name, platform) -> (function, capsule, (handler address, spec, traits))
_registered: dict[tuple[str, str], tuple[Function, Any, tuple[int, _Spec, int]]] = {}


def parse_arg_spec(arg_spec: Sequence[str] | None) -> _Spec:
    """[(kind, index, name)] for an arg_spec: ``"args"`` (every input), ``"rets"`` (every
    result), ``"attrs.<key>"`` (an attribute), and kffi's ``"args.<i>"`` / ``"rets.<i>"`` (one
    input / result), ``"stream"`` (XLA's stream for an explicit stream parameter; None on CPU)
    ``"none"`` (None, for an omitted optional parameter) and
    ``"record.<param>:<type key>:<field>,..."`` (an object of a reflected type, each field
    assigned from the attribute ``<param>_<field>``)."""
    if arg_spec is None:
        arg_spec = ["args", "rets"]
    if isinstance(arg_spec, str):
        raise TypeError(f"kffi.jax: arg_spec is a list of str, got the str {arg_spec!r}")
    items: _Spec = []
    for item in arg_spec:
        if not isinstance(item, str):
            raise TypeError(f"kffi.jax: arg_spec items are str, got {item!r}")
        if item == "args":
            items.append((_ARGS, 0, ""))
        elif item == "rets":
            items.append((_RETS, 0, ""))
        elif item == "stream":
            items.append((_STREAM, 0, ""))
        elif item == "none":
            items.append((_NONE, 0, ""))
        elif item.startswith("record."):
            if not _RECORD_ITEM.fullmatch(item):
                raise ValueError(
                    f"kffi.jax: arg_spec item {item!r} is not "
                    f"'record.<param>:<type key>:<field>,...'"
                )
            items.append((_RECORD, 0, item[len("record.") :]))
        elif item.startswith("attrs."):
            key = item[len("attrs.") :]
            if not _ATTR_NAME.fullmatch(key):
                raise ValueError(
                    f"kffi.jax: arg_spec item {item!r}: the attribute name must be an identifier"
                )
            items.append((_ATTR, 0, key))
        else:
            m = re.fullmatch(r"(args|rets)\.(\d+)", item)
            if m is None:
                raise ValueError(
                    f"kffi.jax: arg_spec item {item!r} is not 'args', 'rets', "
                    f"'attrs.<key>', 'args.<i>', 'rets.<i>', 'stream' or 'none'"
                )
            items.append((_ARG if m.group(1) == "args" else _RET, int(m.group(2)), ""))
    return items


def _device_type(platform: str) -> tuple[str, int]:
    """(jax platform name, DLPack device type) for a platform argument."""
    if platform == "cpu":
        return "cpu", _KDL_CPU
    if platform in ("gpu", "cuda"):
        return "gpu", _KDL_CUDA
    if platform == "rocm":
        return "gpu", _KDL_ROCM
    raise ValueError(
        f"kffi.jax: platform is 'cpu' or 'gpu' (also 'cuda', 'rocm'), got {platform!r}"
    )


def _as_function(fn: Function | Callable[..., Any]) -> Function:
    if isinstance(fn, Function):
        return fn
    if callable(fn):
        func: Function = to_kffi(fn)  # a Python callable: runs under the GIL on XLA's thread
        return func
    raise TypeError(f"kffi.jax: expected a kffi.Function (or a callable), got {type(fn).__name__}")


def register_ffi_target(
    name: str,
    fn: Function | Callable[..., Any],
    *,
    platform: str = "cpu",
    arg_spec: Sequence[str] | None = None,
    allow_cuda_graph: bool = False,
) -> Any:
    """Registers a kffi function as the XLA FFI target ``name``; returns the handler capsule.

    ``jax.ffi.ffi_call(name, result_shape_dtypes)(*inputs, **attributes)`` then calls ``fn``
    with arguments laid out by ``arg_spec`` (default ``["args", "rets"]``: every input, then
    every result):

    - ``"args"`` / ``"rets"``: every input / result buffer, as a DLTensor view (inputs carry
      the read-only flag unless aliased to a result with ``input_output_aliases``);
    - ``"args.<i>"`` / ``"rets.<i>"``: input / result ``i`` alone;
    - ``"attrs.<key>"``: the attribute ``key`` (ints, bools, floats of any width, strings,
      arrays);
    - ``"stream"``: XLA's stream, for an explicit stream parameter (None on CPU);
    - ``"none"``: None, for an optional parameter left out.

    Results that no argument takes are filled from what ``fn`` returns (a tensor, or a tuple of
    them, in order); a kernel that allocates its output with ``Tensor::FromEnvAlloc`` gets XLA's
    result buffer and writes it in place. On GPU, XLA's stream is the environment stream during
    the call. ``allow_cuda_graph`` declares the target safe to capture into CUDA graphs (it must
    launch the same work on every call and allocate nothing but its results).
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"kffi.jax: a target name is a non-empty str, got {name!r}")
    jax_platform, device_type = _device_type(platform)
    func = _as_function(fn)
    spec = parse_arg_spec(arg_spec)
    traits = TRAIT_COMMAND_BUFFER_COMPATIBLE if allow_cuda_graph else 0
    with _lock:
        key = (name, jax_platform)
        if key in _registered:
            prev_fn, capsule, _ = _registered[key]
            if prev_fn.same_as(func) and _registered[key][2][1:] == (spec, traits):
                return capsule
            raise ValueError(
                f"kffi.jax: target {name!r} is already registered for "
                f"{jax_platform} with another function or arg_spec"
            )
        mod = handler_module()
        address = mod.make_target(
            func,
            [k for k, _, _ in spec],
            [i for _, i, _ in spec],
            [n for _, _, n in spec],
            device_type,
            traits,
            name,
        )
        capsule = jax.ffi.pycapsule(address)
        jax.ffi.register_ffi_target(name, capsule, platform=jax_platform)
        _registered[key] = (func, capsule, (address, spec, traits))
    return capsule


def register_content_target(
    name: str,
    fn: Function | Callable[..., Any],
    platform: str,
    arg_spec: Sequence[str] | None,
    allow_cuda_graph: bool,
) -> Any:
    """Registers a target whose name is derived from content (kffi/jax/_export.py): the same
    name means the same library, function and layout, so a target already registered under it
    (by another plan, or another Function object of the same library) serves as it is."""
    jax_platform, _ = _device_type(platform)
    with _lock:
        entry = _registered.get((name, jax_platform))
    if entry is not None:
        return entry[1]
    try:
        return register_ffi_target(
            name, fn, platform=platform, arg_spec=arg_spec, allow_cuda_graph=allow_cuda_graph
        )
    except ValueError:
        with _lock:  # another thread registered it in between
            entry = _registered.get((name, jax_platform))
        if entry is None:
            raise
        return entry[1]


def is_registered(name: str, platform: str) -> bool:
    """Whether kffi registered the target ``name`` for ``platform`` in this process."""
    jax_platform, _ = _device_type(platform)
    with _lock:
        return (name, jax_platform) in _registered


def handler_traits(name: str, platform: str = "cpu") -> int:
    """The XLA handler traits the target reports (bit 0: CUDA-graph compatible), asked the way
    XLA asks at registration."""
    jax_platform, _ = _device_type(platform)
    with _lock:
        entry = _registered.get((name, jax_platform))
    if entry is None:
        raise KeyError(f"kffi.jax: no target {name!r} registered for {jax_platform}")
    return int(handler_module().handler_traits(entry[2][0]))


def target_count() -> int:
    """How many handler addresses (targets) this process made."""
    return int(handler_module().target_count())


def registered_targets() -> list[tuple[str, str]]:
    """[(name, platform)] of the targets kffi.jax registered, in order."""
    with _lock:
        return list(_registered)
