"""python/kffi/runtime/_frameworks.py: the per-framework table, one adapter for each framework.

All that kffi's runtime and core extension know of an array framework is its row here: which of
its classes are tensors, dtypes, devices and streams; how a kffi.Tensor result becomes its array;
whether its arrays may be written; its current stream and device; its lazy views (torch); what
to say when its tensor cannot be exported; and the kffi integration package that serves it. The
rest of the runtime (runtime/_types.py, runtime/stream.py) and the extension ask the rows and name
no framework. Adding one (MLX, say) is a row here, and its subpackage if it gets an integration.

A row never imports its framework to classify: an object of its classes exists only once its
module is imported, so ``sys.modules`` is asked.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from .. import _core
from .._lazy import lazy


class Framework:
    """One framework's adapter. The defaults fit a framework kffi reaches through ``__dlpack__``
    alone: its classes are known by their module, nothing else is special."""

    name = ""
    #: Module prefixes of its classes.
    modules: tuple[str, ...] = ()
    #: The kffi package that integrates it (imported on first use: ``kffi.<name>``), or None.
    integration: str | None = None
    #: Its arrays must not be written (kffi marks their views read-only).
    read_only = False

    def loaded(self) -> ModuleType | None:
        """The framework's module when it is imported, else None."""
        return sys.modules.get(self.modules[0]) if self.modules else None

    def owns(self, tp: type) -> bool:
        return (tp.__module__ or "").startswith(self.modules)

    def is_tensor_type(self, tp: type) -> bool:
        """Whether tp, a type with ``__dlpack__`` or the DLPack C exchange API, is its tensor."""
        return self.owns(tp)

    def tensor_entry(self, tp: type) -> tuple[int, Any, Any, Any]:
        """(flags, from_dlpack, stream_hook, explain_export_error) of its tensor type tp: the
        extension's conversion-table row (see runtime/_types.py)."""
        flags = _core.TYPE_FLAG_READ_ONLY if self.read_only else 0
        return (flags, self.from_dlpack(), self.stream_hook(), None)

    def from_dlpack(self) -> Callable[[Any], Any] | None:
        """Makes its array of a kffi.Tensor result (zero-copy), or None: results stay kffi's."""
        return None

    def stream_hook(self) -> Callable[[], int] | None:
        """A callable giving its current CUDA stream, made the call's stream, or None."""
        return None

    def special_kind(self, tp: type) -> str | None:
        """A kind of the conversion table this framework's type has beyond the usual ones."""
        return None

    def is_dtype_type(self, tp: type) -> bool:
        return False

    def is_device_type(self, tp: type) -> bool:
        return False

    def is_stream_type(self, tp: type) -> bool:
        return False

    def dtype_text(self, value: Any) -> str | None:
        """Its dtype value as kffi spells it ("float32"), or None when value is no dtype of it."""
        return None

    def device_of(self, value: Any) -> tuple[str, int | None] | None:
        """(type name, index) of its device value, or None when value is no device of it."""
        return None

    def current_cuda_device(self) -> int | None:
        """The CUDA device its code currently runs on, where it keeps one (None: not known)."""
        return None


class _Torch(Framework):
    name = "torch"
    modules = ("torch",)
    integration = "kffi.torch"

    def _attr(self, *path: str) -> Any:
        obj: Any = self.loaded()
        for part in path:
            obj = getattr(obj, part, None)
        return obj

    def is_tensor_type(self, tp: type) -> bool:
        # torch._C.TensorBase in the MRO: a subclass defined in any module is a torch tensor.
        base = self._attr("_C", "TensorBase")
        return isinstance(base, type) and base in tp.__mro__

    def tensor_entry(self, tp: type) -> tuple[int, Any, Any, Any]:
        _set_lazy_views(self)
        _torch_fast_import()
        return (_core.TYPE_FLAG_LAZY_VIEWS, None, None, _explain_torch_export_error)

    def is_dtype_type(self, tp: type) -> bool:
        cls = self._attr("dtype")
        return isinstance(cls, type) and issubclass(tp, cls)

    def is_device_type(self, tp: type) -> bool:
        cls = self._attr("device")
        return isinstance(cls, type) and issubclass(tp, cls)

    def is_stream_type(self, tp: type) -> bool:
        # torch.cuda.Stream and its subclasses, wherever defined (and, by name, the streams of a
        # torch without __cuda_stream__).
        cls = self._attr("cuda", "Stream")
        named = self.owns(tp) and tp.__name__ in ("Stream", "ExternalStream")
        return ((isinstance(cls, type) and issubclass(tp, cls)) or named) and hasattr(
            tp, "cuda_stream"
        )

    def dtype_text(self, value: Any) -> str | None:
        if not self.is_dtype_type(type(value)):
            return None
        text = str(value)  # "torch.float32"
        return text.split(".", 1)[1] if text.startswith("torch.") else text

    def device_of(self, value: Any) -> tuple[str, int | None] | None:
        return (value.type, value.index) if self.is_device_type(type(value)) else None

    def current_cuda_device(self) -> int | None:
        cuda = self._attr("cuda")
        if cuda is not None and cuda.is_available():
            device: int = cuda.current_device()
            return device
        return None

    def lazy_view_methods(self) -> tuple[Any, Any, Any, Any] | None:
        """torch._C.TensorBase, its is_conj and is_neg, and its dtype descriptor: the
        extension asks them of a tensor (as functions, so a subclass's overrides are not
        consulted) until kffi.torch's reader is installed."""
        base = self._attr("_C", "TensorBase")
        if not isinstance(base, type):
            return None
        methods: Any = base  # torch's stubs do not declare them on the class object
        return (base, methods.is_conj, methods.is_neg, base.__dict__.get("dtype"))


@lazy
def _torch_fast_import() -> None:
    """Run on the first torch tensor type classified: kffi.torch's tensor import, when its
    library is built already (never built here: the first torch tensor argument must not wait for
    a compiler). It reads torch tensors, and their lazy-view bits, from the TensorImpl; without it
    each torch tensor argument costs calls into torch's methods."""
    try:
        integration("torch").fast_tensor_import(build=False)
    except Exception:  # noqa: S110 (a torch kffi.torch cannot use: torch's own import stays)
        pass


def _explain_torch_export_error(obj: Any) -> tuple[type[Exception], str] | None:
    """What kffi says instead of torch's own error when a torch tensor cannot be exported (torch's
    carries its C++ frames): (exception type, text), or None to keep torch's. Called with that
    error pending (as the cause of kffi's)."""
    if getattr(obj, "is_meta", False) is True:
        return (
            ValueError,
            "a torch tensor on the meta device has no memory to pass to a kernel (use a tensor "
            "on a real device; kffi.compile takes fake tensors for shapes alone)",
        )
    layout = str(getattr(obj, "layout", "torch.strided"))
    if layout != "torch.strided":
        return (
            TypeError,
            f"expected a strided torch tensor, got one of layout {layout} (pass x.to_dense())",
        )
    if getattr(obj, "is_nested", False) is True:
        return (
            TypeError,
            "expected a strided torch tensor, got a nested tensor (pass its parts, x.unbind(), "
            "or x.to_padded_tensor(0))",
        )
    if getattr(obj, "is_quantized", False) is True:
        return (
            TypeError,
            "expected a torch tensor of a DLPack dtype, got a quantized tensor (pass "
            "x.dequantize() or x.int_repr())",
        )
    return None


class _NumPy(Framework):
    name = "numpy"
    modules = ("numpy",)

    def from_dlpack(self) -> Callable[[Any], Any] | None:
        import numpy

        return numpy.from_dlpack

    def is_dtype_type(self, tp: type) -> bool:
        return self.owns(tp) and (tp.__name__ == "dtype" or tp.__name__.endswith("DType"))

    def dtype_text(self, value: Any) -> str | None:
        mod = type(value).__module__ or ""
        # NumPy dtypes and scalar types, ml_dtypes' (bfloat16, float8_*), Python's float and int.
        if mod.startswith(("numpy", "ml_dtypes")) or isinstance(value, type):
            import numpy  # only when a NumPy dtype is given

            return str(numpy.dtype(value))
        return None


class _Jax(Framework):
    name = "jax"
    modules = ("jax", "jaxlib")
    integration = "kffi.jax"
    read_only = True  # JAX arrays are immutable

    def from_dlpack(self) -> Callable[[Any], Any] | None:
        import jax.dlpack

        return jax.dlpack.from_dlpack

    def special_kind(self, tp: type) -> str | None:
        # A tracer (under jax.jit, grad, vmap) has no memory: the extension says to use
        # kffi.jax.call.
        if self.owns(tp) and any(k.__name__ == "Tracer" for k in tp.__mro__):
            return "jax_tracer"
        return None

    def dtype_text(self, value: Any) -> str | None:
        if not self.owns(type(value)):
            return None
        return str(getattr(value, "name", None) or value.dtype)


class _CuPy(Framework):
    name = "cupy"
    modules = ("cupy",)

    def from_dlpack(self) -> Callable[[Any], Any] | None:
        cupy = self.loaded()
        return cupy.from_dlpack if cupy is not None else None

    def stream_hook(self) -> Callable[[], int] | None:
        cupy = self.loaded()
        if cupy is None:
            return None

        def cupy_current_stream() -> int:
            # CuPy's current stream becomes the call's stream (as torch's does).
            return int(cupy.cuda.get_current_stream().ptr)

        return cupy_current_stream

    def is_stream_type(self, tp: type) -> bool:
        return self.owns(tp) and tp.__name__ in ("Stream", "ExternalStream") and hasattr(tp, "ptr")


#: The rows, asked in this order (torch first: its tensor subclasses may live in any module).
FRAMEWORKS: tuple[Framework, ...] = (_Torch(), _NumPy(), _Jax(), _CuPy())

#: kffi's integrations by name, as the modules that implement them: the frameworks' and kffi.cuda
#: (NVRTC and the CUDA driver). They load on first use (``kffi.torch``, ``mod.torch_ops(...)``,
#: the first torch tensor argument): importing kffi imports no framework.
INTEGRATIONS: dict[str, str] = {
    **{fw.name: fw.integration for fw in FRAMEWORKS if fw.integration},
    "cuda": "kffi.cuda",
}


def integration(name: str) -> ModuleType:
    """The integration ``name`` (imported on first use)."""
    return importlib.import_module(INTEGRATIONS[name])


def package_getattr(name: str) -> ModuleType:
    """The package's ``__getattr__``: ``kffi.jax`` and ``kffi.torch`` load on first use."""
    if name in INTEGRATIONS:
        return integration(name)
    raise AttributeError(f"module 'kffi' has no attribute {name!r}")


def framework(name: str) -> Framework:
    """The row of the framework ``name`` (KeyError when kffi has none)."""
    for fw in FRAMEWORKS:
        if fw.name == name:
            return fw
    raise KeyError(name)


def tensor_framework(tp: type) -> Framework | None:
    """The row whose tensor type tp is (a type with ``__dlpack__``), or None."""
    for fw in FRAMEWORKS:
        if fw.is_tensor_type(tp):
            return fw
    return None


def first_answer(ask: Callable[[Framework], Any]) -> Any:
    """The first row's answer to ask that is not None (None when no row answers)."""
    for fw in FRAMEWORKS:
        answer = ask(fw)
        if answer is not None:
            return answer
    return None


def _set_lazy_views(fw: _Torch) -> None:
    """Gives the extension the methods that read a lazy view's bits (once; it keeps the first)."""
    methods = fw.lazy_view_methods()
    if methods is not None:
        _core._set_lazy_views(fw.name, *methods)
