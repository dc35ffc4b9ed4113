"""python/kffi/tvm/_with_contract.py: a contract for a function that carries none (kffi.with_contract).

Kernels built for the TVM-FFI ABI (CuTe DSL exports, FlashInfer modules) carry no parameter
names, types or shapes, so frameworks cannot make ops of them. kffi.with_contract gives such a
function the contract its author would have written, from the same fake arguments kffi.compile
takes (or the contract's text): every call is then checked in the runtime before the function
runs, and the result has the structured metadata that kffi.torch.register_op and kffi.jax read.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

from .. import _core
from ..contract._fakes import MAX_CONTRACT_BYTES, FakeStream, FakeTensor, _as_fake
from ..contract._render import render_contract
from ..runtime._objects import Function, _annotate, _check_metadata

__all__ = ["with_contract"]


def with_contract(
    fn: Function,
    *contract: Any,
    param_names: Iterable[str] | None = None,
    outputs: FakeTensor | Iterable[FakeTensor] | None = None,
    device: str | None = None,
    name: str | None = None,
    doc: str = "",
) -> Function:
    """A kffi Function that checks each call against a contract, then calls ``fn`` with the same
    arguments.

    ``contract``: fake arguments as for :func:`kffi.compile` (``kffi.fake_tensor(...)``,
    ``kffi.Int64``, ``kffi.fake_stream(env=False)``, ...), with ``param_names``, ``outputs`` and
    ``device`` (the device of fake tensors that name none, e.g. ``"cuda"``); or one string, the
    contract's text (``"x: Tensor([n], float32), y: Tensor([n], float32, mut)"``).
    ``name`` (default: ``fn.__name__``) and ``doc`` appear in messages and metadata.

    ``fn`` receives exactly the call's arguments: it reads the environment stream itself, so the
    contract declares no ``EnvStream`` parameter. Mark the tensors ``fn`` writes ``mut``:
    :func:`kffi.torch.register_op` infers ``mutates_args`` from them. A malformed contract is a
    ValueError; a call that breaks it raises the contract's TypeError or ValueError and ``fn``
    does not run.
    """
    if not isinstance(fn, Function):
        raise TypeError(f"kffi.with_contract: expected a kffi.Function, got {type(fn).__name__}")
    if name is None:
        name = getattr(fn, "__name__", "") or "function"
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"kffi.with_contract: name must be an identifier, got {name!r}")
    if not isinstance(doc, str):
        raise TypeError(f"kffi.with_contract: doc must be a str, got {type(doc).__name__}")
    if len(contract) == 1 and isinstance(contract[0], str):
        if param_names is not None or outputs is not None or device is not None:
            raise TypeError(
                "kffi.with_contract: param_names, outputs and device go with fake arguments, "
                "not with a contract's text"
            )
        text = contract[0]
        if len(text.encode()) > MAX_CONTRACT_BYTES:
            raise ValueError(
                f"kffi.with_contract: the contract is {len(text.encode())} bytes long; at most "
                f"{MAX_CONTRACT_BYTES}"
            )
    else:
        if any(isinstance(a, FakeStream) and a.env for a in map(_as_fake, contract)):
            raise ValueError(
                "kffi.with_contract: the wrapped function reads the environment stream itself; "
                "declare only its arguments (kffi.fake_stream(env=False) for a stream argument)"
            )
        text = render_contract(
            *contract, param_names=param_names, outputs=outputs, default_device=device
        )
    wrapped, meta_text = _core._contract_wrap(fn, name, text, doc)
    where = f"kffi.with_contract: the metadata of `{name}`"
    try:
        meta = json.loads(meta_text)
    except ValueError as e:
        raise ValueError(f"{where} is not JSON: {e}") from None
    meta["name"] = name
    _annotate(wrapped, _check_metadata(meta, where))
    wrapped.contract = text
    wrapped.wrapped = fn
    origin = getattr(fn, "_origin", None)
    if isinstance(origin, tuple) and len(origin) == 2:
        # A library's function under this contract: kffi.jax names its targets by both.
        key = hashlib.sha256(f"{name}\0{text}".encode()).hexdigest()[:12]
        wrapped._origin = (origin[0], f"{origin[1]}__c{key}")
    # A TVM-FFI export's ffi::Tensor parameters keep owning Tensors behind the contract too.
    wrapped._owned_tensor_args = fn._owned_tensor_args
    return wrapped
