"""python/kffi/contract/_fakes.py: the fake arguments a contract is declared with (fake tensors,
scalars, streams, records, symbolic sizes); _render.py renders them to a contract's text and
_compile.py is kffi.compile::

    n = kffi.sym_int(divisibility=16)
    add = kffi.compile(SOURCE, "add_one",
                       kffi.fake_tensor("float32", (n,), align=16),
                       kffi.fake_tensor("float32", (n,), align=16))
    add(a, b)          # torch / NumPy / JAX / CuPy arrays; checked in compiled code
    add.contract       # "a: Tensor([n0], float32, device=cpu, align=16), ...; n0: int64 % 16"
    add.export("libadd.so")   # kffi.load_module("libadd.so").add_one keeps the contract

The fake arguments render to the text that ``KFFI_EXPORT_CONTRACT(name, fn, "text")`` parses
into a check plan (grammar in kffi/contract_parser.h, semantics in kffi/contract.h)::

    a: Tensor([n, 4], float32|float16, device=cuda, align=16, offset0,
              contiguous | row_major | col_major | stride_order=(1,0), strides=[s, 1], mut),
    k: int32[0, 1024], alpha: float, flag: bool, bias: Optional[Tensor([n], float32)],
    pair: Tuple[Tensor([n], float32), int], stream: EnvStream, s: Stream
    -> Tensor([n * 2, (n + 1) // 2, n % 4], float32)
    ; n: int32 % 16 parallel, s: int64

Limits are checked here, before any compiler runs (ValueError): integers fit int64 (int32 for
Int32 ranges), a tensor has at most 32 dimensions, the text is at most 65536 bytes.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeAlias

from .. import _core
from ..runtime._error import counted
from ..runtime._types import dtype as _dtype
from ..toolchain import cpp as _cpp

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
MAX_CONTRACT_BYTES = _core.MAX_CONTRACT_BYTES  # the parser's limit (contract/plan.h)

# Kept for callers of kffi.contract.cpp_param_names; it lives in kffi.cpp.
cpp_param_names = _cpp.cpp_param_names

# The names of a contract's symbols: {id(symbol): name}.
_Names: TypeAlias = Mapping[int, str]
# A fake argument, as _as_fake makes it from what a user passes.
_Fake: TypeAlias = "FakeTensor | FakeStream | ScalarType | _OptionalArg | _TupleArg | FakeRecord"


def _check_int64(value: int, what: str, lo: int = _INT64_MIN, hi: int = _INT64_MAX) -> int:
    if not lo <= value <= hi:
        width = "int32" if (lo, hi) == (_INT32_MIN, _INT32_MAX) else "int64"
        raise ValueError(f"kffi: {what} must fit {width} [{lo}, {hi}], got {value}")
    return value


# ---------------------------------------------------------------------------------------------
# Symbolic sizes and expressions of them (for output shapes).
# ---------------------------------------------------------------------------------------------


class _Expr:
    """An integer expression of symbolic sizes: n * 2, n + m - 1 (output shapes)."""

    _prec = 3  # binding strength when rendered: atoms 3, * 2, + - 1

    def _binop(self, op: str, other: _Expr | int, swap: bool = False) -> _BinExpr:
        other = _as_expr(other, op)
        return _BinExpr(op, other, self) if swap else _BinExpr(op, self, other)

    def __add__(self, o: _Expr | int) -> _BinExpr:
        return self._binop("+", o)

    def __radd__(self, o: _Expr | int) -> _BinExpr:
        return self._binop("+", o, swap=True)

    def __sub__(self, o: _Expr | int) -> _BinExpr:
        return self._binop("-", o)

    def __rsub__(self, o: _Expr | int) -> _BinExpr:
        return self._binop("-", o, swap=True)

    def __mul__(self, o: _Expr | int) -> _BinExpr:
        return self._binop("*", o)

    def __rmul__(self, o: _Expr | int) -> _BinExpr:
        return self._binop("*", o, swap=True)

    def __floordiv__(self, o: _Expr | int) -> _BinExpr:
        return self._binop("//", o)

    def __rfloordiv__(self, o: _Expr | int) -> _BinExpr:
        return self._binop("//", o, swap=True)

    def __mod__(self, o: _Expr | int) -> _BinExpr:
        return self._binop("%", o)

    def __rmod__(self, o: _Expr | int) -> _BinExpr:
        return self._binop("%", o, swap=True)

    def __neg__(self) -> _Neg:
        return _Neg(self)

    def __bool__(self) -> bool:
        raise TypeError(
            "a symbolic size has no value at compile time; use it in fake_tensor "
            "shapes (and output shapes)"
        )

    def symbols(self) -> list[SymInt]:
        return []

    def render(self, names: _Names) -> str:
        """The expression's text, its symbols named by ``names``."""
        raise NotImplementedError  # each kind of expression renders itself


def _as_expr(value: object, op: str = "in a shape") -> _Expr:
    if isinstance(value, _Expr):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return _Const(_check_int64(value, "an integer in a shape expression"))
    raise TypeError(
        f"kffi: cannot use {value!r} ({type(value).__name__}) {op!s} with a symbolic "
        f"size; use ints and kffi.sym_int()"
    )


class _Const(_Expr):
    __slots__ = ("value",)

    def __init__(self, value: int) -> None:
        self.value = value

    def render(self, names: _Names) -> str:
        return str(self.value)


class _Neg(_Expr):
    __slots__ = ("arg",)
    _prec = 3

    def __init__(self, arg: _Expr) -> None:
        self.arg = arg

    def symbols(self) -> list[SymInt]:
        return self.arg.symbols()

    def render(self, names: _Names) -> str:
        text = self.arg.render(names)
        return f"-({text})" if self.arg._prec < 3 else f"-{text}"


class _BinExpr(_Expr):
    __slots__ = ("lhs", "op", "rhs")

    def __init__(self, op: str, lhs: _Expr, rhs: _Expr) -> None:
        self.op, self.lhs, self.rhs = op, lhs, rhs
        self._prec = 2 if op in ("*", "//", "%") else 1

    def symbols(self) -> list[SymInt]:
        return self.lhs.symbols() + self.rhs.symbols()

    def render(self, names: _Names) -> str:
        def side(e: _Expr, right: bool) -> str:
            text = e.render(names)
            # a - (b + c), a * (b + c), a // (b * c) and a * (b % c) need the parentheses;
            # a + b * c, a + (b - c) and a * (b * c) do not
            same = right and e._prec == self._prec
            if e._prec < self._prec or (
                same
                and (
                    self.op in ("-", "//", "%")
                    # same binding strength as a product: e is one (only _BinExpr binds below 3)
                    or (self.op == "*" and isinstance(e, _BinExpr) and e.op != "*")
                )
            ):
                return f"({text})"
            return text

        return f"{side(self.lhs, False)} {self.op} {side(self.rhs, True)}"


class SymInt(_Expr):
    """A symbolic size. Its first occurrence in a call binds it; later ones must match.

    ``divisibility``: the bound value must be a multiple of it. ``width``: 32 or 64, the bound
    value must fit int32 / int64. ``name`` appears in the signature and messages (default
    n0, n1, ... in order of first appearance). ``parallel``: the kernel computes each index
    along every dimension of this size independently (the rows of a normalisation, a batch);
    nothing is checked, but frameworks may split the work along it (kffi.jax under a device
    mesh, jax.vmap).
    """

    __slots__ = ("divisibility", "name", "parallel", "width")

    def __init__(
        self,
        name: str | None = None,
        divisibility: int = 1,
        width: int = 64,
        parallel: bool = False,
    ) -> None:
        if name is not None and (not isinstance(name, str) or not _IDENT.fullmatch(name)):
            raise ValueError(f"kffi.sym_int: name must be an identifier, got {name!r}")
        if not isinstance(divisibility, int) or isinstance(divisibility, bool) or divisibility < 1:
            raise ValueError(
                f"kffi.sym_int: divisibility must be an int >= 1, got {divisibility!r}"
            )
        _check_int64(divisibility, "kffi.sym_int: divisibility")
        if width not in (32, 64):
            raise ValueError(f"kffi.sym_int: width must be 32 or 64, got {width!r}")
        if not isinstance(parallel, bool):
            raise TypeError(f"kffi.sym_int: parallel must be a bool, got {parallel!r}")
        self.parallel = parallel
        self.name = name
        self.divisibility = divisibility
        self.width = width

    def symbols(self) -> list[SymInt]:
        return [self]

    def render(self, names: _Names) -> str:
        return names[id(self)]

    def declaration(self, names: _Names) -> str:
        text = f"{names[id(self)]}: int{self.width}"
        text += f" % {self.divisibility}" if self.divisibility != 1 else ""
        return text + (" parallel" if self.parallel else "")

    def __repr__(self) -> str:
        return (
            f"kffi.sym_int(name={self.name!r}, divisibility={self.divisibility}, "
            f"width={self.width}" + (", parallel=True)" if self.parallel else ")")
        )

    __hash__ = object.__hash__


def sym_int(
    name: str | None = None, divisibility: int = 1, width: int = 64, parallel: bool = False
) -> SymInt:
    """A symbolic dimension for fake tensors, shared between arguments (see :class:`SymInt`)."""
    return SymInt(name, divisibility, width, parallel)


# ---------------------------------------------------------------------------------------------
# Fake arguments.
# ---------------------------------------------------------------------------------------------


def _dtype_name(value: Any) -> str:
    try:
        return str(_dtype(value))
    except (TypeError, ValueError) as e:
        raise TypeError(f"kffi.fake_tensor: cannot read dtype {value!r}: {e}") from None


def _positive_int(value: object, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(
            f"kffi.fake_tensor: {what} must be a non-negative int or a "
            f"kffi.sym_int(), got {value!r}"
        )
    return _check_int64(value, f"kffi.fake_tensor: {what}")


class FakeTensor:
    """A fake tensor for kffi.compile: shape (ints and sym_ints), dtype(s), device,
    alignment, layout (compact row-major unless told otherwise). Holds no data. See
    :func:`fake_tensor`."""

    __slots__ = (
        "align",
        "device",
        "dtypes",
        "layout",
        "layout_default",
        "mut",
        "offset0",
        "shape",
        "strides",
    )

    def __init__(
        self,
        dtype: Any,
        shape: int | _Expr | Iterable[int | _Expr],
        *,
        align: int | None = None,
        stride_order: str | Sequence[int] | None = None,
        device: str | Sequence[str] | None = None,
        contiguous: bool | None = None,
        strides: Iterable[int | SymInt] | None = None,
        offset0: bool = False,
        mut: bool = False,
    ) -> None:
        if dtype is None or (isinstance(dtype, str) and dtype == "*"):
            self.dtypes: tuple[str, ...] = ("*",)
        else:
            alts = dtype if isinstance(dtype, (tuple, list)) else (dtype,)
            if not alts:
                raise ValueError("kffi.fake_tensor: give a dtype (or a tuple of alternatives)")
            self.dtypes = tuple(_dtype_name(d) for d in alts)
        if isinstance(shape, (int, _Expr)):
            shape = (shape,)
        self.shape: tuple[int | _Expr, ...] = tuple(
            d if isinstance(d, _Expr) else _positive_int(d, "a dimension") for d in shape
        )
        if len(self.shape) > _core.MAX_NDIM:
            raise ValueError(
                f"kffi.fake_tensor: {len(self.shape)} dimensions; a contract tensor "
                f"has at most {_core.MAX_NDIM}"
            )
        if align is not None and (
            not isinstance(align, int)
            or isinstance(align, bool)
            or align < 1
            or align & (align - 1)
        ):
            raise ValueError(f"kffi.fake_tensor: align is a power of two in bytes, got {align!r}")
        if align is not None:
            _check_int64(align, "kffi.fake_tensor: align")
        self.align = align
        self.layout = self._layout(stride_order, contiguous, strides)
        # Compact by default, as every kernel that indexes its data as contiguous assumes:
        # nothing said about the layout (no contiguous=, stride_order= or strides=).
        self.layout_default = stride_order is None and contiguous is None and strides is None
        self.device = self._device(device)
        checked: tuple[int | SymInt, ...] | None = None
        if strides is not None:
            checked = tuple(
                st if isinstance(st, SymInt) else _positive_int(st, "a stride") for st in strides
            )
            if len(checked) != len(self.shape):
                raise ValueError(
                    f"kffi.fake_tensor: {counted(len(checked), 'stride')} for "
                    f"{counted(len(self.shape), 'dimension')}"
                )
        self.strides = checked
        self.offset0 = bool(offset0)
        self.mut = bool(mut)

    def _layout(
        self, stride_order: str | Sequence[int] | None, contiguous: bool | None, strides: object
    ) -> str | None:
        if contiguous is not None and contiguous not in (True, False):
            raise TypeError(
                f"kffi.fake_tensor: contiguous is True, False (any strides) or None (compact "
                f"unless stride_order= or strides= say otherwise), got {contiguous!r}"
            )
        if stride_order is None:
            if contiguous is None:  # the default: compact, unless strides are spelled out
                return "contiguous" if strides is None else None
            return "contiguous" if contiguous else None
        if contiguous is not None:
            raise ValueError(
                "kffi.fake_tensor: give contiguous= or a stride_order, not both "
                "(contiguous=True is stride_order='row_major'; contiguous=False is any strides)"
            )
        if isinstance(stride_order, str):
            if stride_order not in ("row_major", "col_major"):
                raise ValueError(
                    f"kffi.fake_tensor: stride_order is 'row_major', 'col_major' or "
                    f"a tuple of dimensions, got {stride_order!r}"
                )
            return stride_order
        order = tuple(stride_order)
        if sorted(order) != list(range(len(self.shape))):
            raise ValueError(
                f"kffi.fake_tensor: stride_order lists each dimension "
                f"0..{len(self.shape) - 1} once (outermost first), got {order}"
            )
        return "stride_order=(" + ",".join(map(str, order)) + ")"

    @staticmethod
    def _device(device: str | Sequence[str] | None) -> str | None:
        if device is None:
            return None
        alts = device if isinstance(device, (tuple, list)) else (device,)
        names: list[str] = []
        for alt in alts:
            d = str(alt)
            if d not in ("cpu", "cuda", "any"):
                raise ValueError(
                    f"kffi.fake_tensor: device is 'cpu', 'cuda', 'any' or a tuple "
                    f"of them, got {device!r}"
                )
            names.append(d)
        return "any" if "any" in names else "|".join(names)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def symbols(self) -> list[SymInt]:
        return [
            s
            for d in self.shape + (self.strides or ())
            if isinstance(d, _Expr)
            for s in d.symbols()
        ]

    def render(self, names: _Names, default_device: str | None = None, output: bool = False) -> str:
        """The contract text. ``output``: a returned tensor, whose layout is what the function
        allocates: the default compact layout is left unsaid there (nothing checks it)."""
        dims = ", ".join(d.render(names) if isinstance(d, _Expr) else str(d) for d in self.shape)
        parts = [f"[{dims}]", "|".join(self.dtypes)]
        device = self.device or default_device
        if device and device != "any":
            parts.append(f"device={device}")
        if self.align is not None:
            parts.append(f"align={self.align}")
        if self.offset0:
            parts.append("offset0")
        if self.layout and not (output and self.layout_default):
            parts.append(self.layout)
        if self.strides is not None:
            parts.append(
                "strides=["
                + ", ".join(
                    st.render(names) if isinstance(st, SymInt) else str(st) for st in self.strides
                )
                + "]"
            )
        if self.mut:
            parts.append("mut")
        return f"Tensor({', '.join(parts)})"

    def __repr__(self) -> str:
        return f"kffi.fake_tensor({self.render(_NameRepr())})"


class _NameRepr(dict[int, str]):
    """Symbol names for reprs, before kffi.compile has named the unnamed ones."""

    def __missing__(self, key: int) -> str:
        return "?"


def fake_tensor(
    dtype: Any,
    shape: int | _Expr | Iterable[int | _Expr],
    *,
    align: int | None = None,
    stride_order: str | Sequence[int] | None = None,
    device: str | Sequence[str] | None = None,
    contiguous: bool | None = None,
    strides: Iterable[int | SymInt] | None = None,
    offset0: bool = False,
    mut: bool = False,
) -> FakeTensor:
    """A fake tensor for :func:`compile`.

    ``dtype``: a name ("float32"), a torch/NumPy dtype, a tuple of alternatives, or None / "*"
    (any). ``shape``: ints and :func:`sym_int` s. ``align``: byte alignment of the first
    element (data pointer + byte_offset). ``device``: "cpu", "cuda", "any" or a tuple of them
    (default: "cuda" for CUDA sources, else "cpu"). Layout: compact row-major by default
    (the contract says ``contiguous``; a strided view is refused), as a kernel that indexes its
    data as contiguous needs. ``contiguous=False`` accepts any strides (the kernel reads
    ``strides()`` itself). ``stride_order`` = "row_major", "col_major" or the dimensions listed
    from the outermost (largest stride) to the innermost asks for another compact layout, e.g.
    ``(1, 0)`` is column-major for 2-d (note: CuTe's ``stride_order`` ranks each dimension
    instead). ``strides``: ints and sym_ints, the layout itself (add ``contiguous=True`` to
    require compact as well). Like CuTe's ``make_fake_compact_tensor`` by default, and
    ``make_fake_tensor`` with ``contiguous=False``.
    ``offset0``: byte_offset must be 0. ``mut``: the kernel writes this tensor; a read-only
    array (a NumPy array with ``writeable=False``, a JAX array) is refused with a ValueError
    naming the parameter (rendered as the option ``mut``).
    """
    return FakeTensor(
        dtype,
        shape,
        align=align,
        stride_order=stride_order,
        device=device,
        contiguous=contiguous,
        strides=strides,
        offset0=offset0,
        mut=mut,
    )


class FakeStream:
    """A fake stream, passed to the C++ function as ``void*``.

    ``env=True``: the environment stream (the caller framework's current stream for the first
    non-CPU tensor); it is not part of the call signature (contract type ``EnvStream``).
    ``env=False``: an explicit stream argument (contract type ``Stream``): the caller passes a
    stream object, a raw handle (int) or None (the default stream, NULL)."""

    __slots__ = ("env",)

    def __init__(self, env: bool = True) -> None:
        self.env = bool(env)

    def symbols(self) -> list[SymInt]:
        return []

    def render(self, names: _Names, default_device: str | None = None) -> str:
        return "EnvStream" if self.env else "Stream"

    def __repr__(self) -> str:
        return f"kffi.fake_stream(env={self.env})"


def fake_stream(env: bool = True) -> FakeStream:
    """A fake stream for :func:`compile` (see :class:`FakeStream`)."""
    return FakeStream(env)


class ScalarType:
    """A scalar parameter: kffi.Int32, Int64, Float32, Float64, Bool; ``.range(lo, hi)``
    bounds it (inclusive)."""

    __slots__ = ("hi", "lo", "type_name")

    def __init__(self, type_name: str, lo: float | None = None, hi: float | None = None) -> None:
        self.type_name = type_name
        self.lo = lo
        self.hi = hi

    def range(self, lo: float, hi: float) -> ScalarType:
        if self.type_name == "bool":
            raise TypeError("kffi.Bool has no range")
        kind = float if self.type_name.startswith("float") else int
        for v in (lo, hi):
            if isinstance(v, bool) or not isinstance(v, (int, float) if kind is float else int):
                raise TypeError(f"kffi.{self!r}.range: bounds must be {kind.__name__}s, got {v!r}")
        if not (lo <= hi) or (kind is float and not -1e308 < lo <= hi < 1e308):
            raise ValueError(f"kffi.{self!r}.range: [{lo}, {hi}] is empty or not finite")
        if kind is int:
            bounds = (
                (_INT32_MIN, _INT32_MAX) if self.type_name == "int32" else (_INT64_MIN, _INT64_MAX)
            )
            for v in (lo, hi):
                _check_int64(int(v), f"kffi.{self!r}.range: a bound", *bounds)  # ints (above)
        return ScalarType(self.type_name, lo, hi)

    def symbols(self) -> list[SymInt]:
        return []

    def render(self, names: _Names | None = None, default_device: str | None = None) -> str:
        if self.lo is None:
            return self.type_name
        return f"{self.type_name}[{self.lo}, {self.hi}]"

    def __repr__(self) -> str:
        base = {
            "int32": "Int32",
            "int64": "Int64",
            "float32": "Float32",
            "float64": "Float64",
            "bool": "Bool",
            "int": "int",
            "float": "float",
        }.get(self.type_name, self.type_name)
        return base if self.lo is None else f"{base}.range({self.lo}, {self.hi})"


Int32 = ScalarType("int32")
Int64 = ScalarType("int64")
Float32 = ScalarType("float32")
Float64 = ScalarType("float64")
Bool = ScalarType("bool")


class FakeRecord:
    """A record parameter (a kffi object type with fields, or a ``KFFI_RECORD`` struct) whose
    fields the contract constrains: ``kffi.contract.fake_record("demo.Config",
    alpha=kffi.Float64.range(0.0, 1.0), n=kffi.Int64.range(1, 64))`` renders
    ``demo.Config{alpha: float64[0.0, 1.0], n: int64[1, 64]}``. Fields left out are unchecked."""

    __slots__ = ("fields", "type_key")

    def __init__(self, type_key: str, fields: dict[str, Any]) -> None:
        if not isinstance(type_key, str) or not all(
            part.isidentifier() and part.isascii() for part in type_key.split(".")
        ):
            raise ValueError(
                f"kffi.contract.fake_record: the type key is dotted identifiers, got {type_key!r}"
            )
        self.type_key = type_key
        self.fields: dict[str, ScalarType] = {}
        for name, kind in fields.items():
            if not isinstance(kind, ScalarType):
                kind = _as_fake(kind) if kind in (int, float, bool) else kind
            if not isinstance(kind, ScalarType):
                raise TypeError(
                    f"kffi.contract.fake_record: field {name!r} is a scalar (kffi.Int32/Int64/"
                    f"Float32/Float64/Bool, with an optional .range(), or int, float, bool), "
                    f"got {kind!r}"
                )
            self.fields[name] = kind

    @classmethod
    def from_metadata(cls, param: dict[str, Any]) -> FakeRecord:
        """The record of a contract parameter's metadata (``kind`` "record"): its text renders
        back as the contract wrote it (up to spacing)."""
        if not isinstance(param, dict) or param.get("kind") != "record":
            raise ValueError(f"kffi.contract: not a record parameter's metadata: {param!r}")
        fields: dict[str, Any] = {}
        for f in param["fields"]:
            kind = ScalarType(f["type"].split("[", 1)[0])
            if "range" in f:
                kind = ScalarType(kind.type_name, *f["range"])
            fields[f["name"]] = kind
        return cls(param["type_key"], fields)

    def symbols(self) -> list[SymInt]:
        return []

    def render(self, names: _Names | None = None, default_device: str | None = None) -> str:
        if not self.fields:
            return self.type_key
        inner = ", ".join(f"{n}: {k.render()}" for n, k in self.fields.items())
        return f"{self.type_key}{{{inner}}}"

    def __repr__(self) -> str:
        return f"kffi.contract.fake_record({self.type_key!r}, ...)"


def fake_record(type_key: str, **fields: Any) -> FakeRecord:
    """A record parameter of kffi type ``type_key`` whose named fields are constrained
    (scalars, with optional ranges); see FakeRecord."""
    return FakeRecord(type_key, fields)


class _OptionalArg:
    __slots__ = ("inner",)

    def __init__(self, inner: Any) -> None:
        self.inner = _as_fake(inner)
        if isinstance(self.inner, FakeStream):
            raise TypeError(
                "kffi.Optional: a stream cannot be Optional (an explicit stream "
                "takes None already: the default stream)"
            )

    def symbols(self) -> list[SymInt]:
        return self.inner.symbols()

    def render(self, names: _Names, default_device: str | None = None) -> str:
        return f"Optional[{self.inner.render(names, default_device)}]"

    def __repr__(self) -> str:
        return f"kffi.Optional({self.inner!r})"


def Optional(x: Any) -> _OptionalArg:
    """An argument that may be None: ``kffi.Optional(kffi.fake_tensor(...))``."""
    return _OptionalArg(x)


class _TupleArg:
    __slots__ = ("items",)

    def __init__(self, items: Iterable[Any]) -> None:
        self.items = tuple(_as_fake(x) for x in items)
        if any(isinstance(x, FakeStream) for x in self.items):
            raise TypeError("kffi: a stream cannot be inside a tuple")
        for x in self.items:
            inner = x.inner if isinstance(x, _OptionalArg) else x
            if isinstance(inner, FakeTensor) and inner.mut:
                raise ValueError(
                    "kffi: a tensor inside a tuple cannot be mut=True (tuple "
                    "elements carry no read-only flag); make it a parameter"
                )

    def symbols(self) -> list[SymInt]:
        return [s for x in self.items for s in x.symbols()]

    def render(self, names: _Names, default_device: str | None = None) -> str:
        return "Tuple[" + ", ".join(x.render(names, default_device) for x in self.items) + "]"


def _as_fake(x: object) -> _Fake:
    """A fake argument from what a user passes: fakes, tuples of them, scalar markers, and the
    Python types (or example values) int, float, bool."""
    if isinstance(x, FakeTensor):
        for d in x.shape:
            if isinstance(d, _Expr) and not isinstance(d, SymInt):
                raise ValueError(
                    f"kffi: an argument's dimension is an int or a kffi.sym_int(); "
                    f"expressions ({d.render(_NameRepr())}) are for output shapes"
                )
        return x
    if isinstance(x, (FakeStream, ScalarType, _OptionalArg, _TupleArg, FakeRecord)):
        return x
    if isinstance(x, tuple):
        return _TupleArg(x)
    if x is bool or isinstance(x, bool):
        return ScalarType("bool")
    if x is int or isinstance(x, int):
        return ScalarType("int")
    if x is float or isinstance(x, float):
        return ScalarType("float")
    raise TypeError(
        f"kffi: cannot use {x!r} (of type {type(x).__name__}) as a fake argument; "
        f"use kffi.fake_tensor, kffi.fake_stream, kffi.Int32/Int64/Float32/Float64/"
        f"Bool, kffi.Optional or a tuple of these"
    )
