"""python/kffi/cuda/_launch.py: CubinModule and its kernels as kffi Functions (the launcher itself
is C++: python/src/cuda/py_cuda.cc over include/kffi/cuda/cubin.h).

A kernel's contract is written as for kffi.compile (fake arguments) or kffi.with_contract (text).
Its tensors are passed as data pointers (plus byte_offset), its scalars as the contract types
say (int32 -> int, int64 -> long long, float32 -> float, float64 -> double, bool -> bool): the
contract is the kernel's parameter list, in order, unless ``params=`` lays the kernel's parameters
out otherwise (structs passed by value, such as CuTe DSL tensors: {data, shape..., stride...}; the
sizes are checked against the cubin's own, python/kffi/cuda/_cubin_info.py, or at the first launch
against the driver's). Grid, block and shared memory are expressions
of the contract's symbols and integer parameters (sym_int arithmetic, or text such as
"cdiv(n, 256)"), or come from a launch callback.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from .. import _core
from ..contract import _fakes, _render
from ..runtime._objects import Function, _annotate, _check_metadata
from ._nvrtc import normalize_arch

__all__ = ["CubinModule", "load_cubin"]

_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Mod: "%"}
_MAX_EXPR_CHARS = 1000


# A token program: ints, "name:<symbol>", operators (RPN).
_Program = list[int | str]
# A kernel parameter of ``params=``: (text, [(source, type code, name, dimension, constant)]).
_Layout = list[tuple[str, list[tuple[str, str, str, int, int]]]]


def _tokens(text: str, what: str) -> _Program:
    """RPN tokens of an integer expression: ints, names, + - * // % unary -, cdiv(a, b)."""
    if len(text) > _MAX_EXPR_CHARS:
        raise ValueError(f"kffi.cuda: {what} is longer than {_MAX_EXPR_CHARS} characters")
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as e:
        raise ValueError(f"kffi.cuda: cannot read {what} {text!r}: {e.msg}") from None
    out: _Program = []

    def walk(node: ast.expr, depth: int) -> None:
        if depth > 30:
            raise ValueError(f"kffi.cuda: {what} {text!r} nests too deeply")
        if isinstance(node, ast.Constant) and type(node.value) is int:
            out.append(node.value)
        elif isinstance(node, ast.Name):
            out.append("name:" + node.id)
        elif isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            walk(node.left, depth + 1)
            walk(node.right, depth + 1)
            out.append(_OPS[type(node.op)])
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            walk(node.operand, depth + 1)
            out.append("neg")
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.UAdd):
            walk(node.operand, depth + 1)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "cdiv"
            and len(node.args) == 2
            and not node.keywords
        ):
            a, b = node.args  # (a + b - 1) // b
            walk(a, depth + 1)
            walk(b, depth + 1)
            out.append("+")
            out.append(1)
            out.append("-")
            walk(b, depth + 1)
            out.append("//")
        else:
            raise ValueError(
                f"kffi.cuda: {what} {text!r}: only ints, symbols, integer parameters, + - * // %"
                f" and cdiv(a, b) are allowed (found {ast.dump(node)[:60]})"
            )

    walk(tree, 0)
    return out


def _programs(
    grid: Any, block: Any, shared_mem: Any, sym_names: Mapping[Any, str] | None
) -> list[_Program]:
    """The seven token programs (grid x y z, block x y z, shared memory)."""

    def one(value: Any, what: str) -> _Program:
        if isinstance(value, bool):
            raise TypeError(f"kffi.cuda: {what} is an int or an expression, got a bool")
        if isinstance(value, int):
            return [value]
        if isinstance(value, _fakes._Expr):
            if sym_names is None:
                raise TypeError(
                    f"kffi.cuda: {what} uses sym_int arithmetic, which needs a contract given as "
                    "fake arguments; with a contract's text, write the expression as text"
                )
            return _tokens(value.render(sym_names), what)
        if isinstance(value, str):
            return _tokens(value, what)
        raise TypeError(
            f"kffi.cuda: {what} is an int, a str or a sym_int expression, got "
            f"{type(value).__name__}"
        )

    def dims(value: Any, what: str) -> list[_Program]:
        if value is None:
            raise TypeError(f"kffi.cuda: {what} is required (or give launch=)")
        items = list(value) if isinstance(value, (tuple, list)) else [value]
        if not 1 <= len(items) <= 3:
            raise ValueError(f"kffi.cuda: {what} has 1 to 3 dimensions, got {len(items)}")
        items += [1] * (3 - len(items))
        return [one(v, f"{what}[{i}]") for i, v in enumerate(items)]

    return dims(grid, "grid") + dims(block, "block") + [one(shared_mem, "shared_mem")]


_TYPES = {
    "ptr": "P",
    "i32": "i",
    "int32": "i",
    "i64": "l",
    "int64": "l",
    "f32": "f",
    "float32": "f",
    "f64": "d",
    "float64": "d",
    "bool": "b",
}
_FIELD = re.compile(
    r"^\s*(?:(?P<const>-?\d+|null(?!\w))"
    r"|(?P<name>[A-Za-z_]\w*)(?:\.(?P<what>data|shape|stride)(?:\[\s*(?P<dim>-?\d+)\s*\])?)?)"
    r"\s*(?::\s*(?P<type>\w+)\s*)?$"
)


def _layout(params: Any) -> _Layout:
    """The kernel parameters of ``params=`` as the launcher reads them: [(text, fields)]."""
    if isinstance(params, str):
        raise TypeError("kffi.cuda: params is a list of kernel parameters, not one str")
    out: _Layout = []
    for spec in params:
        if not isinstance(spec, str) or len(spec) > _MAX_EXPR_CHARS or "\0" in spec:
            raise TypeError(f"kffi.cuda: a kernel parameter is a str, got {spec!r}")
        text = spec.strip()
        struct = text.startswith("{")
        if struct and not text.endswith("}"):
            raise ValueError(f"kffi.cuda: the kernel parameter {spec!r} has no closing }}")
        items = text[1:-1].split(",") if struct else [text]
        fields: list[tuple[str, str, str, int, int]] = []
        for item in items:
            m = _FIELD.match(item)
            if not m:
                raise ValueError(
                    f"kffi.cuda: cannot read {item.strip()!r} in the kernel parameter {spec!r} "
                    "(expected NAME, NAME.data, NAME.shape[D]:i32|i64, NAME.stride[D]:i32|i64, "
                    "an int constant or null, each with an optional :TYPE)"
                )
            type_ = m["type"]
            if type_ is not None and type_ not in _TYPES:
                raise ValueError(
                    f"kffi.cuda: unknown type {type_!r} in the kernel parameter {spec!r} "
                    f"(known: {', '.join(_TYPES)})"
                )
            code = _TYPES[type_] if type_ else "?"
            what, dim = m["what"], m["dim"]
            if what in ("shape", "stride"):
                if dim is None:
                    raise ValueError(f"kffi.cuda: {item.strip()!r} names no dimension ([D])")
                if type_ is None:
                    raise ValueError(
                        f"kffi.cuda: {item.strip()!r} says its type (:i32 or :i64), as the "
                        "kernel stores it"
                    )
            elif dim is not None:
                raise ValueError(f"kffi.cuda: cannot read {item.strip()!r}")
            if m["const"] is not None:
                c = m["const"]
                if c == "null":
                    fields.append(("c", "P" if code == "?" else code, "", 0, 0))
                else:
                    v = int(c)
                    if not -(2**63) <= v < 2**63:
                        raise ValueError(f"kffi.cuda: the constant {c} overflows int64")
                    fields.append(("c", code, "", 0, v))
            else:
                src = {None: "a", "data": "p", "shape": "s", "stride": "t"}[what]
                fields.append((src, code, m["name"], int(dim or 0), 0))
        out.append((text, fields))
    return out


def _config_callback(launch: Callable[..., Any], name: str) -> Function:
    """A kffi Function that calls launch(*args) and flattens its (grid, block[, shared_mem])."""
    if not callable(launch):
        raise TypeError(f"kffi.cuda: launch must be callable, got {type(launch).__name__}")

    def flat(value: Any, what: str) -> list[int]:
        items = list(value) if isinstance(value, (tuple, list)) else [value]
        if not 1 <= len(items) <= 3 or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in items
        ):
            raise TypeError(
                f"kffi.cuda kernel `{name}`: the launch callback's {what} must be an int or 1 to 3"
                f" ints, got {value!r}"
            )
        return items + [1] * (3 - len(items))

    def config(*args: Any) -> tuple[int, ...]:
        r = launch(*args)
        if not isinstance(r, (tuple, list)) or len(r) not in (2, 3):
            raise TypeError(
                f"kffi.cuda kernel `{name}`: the launch callback must return (grid, block) or "
                f"(grid, block, shared_mem), got {r!r}"
            )
        smem = r[2] if len(r) == 3 else 0
        if not isinstance(smem, int) or isinstance(smem, bool):
            raise TypeError(f"kffi.cuda kernel `{name}`: shared_mem must be an int, got {smem!r}")
        return (*flat(r[0], "grid"), *flat(r[1], "block"), smem)

    fn: Function = _core._to_kffi(config)
    return fn


class CubinModule:
    """Kernels of cubin / fatbin / PTX images, launched through the CUDA driver (loaded on the
    first launch; making a module needs no GPU). Several images tagged by arch form one module:
    each device loads the one that runs best there (an exact cubin, else the newest cubin of its
    major version, else PTX), and a device none runs on is a RuntimeError naming the archs.
    """

    def __init__(self, images: dict[Any, Any], label: str = "a CUDA module") -> None:
        if not isinstance(images, dict) or not images:
            raise TypeError("kffi.cuda.CubinModule: images is a non-empty {arch: bytes} dict")
        items: list[tuple[str, bytes]] = []
        spelled: dict[str, Any] = {}  # arch tag -> how the dict spelled it
        for arch, data in images.items():
            tag = "" if arch in (None, "") else normalize_arch(arch)
            if not isinstance(data, (bytes, bytearray, memoryview)):
                raise TypeError(
                    f"kffi.cuda.CubinModule: the image for {arch!r} is bytes, got "
                    f"{type(data).__name__}"
                )
            if tag in spelled:
                # Two images for one arch: the one the driver loads, the one .images holds and
                # the one the digest names would not be the same bytes.
                raise ValueError(
                    f"kffi.cuda.CubinModule: {spelled[tag]!r} and {arch!r} both name the arch "
                    f"{tag or '(untagged)'}; give each arch one image"
                )
            spelled[tag] = arch
            items.append((tag, bytes(data)))
        self.images = dict(items)
        self.label = label
        self._digest: str | None = None
        self._capsule = _core._cuda_module(items, label)

    @property
    def archs(self) -> list[str]:
        """The images' arch tags ("" for an untagged image, e.g. a fatbin)."""
        return list(self.images)

    def pick(self, compute_capability: tuple[int, int] | int | str) -> str:
        """The arch tag of the image a device of this compute capability ((9, 0), 90 or "9.0")
        loads; RuntimeError when none runs there."""
        cc = compute_capability
        if isinstance(cc, tuple):
            cc = cc[0] * 10 + cc[1]
        elif isinstance(cc, str):
            cc = int(normalize_arch(cc)[3:].rstrip("af"))
        i = _core._cuda_pick_image(list(self.images), int(cc))
        if i < 0:
            raise RuntimeError(
                f"kffi.cuda: {self.label} has no image for sm_{cc}; it has: "
                f"{', '.join(self.images) or '?'}"
            )
        return list(self.images)[i]

    def kernel(
        self,
        kernel_name: str,
        *contract: Any,
        grid: Any = None,
        block: Any = None,
        shared_mem: Any = 0,
        launch: Callable[..., Any] | None = None,
        param_names: Any = None,
        outputs: Any = None,
        name: str | None = None,
        doc: str = "",
        params: Any = None,
    ) -> Function:
        """The kernel ``kernel_name`` (its symbol in the image: mangled for C++ unless
        ``extern "C"``) as a kffi Function checked against a contract, then launched on the
        environment stream of its first CUDA tensor's device.

        ``contract``: fake arguments as for :func:`kffi.compile` (tensors default to
        ``device="cuda"``), with ``param_names`` and ``outputs``; or one string, the contract's
        text. It lists the kernel's parameters in order. ``grid`` / ``block``: an int, an
        expression, or 1 to 3 of them; ``shared_mem``: dynamic shared memory bytes (an int or an
        expression). An expression is sym_int arithmetic or text over the contract's symbols and
        integer parameters (``"cdiv(n, 256)"``, ``"(n + 255) // 256"``). ``launch``: instead, a
        callable taking the call's arguments and returning ``(grid, block)`` or ``(grid, block,
        shared_mem)`` (a Python call per launch). ``name``: the Function's name (default: the
        kernel's identifier).

        ``params``: the kernel's parameters, when they are not the contract's arguments one to
        one: a list with one str per kernel parameter, each a field or a struct of fields passed
        by value (``"{x.data, x.shape[0]:i32, x.stride[0]:i64}"``, laid out as C lays out a
        struct). A field is ``NAME`` (a contract argument as its type says), ``NAME.data`` (a
        tensor's data pointer), ``NAME.shape[D]`` / ``NAME.stride[D]`` with ``:i32`` or ``:i64``
        (strides in elements), or a constant (``0:i64``, ``null``). When the image is a cubin,
        the parameters' sizes are checked against the kernel's own (a ValueError naming the
        parameter).
        """
        if not isinstance(kernel_name, str) or not kernel_name or "\0" in kernel_name:
            raise ValueError(f"kffi.cuda: kernel_name is a symbol name, got {kernel_name!r}")
        if name is None:
            name = re.sub(r"\W", "_", kernel_name.split("<")[0]).strip("_") or "kernel"
            if name[0].isdigit():
                name = "k" + name
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"kffi.cuda: name must be an identifier, got {name!r}")
        if not isinstance(doc, str):
            raise TypeError(f"kffi.cuda: doc must be a str, got {type(doc).__name__}")
        sym_names = None
        if len(contract) == 1 and isinstance(contract[0], str):
            if param_names is not None or outputs is not None:
                raise TypeError(
                    "kffi.cuda: param_names and outputs go with fake arguments, not with a "
                    "contract's text"
                )
            text = contract[0]
        else:
            fakes = [_fakes._as_fake(a) for a in contract]
            if any(isinstance(a, _fakes.FakeStream) for a in fakes):
                raise ValueError(
                    "kffi.cuda: a kernel launches on the environment stream itself; its contract"
                    " declares no stream"
                )
            text = _render.render_contract(
                *contract, param_names=param_names, outputs=outputs, default_device="cuda"
            )
            names = _render._param_names(param_names, len(fakes))
            sym_names, _ = _render._symbol_names(fakes, _render._outputs_of(outputs), names)
        if launch is not None:
            if grid is not None or block is not None or shared_mem != 0:
                raise TypeError("kffi.cuda: give either launch= or grid/block/shared_mem")
            programs: list[_Program] = []
            callback: Function | None = _config_callback(launch, name)
        else:
            programs, callback = _programs(grid, block, shared_mem, sym_names), None
        layout = None if params is None else _layout(params)
        fn, meta_text, sizes = _core._cuda_kernel(
            self._capsule, kernel_name, name, text, doc, layout, programs, callback
        )
        self._check_params(kernel_name, name, sizes)
        where = f"kffi.cuda: the metadata of `{name}`"
        try:
            meta = json.loads(meta_text)
        except ValueError as e:
            raise ValueError(f"{where} is not JSON: {e}") from None
        meta["name"] = name
        _annotate(fn, _check_metadata(meta, where))
        fn.contract = text
        fn.kernel_name = kernel_name
        fn.cubin_module = self
        fn.param_sizes = [size for size, _ in sizes]
        if callback is None:
            # Named by content for kffi.jax.export: the same images, kernel, contract, parameter
            # layout and launch configuration give the same XLA target name in every process.
            # (A launch callback is Python code: such a kernel has no content name.)
            key = json.dumps([kernel_name, name, text, layout, programs], separators=(",", ":"))
            h = hashlib.sha256(b"kffi.cuda.kernel.v1\0")
            h.update(self.digest.encode())
            h.update(key.encode())
            fn._content_origin = (h.hexdigest()[:16], name)
        return fn

    @property
    def digest(self) -> str:
        """SHA-256 (hex) of the module's images and their arch tags."""
        if self._digest is None:
            h = hashlib.sha256()
            for arch, data in sorted(self.images.items()):
                h.update(f"{arch}\0{len(data)}\0".encode())
                h.update(data)
            self._digest = h.hexdigest()
        return self._digest

    def param_info(self, kernel_name: str) -> dict[str, list[tuple[int, int]]]:
        """``{arch: [(offset, size), ...]}``: the parameters of ``kernel_name`` as each cubin
        image records them (its ELF ``.nv.info`` attributes), read with no GPU. Images that are
        not ELF cubins (PTX, fatbins) are left out; a cubin without the kernel is a ValueError."""
        from ._cubin_info import kernel_params

        out: dict[str, list[tuple[int, int]]] = {}
        for arch, data in self.images.items():
            info = kernel_params(data, kernel_name, self.label + (f" ({arch})" if arch else ""))
            if info is not None:
                out[arch] = info
        return out

    def _check_params(self, kernel_name: str, name: str, sizes: list[tuple[int, str]]) -> None:
        """The packed parameters ([(size, text)]) against each cubin's own; ValueError on a
        difference, naming the parameter and both sizes."""
        for arch, info in self.param_info(kernel_name).items():
            where = self.label + (f" ({arch})" if arch else "")
            for i, (size, text) in enumerate(sizes):
                if i >= len(info):
                    raise ValueError(
                        f"kffi.cuda kernel `{name}`: the contract packs {len(sizes)} kernel "
                        f"parameters, `{kernel_name}` in {where} takes {len(info)}: parameter {i} "
                        f"(`{text}`, {size} bytes) is not in the kernel"
                    )
                if info[i][1] != size:
                    raise ValueError(
                        f"kffi.cuda kernel `{name}`: parameter {i} (`{text}`) is {info[i][1]} "
                        f"bytes in `{kernel_name}` of {where}, {size} bytes as the contract "
                        "packs it"
                    )
            if len(info) > len(sizes):
                raise ValueError(
                    f"kffi.cuda kernel `{name}`: `{kernel_name}` in {where} takes {len(info)} "
                    f"parameters, the contract packs {len(sizes)}: parameter {len(sizes)} "
                    f"({info[len(sizes)][1]} bytes) is missing"
                )

    def __repr__(self) -> str:
        return f"<kffi.cuda.CubinModule {self.label} archs={self.archs}>"


def _read_image(value: object, what: str) -> bytes:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, (str, os.PathLike)):
        path = os.fspath(value)
        if "\0" in path:
            raise ValueError(f"kffi.cuda.load_cubin: the path {path!r} contains a NUL byte")
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError as e:
            raise FileNotFoundError(
                f"kffi.cuda.load_cubin: cannot read {what} {path!r}: {e}"
            ) from None
    raise TypeError(f"kffi.cuda.load_cubin: {what} is bytes or a path, got {type(value).__name__}")


def load_cubin(image: Any, arch: str | None = None) -> CubinModule:
    """A :class:`CubinModule` of a cubin, fatbin or PTX (bytes or a path), e.g. Triton's
    ``compiled.asm["cubin"]`` or a CuTe DSL cubin; or of several, as ``{arch: bytes or path}``
    (``{"sm_90a": ..., "sm_100a": ..., "compute_90": ptx}``). ``arch`` tags a single image (the
    driver picks from an untagged one itself, and rejects it on a device it does not fit).
    """
    if isinstance(image, dict):
        if arch is not None:
            raise TypeError("kffi.cuda.load_cubin: arch tags a single image; a dict has its own")
        images = {a: _read_image(v, f"the image for {a!r}") for a, v in image.items()}
        label = "a CUDA module"
    else:
        images = {arch or "": _read_image(image, "the image")}
        label = (
            f"the CUDA module {os.fspath(image)!r}"
            if isinstance(image, (str, os.PathLike))
            else "a CUDA module"
        )
    return CubinModule(images, label)
