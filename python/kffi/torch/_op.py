"""python/kffi/torch/_op.py: ``kffi.torch.register_op``: a kffi function as a torch custom op.

The op is defined with torch.library from the function's metadata (schema, fake implementation)
and its CPU and CUDA kernels are kffi's C++ glue (_dispatch.cc), so torch.ops calls, compiled
graphs and CUDA graph captures run the kffi function without Python. Calling the returned
:class:`TorchOp` eagerly skips the dispatcher too: when nothing traces (no torch.compile, no
dispatch or function mode, no functorch transform, plain tensors that are no lazy conjugate or
negative views, no input that requires grad) it calls the kffi function directly; otherwise it
calls the op. That gate is C (_eager.cc) when it builds, Python otherwise.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, cast

import torch

from ..contract import _abstract
from ..runtime._error import counted
from ..runtime._objects import Function
from . import _dtensor, _glue
from ._records import RecordArgs
from ._schema import (
    RET_NONE,
    RET_TENSOR,
    RET_TENSOR_LIST,
    RET_TENSORS,
    OpSignature,
    signature_of,
)

__all__ = ["TorchOp", "register_op", "registered_ops"]

_QUALNAME = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)::([A-Za-z_][A-Za-z0-9_]*)")
_lock = threading.Lock()
_registry: dict[str, TorchOp] = {}  # qualname -> TorchOp

# The Python gate's checks, bound once (each is one C call); _eager.cc reads the same state.
_Tensor = torch.Tensor
# A constant True to dynamo, a plain `return False` otherwise (torch.compiler.is_compiling also
# reads a flag; both are in 2.11).
_dynamo_compiling = getattr(torch.compiler, "is_dynamo_compiling", torch.compiler.is_compiling)
_dispatch_modes = torch._C._len_torch_dispatch_stack
_function_modes = torch._C._len_torch_function_stack
_functorch_layer = torch._C._functorch.peek_interpreter_stack
_grad_enabled = torch._C.is_grad_enabled
_is_neg = torch._C.TensorBase.is_neg
_is_conj = torch._C.TensorBase.is_conj
_increment_version = torch.autograd.graph.increment_version


def _is_lazy_view(t: torch.Tensor) -> bool:
    """A lazy negative or conjugate view: kffi refuses those, torch's dispatcher resolves them."""
    lazy: bool = _is_neg(t) or _is_conj(t)
    return lazy


def _torch_dtype(name: str) -> torch.dtype:
    dt = getattr(torch, str(name), None)
    if not isinstance(dt, torch.dtype):
        raise TypeError(f"kffi.torch: dtype {name!r} has no torch equivalent")
    return dt


def _pick_dtype(
    dtypes: Sequence[str], tensors: Iterable[torch.Tensor | None], label: str, what: str
) -> torch.dtype:
    """The dtype of an output: the contract's one dtype, else that of the first tensor argument
    (schema order) the contract allows for it (as the C++ kernel picks)."""
    if len(dtypes) == 1:
        return _torch_dtype(dtypes[0])
    for t in tensors:
        if t is not None and (not dtypes or str(t.dtype).removeprefix("torch.") in dtypes):
            return t.dtype
    if dtypes:  # no argument has an allowed dtype: the contract's check reports the bad one
        return _torch_dtype(dtypes[0])
    raise TypeError(f"kffi.torch: {label}: no tensor argument fixes the dtype of {what}")


class TorchOp:
    """A kffi function registered as the torch op ``torch.ops.<ns>.<name>``.

    Call it like the function (tensors, scalars, by position or name); it returns what the op's
    schema says: None, a tensor, or a tuple of tensors. Attributes: ``qualname``, ``schema``,
    ``default`` (the OpOverload, what compiled graphs call), ``fn`` (the kffi function),
    ``mutates_args`` (the parameters written in place), ``has_autograd`` (a rule is attached).
    """

    # What registered it (register_op's _origin): a second registration of the same is this op.
    _origin: tuple[Any, ...]

    def __init__(
        self,
        fn: Function,
        sig: OpSignature,
        lib: torch.library.Library,
        overload: Any,
        handles: dict[str, Any],
    ) -> None:
        self.fn = fn
        self.sig = sig
        self.qualname = sig.qualname
        self.schema = sig.schema()
        self.default = overload
        self.mutates_args = tuple(sig.mutated)
        self.has_autograd = False
        self._lib = lib
        self._handles = handles  # name -> unregister function (kffi)
        args = sig.schema_args
        self._names = tuple(p.name for p in args)
        self._tensor_pos = tuple(i for i, p in enumerate(args) if p.kind == "tensor")
        self._tensor_names = frozenset(args[i].name for i in self._tensor_pos)
        # The tensors the op writes: a direct call bumps their versions, as the dispatcher does.
        self._written_pos = tuple(i for i, p in enumerate(args) if p.mutable)
        self._direct = sig.direct
        # Record parameters: the call passes each whole (or its fields by keyword); the op takes
        # its fields (_records.py).
        self._records = RecordArgs(sig, fn) if sig.records else None
        self._ret_kind = sig.ret_kind
        self.__name__ = sig.qualname.split("::")[1]
        self.__doc__ = getattr(fn, "__doc__", None)
        make = _glue.eager_maker() if self._direct else None
        self._eager: Callable[..., Any]
        if make is None:
            self._eager = self._call_python
        else:
            self._eager = make(
                fn,
                overload,
                self._call_python,
                _Tensor,
                self._tensor_pos,
                self._ret_kind,
                self._missing_message(),
                self._written_pos,
            )

    def __repr__(self) -> str:
        return f"<kffi.torch op {self.qualname}{self.schema}>"

    # -- eager calls ----------------------------------------------------------------------------

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # torch.compile traces the op (dynamo reads this check as True); eager calls take the
        # gate (_eager.cc, else _call_python), which calls the kffi function directly unless
        # something traces or differentiates the call.
        if self._records is not None:
            if not _dynamo_compiling():
                return self._call_records(args, kwargs)
            args, kwargs = tuple(self._records.flatten(args, kwargs)), {}
        if _dynamo_compiling():
            return self.default(*args, **kwargs)
        return self._eager(*args, **kwargs)

    def _call_records(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """An eager call of an op with record parameters. When nothing traces and the records
        are passed whole, the kffi function takes the call as it is (the extension converts the
        records, in C++); otherwise the fields are the op's arguments."""
        r = self._records
        assert r is not None  # only ops with record parameters come here
        if r.direct and not (_dispatch_modes() or _function_modes() or _functorch_layer()):
            values = r.tensor_values(args, kwargs)
            if values is not None:
                grad = _grad_enabled()
                for a in values:
                    if a is not None and (
                        type(a) is not _Tensor or (grad and a.requires_grad) or _is_lazy_view(a)
                    ):
                        break
                else:
                    out = self.fn(*args, **kwargs)
                    for t in r.written_values(args, kwargs):
                        if t is not None:
                            _increment_version(t)
                    return self._result(out)
        return self._eager(*r.flatten(args, kwargs))

    def _result(self, out: Any) -> Any:
        """What a direct call's result becomes, by the op's return kind."""
        kind = self._ret_kind
        if kind == RET_NONE:
            return None
        if kind == RET_TENSOR or kind > RET_TENSOR_LIST:
            if out is None:
                self._missing_result()
            return out
        return list(out) if kind == RET_TENSOR_LIST else tuple(out)

    def _call_python(self, *args: Any, **kwargs: Any) -> Any:
        """The eager gate in Python (keyword arguments; the C gate's fallback)."""
        if _dispatch_modes() or _function_modes() or _functorch_layer():
            return self.default(*args, **kwargs)
        grad = _grad_enabled()
        n = len(args)
        for i in self._tensor_pos:
            if i < n:
                a = args[i]
                if type(a) is not _Tensor:
                    if a is not None:
                        return self.default(*args, **kwargs)
                elif (grad and a.requires_grad) or _is_lazy_view(a):
                    return self.default(*args, **kwargs)
        if kwargs:
            for k, a in kwargs.items():
                if k in self._tensor_names and a is not None:
                    if type(a) is not _Tensor or (grad and a.requires_grad) or _is_lazy_view(a):
                        return self.default(*args, **kwargs)
        if self._direct:
            out = self.fn(*args, **kwargs)
            self._bump_written(args, kwargs)
            return self._result(out)
        return self._call_planned(args, kwargs)

    def _bump_written(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        """New versions for the tensors a direct call wrote (autograd checks saved tensors')."""
        n = len(args)
        for i in self._written_pos:
            t = args[i] if i < n else kwargs.get(self._names[i])
            if t is not None:
                _increment_version(t)  # not for inference tensors (they have no counter)

    def _missing_message(self) -> str:
        return (
            f"kffi.torch: {self.qualname}: {self.sig.label} returned None, but its "
            f"{'contract declares' if self.sig.contract else 'metadata says it returns'} "
            f"{', '.join(self.sig.returns)}"
        )

    def _missing_result(self) -> None:
        raise TypeError(self._missing_message())

    def _bind(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[Any]:
        """The op's arguments in schema order, defaults filled in (TypeError as Python's)."""
        names = self._names
        if len(args) > len(names):
            raise TypeError(
                f"{self.qualname}() takes {counted(len(names), 'argument')} but {len(args)} "
                f"{'was' if len(args) == 1 else 'were'} given"
            )
        values = list(args) + [_MISSING] * (len(names) - len(args))
        for k, v in kwargs.items():
            if k not in names:
                raise TypeError(f"{self.qualname}() got an unexpected keyword argument {k!r}")
            i = names.index(k)
            if values[i] is not _MISSING:
                raise TypeError(f"{self.qualname}() got multiple values for argument {k!r}")
            values[i] = v
        for i, p in enumerate(self.sig.schema_args):
            if values[i] is _MISSING:
                if not p.has_default:
                    raise TypeError(f"{self.qualname}() missing required argument {p.name!r}")
                values[i] = p.default
        return values

    def _call_planned(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        """An eager call whose kffi arguments differ from the op's: allocated outputs, streams."""
        sig = self.sig
        values = self._bind(args, kwargs)
        by_name = dict(zip(self._names, values))
        tensors = [values[i] for i in self._tensor_pos]
        device_arg = sig.device_arg()
        device = values[device_arg].device if device_arg >= 0 else torch.device("cpu")
        allocated = []
        for p in sig.allocated:
            shape = [
                d if isinstance(d, int) else _dim_of(by_name, d, sig) for d in sig.alloc_dims(p)
            ]
            dtype = _pick_dtype(p.dtypes, tensors, sig.label, repr(p.name))
            allocated.append(torch.empty(shape, dtype=dtype, device=device))
        it = iter(allocated)
        call: list[Any] = []
        for p in sig.params:
            if p.allocated:
                call.append(next(it))
            elif p.kind == "stream":
                call.append(torch.cuda.current_stream(device) if device.type == "cuda" else None)
            elif p.kind == "record":
                assert self._records is not None  # a record parameter makes them
                call.append(self._records.kffi_value(p, by_name))
            else:
                call.append(by_name[p.name])
        out = self.fn(*call)
        kind = self._ret_kind
        if kind == RET_NONE:
            results = []
        elif kind in (RET_TENSORS, RET_TENSOR_LIST):
            results = [list(out)] if kind == RET_TENSOR_LIST else list(out)
        else:
            if out is None:
                self._missing_result()
            results = [out]
        outs = allocated + results
        if not outs:
            return None
        return outs[0] if len(outs) == 1 else tuple(outs)


_MISSING = object()


def _dim_of(by_name: Mapping[str, Any], source: tuple[str, int], sig: OpSignature) -> Any:
    """Dimension source[1] of argument source[0], for an allocated output (as _dispatch.cc)."""
    t = by_name[source[0]]
    i = [p.name for p in sig.schema_args].index(source[0])
    what = f"kffi.torch: {sig.qualname}: the shape of an allocated output reads"
    if t is None:
        raise ValueError(f"{what} argument #{i}, which is None")
    if source[1] >= t.dim():
        raise ValueError(
            f"{what} dimension {source[1]} of argument #{i}, which has {t.dim()} dimension(s)"
        )
    return t.shape[source[1]]


# ---------------------------------------------------------------------------------------------
# Fake implementations.
# ---------------------------------------------------------------------------------------------


def _bind_symbols(
    sig: OpSignature, by_name: Mapping[str, Any]
) -> tuple[dict[str, Any], str | None]:
    """(symbol values, first rank mismatch) from the tensors given (required arguments first,
    then in order). Lenient on purpose: contradictions are left to the kernel's contract check,
    which raises the contract's own message when the graph runs. The rank mismatch, a message
    in the contract check's words, is raised only when an output's shape needs what it hides."""
    env: dict[str, Any] = {}
    mismatch: str | None = None
    candidates = [p for p in sig.schema_args if p.kind == "tensor" and p.shape is not None]
    candidates.sort(key=lambda p: p.optional)
    for p in candidates:
        t = by_name.get(p.name)
        if t is None:
            continue
        decl = cast("tuple[Any, ...]", p.shape)  # a candidate's: not None
        if t.dim() != len(decl):
            if mismatch is None:
                mismatch = (
                    f"{p.name}.ndim: expected {len(decl)}, got {t.dim()} (argument "
                    f"#{p.index} of `{_signature_text(sig)}`)"
                )
            continue
        for dim, size in zip(decl, t.shape):
            if isinstance(dim, str) and not dim.startswith("*") and dim not in env:
                env[dim] = size
    return env, mismatch


def _signature_text(sig: OpSignature) -> str:
    params = (sig.meta or {}).get("params") or []  # called for contracts, which have metadata
    return f"{sig.label}(" + ", ".join(f"{p.get('name')}: {p.get('type')}" for p in params) + ")"


def _contract_fake(sig: OpSignature) -> Callable[..., Any]:
    """The fake implementation a contract gives: allocated outputs, then declared outputs."""
    names = [p.name for p in sig.schema_args]
    tensor_names = [p.name for p in sig.schema_args if p.kind == "tensor"]
    device_arg = sig.device_arg()
    outputs = sig.outputs
    allocated = sig.allocated

    def fake(*args: Any, **kwargs: Any) -> Any:
        by_name = dict(zip(names, args))
        by_name.update(kwargs)
        tensors = [by_name.get(n) for n in tensor_names]
        t0 = by_name.get(names[device_arg]) if device_arg >= 0 else None
        device = t0.device if t0 is not None else torch.device("cpu")
        env, mismatch = _bind_symbols(sig, by_name)
        outs: list[torch.Tensor] = []
        for p in allocated:
            shape: list[Any] = []
            # A contract's allocated output: its tensor declares a shape.
            for d, dim in enumerate(cast("tuple[Any, ...]", p.shape)):
                if isinstance(dim, int):
                    shape.append(dim)
                elif dim in env:
                    shape.append(env[dim])
                else:
                    raise ValueError(
                        mismatch
                        or f"kffi.torch: {sig.label}: {p.name}.shape[{d}] = {dim} is not bound "
                        f"by the tensor arguments given"
                    )
            dtype = _pick_dtype(p.dtypes, tensors, sig.label, repr(p.name))
            outs.append(torch.empty(shape, dtype=dtype, device=device))
        for k, o in enumerate(outputs):
            what = f"output {o.get('name') or k!r}"
            try:
                shape = [
                    _abstract.eval_shape_rpn(
                        tokens, env, what=f"{what} dimension {d}", nonnegative=True
                    )
                    for d, tokens in enumerate(o.get("shape_rpn") or [])
                ]
            except _abstract.ContractError as e:
                raise ValueError(mismatch or f"kffi.torch: {sig.label}: {e}") from None
            dtypes = _abstract._dtype_options(o.get("dtype"))
            dtype = _pick_dtype(dtypes, tensors, sig.label, what)
            outs.append(torch.empty(shape, dtype=dtype, device=device))
        if not outs:
            return None
        return outs[0] if len(outs) == 1 else tuple(outs)

    return fake


def _untraceable_fake(sig: OpSignature) -> Callable[..., Any]:
    def fake(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            f"kffi.torch: {sig.qualname} returns {', '.join(sig.returns)}, which its contract "
            f"cannot predict while tracing (torch.compile, fake tensors); register it with "
            f"kffi.torch.register_op(fn, {sig.qualname!r}, fake=...)"
        )

    return fake


def _fake_for(sig: OpSignature, fake: Callable[..., Any] | None) -> Callable[..., Any]:
    if fake is not None:
        if not callable(fake):
            raise TypeError(f"kffi.torch: fake is a function of fake tensors, got {fake!r}")
        return fake
    if sig.contract:
        if sig.ret_kind == RET_NONE or sig.outputs:
            return _contract_fake(sig)
        return _untraceable_fake(sig)  # a scalar or an undeclared tensor
    if not sig.returns:
        return lambda *args, **kwargs: None  # writes its arguments, returns nothing
    raise TypeError(
        f"kffi.torch: {sig.label} has no contract, so kffi cannot say what it returns "
        f"({', '.join(sig.returns)}) while tracing: pass fake=<a function of fake tensors "
        f"returning outputs like the real ones> (see torch.library.register_fake), or export "
        f"it with a contract (KFFI_EXPORT_CONTRACT, kffi.compile)"
    )


# ---------------------------------------------------------------------------------------------
# Registration.
# ---------------------------------------------------------------------------------------------


def _origin(
    fn: Function, module_name: str | None, mutates_args: Any, allocate: Any
) -> tuple[Any, ...]:
    """What makes two registrations the same: where the function comes from (a module's
    function of that name, a kffi.compile library, else this very object) and the options."""
    name = (getattr(fn, "_metadata", None) or {}).get("name")
    path = getattr(fn, "library_path", None)
    where: tuple[Any, ...]
    if module_name is not None:
        where = ("module", module_name, name)
    elif path:
        where = ("library", path, name)
    else:
        where = ("object", id(fn))  # the op keeps fn alive: the id stays its own
    options = (
        tuple(sorted(mutates_args))
        if isinstance(mutates_args, (list, tuple, set))
        else mutates_args
    )
    alloc = tuple(sorted(allocate)) if isinstance(allocate, (list, tuple, set)) else allocate
    return (where, options, alloc)


def register_op(
    fn: Function,
    qualname: str,
    *,
    mutates_args: str | Iterable[str] | None = None,
    fake: Callable[..., Any] | None = None,
    allocate: bool | str | Iterable[str] | None = None,
    _module_name: str | None = None,
) -> TorchOp:
    """Registers the kffi function ``fn`` as the torch op ``qualname`` ("namespace::name").

    Everything comes from ``fn``'s metadata: the schema (parameter names, types, defaults,
    returns), which tensors it writes (its contract's ``mut`` parameters: ``mutates_args``), and
    the fake implementation that torch.compile and fake tensors use (output shapes evaluated
    from the contract's expressions of the input shapes). Stream parameters are filled with the
    current stream of the call's device.

    - ``mutates_args``: for a function without a contract, the names of the tensors it writes
      (``()`` for none); with a contract it must agree with the contract or be left out.
    - ``fake``: the fake implementation, needed only when there is no contract and the function
      returns something.
    - ``allocate``: ``True`` or names of ``mut`` parameters the op allocates instead of taking
      them: they leave the schema and are returned (before the contract's outputs), making a
      functional op (which :func:`register_autograd` needs).

    Returns a :class:`TorchOp`; ``torch.ops.<namespace>.<name>`` is the same op. Registering the
    same function (the same object, a module's function of the same name, or a kffi.compile
    result of the same library) with the same options under the same name returns the existing
    op; anything else under a name already taken is a ValueError.
    """
    if not isinstance(fn, Function):
        raise TypeError(
            f"kffi.torch.register_op: expected a kffi.Function, got {type(fn).__name__}"
        )
    if not isinstance(qualname, str) or not _QUALNAME.fullmatch(qualname):
        raise ValueError(
            f'kffi.torch.register_op: the op name is "namespace::name" (identifiers), '
            f"got {qualname!r}"
        )
    with _lock:
        existing = _registry.get(qualname)
        if existing is not None:
            if existing._origin == _origin(fn, _module_name, mutates_args, allocate) and (
                fake is None
            ):
                return existing
            raise ValueError(
                f"kffi.torch.register_op: {qualname} is already registered (to "
                f"{existing.sig.label}); an op name is registered once per process"
            )
        ns, name = qualname.split("::")
        if hasattr(getattr(torch.ops, ns), name):
            raise ValueError(f"kffi.torch.register_op: torch already has an op {qualname}")
        sig = signature_of(fn, qualname, mutates_args=mutates_args, allocate=allocate)
        fake_impl = _fake_for(sig, fake)
        glue = _glue.glue()
        plan = sig.native_plan(glue.packed_dtype)
        lib = torch.library.Library(ns, "FRAGMENT")
        lib.define(name + sig.schema())
        try:
            torch.library.register_fake(qualname, fake_impl, lib=lib)
            args = sig.schema_args
            written = [i for i, p in enumerate(args) if p.mutable]
            unregister, unregister_autograd, reregister_autograd = glue.register_op(
                qualname,
                fn,
                len(args),
                plan,
                sig.record_names,
                sig.param_types,
                ", ".join(sig.mutated),
                written,
            )
            handles = {
                "backend": unregister,
                "autograd": unregister_autograd,
                "autograd_again": reregister_autograd,
            }
        except BaseException:
            lib._destroy()
            raise
        op = TorchOp(fn, sig, lib, getattr(getattr(torch.ops, ns), name).default, handles)
        op._origin = _origin(fn, _module_name, mutates_args, allocate)
        _registry[qualname] = op
    # DTensor's sharding rule, from the contract's parallel symbols (deferred until DTensor is
    # imported: importing it here would cost most of a second).
    _dtensor.declare_sharding(op)
    return op


def registered_ops() -> dict[str, TorchOp]:
    """{qualname: TorchOp} of the ops kffi.torch registered in this process."""
    with _lock:
        return dict(_registry)
