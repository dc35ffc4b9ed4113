"""tests/python/kffi_torch/test_torch_views.py: torch tensors reach a kernel as torch means them, or
not at all.

- A generated space of tensors (every dtype torch can make, views of every kind, expanded,
  channels_last, storage offsets, zero-size, 0-d, inference tensors, tensors requiring grad,
  subclasses, lazy conjugate and negative views): a kernel sees exactly the DLTensor torch's own
  ``__dlpack__`` exports, through kffi.torch's fast import and through torch's exchange API alike,
  or kffi refuses what torch refuses. Lazy views are always refused: torch's export refuses
  conjugate views, and hands negative views over unresolved (the sum of ``x._neg_view()`` would be
  the sum of x), so kffi refuses those too (issue 23).
- torch's classes by hierarchy: a subclass of torch.Tensor from any module gets the same checks
  (issue 29, class 6).
- Python code that runs while arguments convert (hooks of subclasses, modes, __index__, ...) and
  changes another argument (set_, resize_, del) leaves the call correct or refused; those cases
  run in a subprocess, so that reading freed memory fails the test instead of the run.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
import kffi
import torch_support
from dlpack_util import DLManagedTensorVersioned, DLTensor
from kffi import _core
from torch_support import fresh

tk = torch_support.tk
ns = torch_support.ns

CUDA = torch.cuda.is_available()
DEVICES = ["cpu"] + (["cuda"] if CUDA else [])


class ViewsTensor(torch.Tensor):
    """A torch.Tensor subclass of this module (its __module__ is not torch's)."""


# ---- the two imports of torch tensors ---------------------------------------------------------


def _fast_import_parts():
    """(torch's exchange capsule, kffi.torch's replacement, its lazy-view reader), or None when
    kffi.torch's C library cannot be built here."""
    import kffi.torch
    from kffi.torch import _glue

    if not kffi.torch.fast_tensor_import():
        return None
    lib = _glue._eager_lib()
    original = torch.Tensor.__dlpack_c_exchange_api__
    return (
        original,
        lib.kffi_torch_exchange_api(original, torch._C.TensorBase),
        lib.kffi_torch_lazy_view_reader(),
    )


@pytest.fixture(scope="module", params=["fast", "exchange"])
def path(request):
    """kffi.torch's fast import (the TensorImpl read in C++), or torch's own DLPack exchange API
    with the lazy-view bits asked of torch's methods. Ends with the fast import on again."""
    parts = _fast_import_parts()
    if parts is None:
        pytest.skip("kffi.torch's C library does not build here")
    original, fast, reader = parts
    if request.param == "fast":
        _core._override_exchange_api(original, fast, reader)
    else:
        _core._override_exchange_api(original, original)
    yield request.param
    _core._override_exchange_api(original, fast, reader)


# ---- torch's own export -----------------------------------------------------------------------

_capsule_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi)
)
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)


def _layout(dl: DLTensor) -> tuple:
    n = dl.ndim
    shape = tuple(dl.shape[i] for i in range(n))
    if dl.strides:
        strides = tuple(dl.strides[i] for i in range(n))
    else:  # compact row-major, as kffi::TensorView::strides() says then
        strides, s = [], 1
        for d in reversed(shape):
            strides.insert(0, s)
            s *= max(d, 1)
        strides = tuple(strides)
    dtype = (dl.dtype.code, dl.dtype.bits, dl.dtype.lanes)
    device = (dl.device.device_type, dl.device.device_id)
    return shape, strides, dtype, device, (dl.data or 0) + dl.byte_offset


def torch_export(t):
    """What torch's own ``__dlpack__`` gives for t (shape, strides, dtype, device, address), or the
    exception it raises. A tensor that requires grad is exported detached: torch's export refuses
    those, while kffi hands their memory over (autograd is the op's business, as with torch's
    exchange API)."""
    src = t.detach() if t.requires_grad else t
    try:
        cap = src.__dlpack__(max_version=(1, 0))
    except Exception as e:  # BufferError, RuntimeError: whatever torch refuses with
        return e
    if _capsule_valid(cap, b"dltensor_versioned"):
        mt = DLManagedTensorVersioned.from_address(_capsule_pointer(cap, b"dltensor_versioned"))
        dl = mt.dl_tensor
    else:  # a DLManagedTensor starts with its DLTensor
        dl = DLTensor.from_address(_capsule_pointer(cap, b"dltensor"))
    return _layout(dl)  # the capsule, unused, frees the export


def kffi_sees(describe, t):
    """What a kernel sees of t (shape, strides, dtype, device, address), or the exception."""
    try:
        shape, strides, dtype, data, device, offset = describe(t)
    except Exception as e:
        return e
    return (
        tuple(shape),
        tuple(strides),
        (dtype.code, dtype.bits, dtype.lanes),
        (device.device_type, device.index),
        data + offset,
    )


# ---- the generated space ----------------------------------------------------------------------


def torch_dtypes() -> list:
    """Every dtype torch names and can make views of (not the quantized ones)."""
    found = {}
    for name in dir(torch):
        dt = getattr(torch, name)
        if isinstance(dt, torch.dtype) and dt not in found.values():
            try:
                torch.empty((2, 2), dtype=dt)[1, 1]
            except RuntimeError:
                continue
            found[str(dt)] = dt
    return [found[k] for k in sorted(found)]


def _layouts(make):
    """(name, tensor) views of every kind, from make(shape) (a fresh contiguous tensor)."""
    base = make((4, 6, 8))
    flat = make((64,))
    yield "contiguous", base
    yield "0-d view", base[1, 2, 3]
    yield "0-d", make(())
    yield "zero-size", make((0, 3))
    yield "zero-size view", base[:, 2:2]
    yield "size-1 dims", base[:, 1:2, :1]
    yield "storage offset", flat[7:]
    yield "offset slice", base[1:, 2:, 3:]
    yield "steps", base[:, ::2, 1::3]
    yield "transposed", base.transpose(0, 2)
    yield "permuted slice", base.permute(2, 0, 1)[1:]
    yield "diagonal", torch.diagonal(base[0])
    yield "expanded (stride 0)", base[:, :1].expand(4, 5, 8)
    yield "broadcast scalar", base[1, 1, 1].expand(3, 2)
    yield "as_strided odd strides", flat.as_strided((3, 4), (7, 3), 5)
    yield "as_strided overlapping", flat.as_strided((5, 5), (1, 1), 2)
    yield "unsqueezed", base[1].unsqueeze(1)
    yield "channels_last", make((2, 3, 4, 5), memory_format=torch.channels_last)
    yield "channels_last slice", make((2, 3, 4, 5), memory_format=torch.channels_last)[:, 1:]


def _kinds(t, dtype):
    """(name, tensor) variants of the view t: plain, subclasses, lazy bits, grad."""
    yield "plain", t
    yield "subclass", t.as_subclass(ViewsTensor)
    yield "parameter", torch.nn.Parameter(t, requires_grad=False)
    yield "neg view", t._neg_view()
    yield "neg view subclass", t.as_subclass(ViewsTensor)._neg_view()
    if dtype.is_complex:
        yield "conj view", t.conj()
        yield "conj neg view", t.conj()._neg_view()
        yield "conj view subclass", t.as_subclass(ViewsTensor).conj()
        if dtype != torch.complex32:  # no .imag of ComplexHalf
            yield "conj().imag (neg view)", t.conj().imag
            yield "imag of a plain view", t.imag
    if dtype.is_floating_point or dtype.is_complex:
        leaf = t.detach().requires_grad_()  # the same memory and layout, a leaf of its own
        yield "requires grad (leaf)", leaf
        yield "requires grad (view)", leaf[..., :1] if leaf.dim() else leaf[...]
        yield "parameter requiring grad", torch.nn.Parameter(t.detach())


def generated(dtype, device) -> list:
    """The generated space for one dtype: (name, tensor) pairs."""

    def make(shape, **kw):
        return torch.empty(shape, dtype=dtype, device=device, **kw)

    cases = []
    for lname, view in _layouts(make):
        for kname, t in _kinds(view, dtype):
            cases.append((f"{lname}, {kname}", t))
    with torch.inference_mode():
        for lname, view in _layouts(make):
            for kname, t in _kinds(view, dtype):
                if "grad" not in kname:  # no autograd in inference mode
                    cases.append((f"inference {lname}, {kname}", t))
    return cases


def _lazy(t) -> bool:
    return torch._C.TensorBase.is_conj(t) or torch._C.TensorBase.is_neg(t)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", torch_dtypes(), ids=str)
def test_kernels_see_torchs_own_export_or_a_refusal(tensor_kernels, path, dtype, device):
    mismatches = []
    for name, t in generated(dtype, device):
        exported = torch_export(t)
        seen = kffi_sees(tensor_kernels.describe, t)
        if _lazy(t):
            # Refused, naming the argument and the way out (torch refuses conjugate views too).
            ok = isinstance(seen, ValueError) and str(seen).startswith("x: ")
            ok = ok and "(argument #0 of `describe(x: Tensor)" in str(seen)
            ok = ok and ("resolve_conj()" if t.is_conj() else "resolve_neg()") in str(seen)
            ok = ok and (not t.is_conj() or isinstance(exported, BufferError))
        elif isinstance(exported, Exception):
            ok = isinstance(seen, Exception)  # both refuse (bit types: DLPack has no dtype)
        else:
            ok = seen == exported
        if not ok:
            mismatches.append(f"{name}: kffi saw {seen!r}, torch exports {exported!r}")
    assert not mismatches, "\n".join(mismatches)


def test_the_space_covers_what_it_claims():
    names = [str(dt).removeprefix("torch.") for dt in torch_dtypes()]
    for dt in ("float32", "bfloat16", "float16", "complex64", "complex128", "bool", "uint64"):
        assert dt in names
    cases = dict(generated(torch.complex64, "cpu"))
    assert cases["expanded (stride 0), plain"].stride()[1] == 0
    assert cases["channels_last, plain"].is_contiguous(memory_format=torch.channels_last)
    assert cases["storage offset, plain"].storage_offset() == 7
    assert cases["zero-size, plain"].numel() == 0 and cases["0-d, plain"].dim() == 0
    assert cases["contiguous, conj neg view"].is_conj() and cases["contiguous, neg view"].is_neg()
    assert cases["inference contiguous, plain"].is_inference()
    assert cases["steps, requires grad (view)"].requires_grad
    assert type(cases["transposed, subclass"]) is ViewsTensor
    assert type(cases["transposed, parameter"]) is torch.nn.Parameter


# ---- the sums of lazy views (the bug of issue 23) ---------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_neg_view_is_refused_never_summed_unresolved(tensor_kernels, path, dtype):
    x = torch.tensor([1.0, 2.0, 4.0], dtype=dtype)
    views = {
        "_neg_view()": x._neg_view(),
        "strided _neg_view()": torch.arange(12, dtype=dtype)[1::3]._neg_view(),
        "subclass _neg_view()": x.as_subclass(ViewsTensor)._neg_view(),
        "conj().imag": torch.complex(x, x + 1).conj().imag,
        "as_strided of a neg view": x._neg_view().as_strided((2,), (1,), 1),
    }
    for name, v in views.items():
        assert v.is_neg(), name
        with pytest.raises(ValueError, match=r"lazy negative view.*pass x\.resolve_neg\(\)"):
            tensor_kernels.sum(v)
        assert tensor_kernels.sum(v.resolve_neg()) == pytest.approx(float(v.sum())), name


def test_lazy_views_are_refused_inside_containers_and_from_dlpack(t, path):
    neg = torch.ones(3)._neg_view()
    conj = torch.ones(3, dtype=torch.complex64).conj()
    with pytest.raises(ValueError, match="lazy negative view"):
        kffi.from_dlpack(neg)
    with pytest.raises(ValueError, match="lazy conjugate view"):
        kffi.from_dlpack(conj.as_subclass(ViewsTensor))
    with pytest.raises(ValueError, match="lazy negative view"):
        t.echo([torch.ones(2), neg])
    assert kffi.from_dlpack(neg.resolve_neg()).shape == (3,)


def test_the_dlpack_protocol_path_refuses_lazy_views_too(tensor_kernels, path):
    class NoExchangeTensor(torch.Tensor):
        """A torch subclass without the exchange API: kffi takes it through __dlpack__."""

        __dlpack_c_exchange_api__ = None

    x = torch.tensor([1.0, 2.0]).as_subclass(NoExchangeTensor)
    assert tensor_kernels.sum(x) == 3.0
    with pytest.raises(
        ValueError,
        match=r"^x: the torch tensor is a lazy negative view.*\(argument #0 of `sum\(x: Tensor\) -> float`\)$",
    ):
        tensor_kernels.sum(x._neg_view())
    with pytest.raises(ValueError, match="lazy conjugate view"):
        tensor_kernels.describe(
            torch.ones(2, dtype=torch.complex64).as_subclass(NoExchangeTensor).conj()
        )


def test_under_a_torch_function_mode(tensor_kernels, path):
    from torch.overrides import TorchFunctionMode

    asked = []

    class Logging(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            asked.append(getattr(func, "__name__", str(func)))
            return func(*args, **(kwargs or {}))

    x = torch.tensor([1.0, 2.0])
    with Logging():
        assert tensor_kernels.sum_two(x, x.as_subclass(ViewsTensor)) == 6.0
        with pytest.raises(ValueError, match="lazy negative view"):
            tensor_kernels.sum_two(x, x._neg_view())
    # kffi.torch's reader asks nothing; torch's methods go through the mode.
    assert ("is_neg" in asked) == (path == "exchange")


def _dispatched(call) -> list:
    """The kffi test ops that went through torch's dispatcher during call()."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        call()
    return [e.name for e in prof.events() if "kffi_test" in e.name]


@pytest.mark.parametrize("gate", ["C", "Python"])
def test_kffi_torch_ops_resolve_lazy_views_through_the_dispatcher(tk, ns, gate):
    import kffi.torch

    op = kffi.torch.register_op(fresh(tk, "scale_into"), f"{ns}::scale_into")
    if gate == "Python":
        op._eager = op._call_python
    x = torch.tensor([1.0, 2.0])
    y = torch.zeros(2)
    with pytest.raises(
        ValueError,
        match=r"^x: the torch tensor is a lazy negative view.*resolve_neg\(\) \(argument #1 of `scale_into\(",
    ):
        tk.scale_into(y, x._neg_view(), 2.0)  # the function itself refuses
    # The op's eager gate sends lazy views to the dispatcher, whose Negative fallback resolves
    # them before kffi's kernel: the same result on both paths.
    assert _dispatched(lambda: op(y, x, 2.0)) == []
    assert _dispatched(lambda: op(y, x._neg_view(), 2.0)) == [f"{ns}::scale_into"]
    assert y.tolist() == [-2.0, -4.0]
    op.default(y, x.as_subclass(ViewsTensor)._neg_view(), 3.0)
    assert y.tolist() == [-3.0, -6.0]
    target = torch.zeros(2)._neg_view()  # the op writes through a negative view
    op(target, x, 5.0)
    assert target.tolist() == [5.0, 10.0] and target.is_neg()


@pytest.mark.parametrize("gate", ["C", "Python"])
def test_kffi_torch_ops_write_through_lazy_views_with_their_own_kernel(tk, ns, gate):
    # torch's Negative and Conjugate fallback takes an op's first return for the argument the op
    # wrote, as aten's in-place ops return it. A kffi op returns nothing: the fallback then read
    # and wrote past the dispatcher's stack (a corrupted heap, seen under glibc's malloc checks).
    # kffi ops that write an argument have their own kernel at those two keys.
    import kffi.torch

    def op(name):
        registered = kffi.torch.register_op(fresh(tk, name), f"{ns}::{name}")
        if gate == "Python":
            registered._eager = registered._call_python
        return registered

    scale, copy, mul_bwd, square = (
        op(n) for n in ("scale_into", "copy_complex_into", "mul_bwd", "square")
    )
    has_kernel = torch._C._dispatch_has_kernel_for_dispatch_key
    for name in ("scale_into", "copy_complex_into", "mul_bwd"):
        assert has_kernel(f"{ns}::{name}", "Negative") and has_kernel(f"{ns}::{name}", "Conjugate")
    assert not has_kernel(f"{ns}::square", "Negative")  # it writes nothing: torch's fallback
    x = torch.tensor([1.0, 2.0], dtype=torch.float64)
    assert square(x._neg_view()).tolist() == [1.0, 4.0]

    # Two written negative views at once (torch's fallback refuses more than one).
    da, db = (
        torch.zeros(2, dtype=torch.float64)._neg_view(),
        torch.zeros(2, dtype=torch.float64)._neg_view(),
    )
    mul_bwd(x, x + 1, torch.ones(2, dtype=torch.float64), 2.0, da, db)
    assert da.tolist() == [4.0, 6.0] and db.tolist() == [2.0, 4.0] and da.is_neg() and db.is_neg()

    # A conjugate view, and a negated conjugate view, written with the values read back.
    z = torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64)
    for target in (
        torch.zeros(2, dtype=torch.complex64).conj(),
        torch.zeros(2, dtype=torch.complex64).conj()._neg_view(),
    ):
        lazy = (target.is_conj(), target.is_neg())
        copy(target, z)
        assert target.tolist() == z.tolist() and (target.is_conj(), target.is_neg()) == lazy
    target = torch.zeros(2, dtype=torch.float64)._neg_view()
    scale.default(target, x._neg_view(), 3.0)  # a lazy input and a lazy output
    assert target.tolist() == [-3.0, -6.0] and target.is_neg()


_WRITE_THROUGH_VIEWS = r"""
import sys
import torch, kffi, kffi.torch
tk = kffi.load_module(sys.argv[1])
op = kffi.torch.register_op(tk.get_function("scale_into"), "kffi_malloc_check::scale_into")
x = torch.tensor([1.0, 2.0])
for _ in range(20):
    target = torch.zeros(2)._neg_view()
    op(target, x, 5.0)
    assert target.tolist() == [5.0, 10.0], target.tolist()
print("done")
"""


def test_writing_through_a_lazy_view_keeps_the_heap_whole(tmp_path):
    # The same write as above in a child run under glibc's malloc checks, which abort on the heap
    # damage torch's fallback did here (without them it showed only as a rare crash later).
    import ctypes.util

    checker = ctypes.util.find_library("c_malloc_debug")
    if checker is None:
        pytest.skip("glibc's libc_malloc_debug is not here")
    script = tmp_path / "write_through_views.py"
    script.write_text(_WRITE_THROUGH_VIEWS)
    env = dict(
        os.environ,
        LD_PRELOAD=checker,
        MALLOC_CHECK_="3",
        MALLOC_PERTURB_="165",
        LIBC_FATAL_STDERR_="1",
    )
    out = subprocess.run(
        [sys.executable, str(script), torch_support.tk_path()],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    report = textwrap.indent(out.stdout[-4000:] + out.stderr[-4000:], "  ")
    assert out.returncode == 0 and out.stdout.splitlines()[-1:] == ["done"], report


# ---- torch's classes by hierarchy (issue 29, class 6) -------------------------------------------


def test_torch_tensor_classes_are_known_by_hierarchy_not_module():
    from kffi.runtime import _types

    Outside = type("Outside", (torch.Tensor,), {"__module__": "somewhere.else"})
    for tp in (torch.Tensor, torch.nn.Parameter, ViewsTensor, Outside):
        kind, flags, *_ = _types._classify(tp)
        assert kind == "tensor" and flags & _core.TYPE_FLAG_LAZY_VIEWS, tp
    Impostor = type("Tensor", (), {"__module__": "torch.fake", "__dlpack__": lambda self: None})
    assert not _types._classify(Impostor)[1] & _core.TYPE_FLAG_LAZY_VIEWS


def test_a_subclass_from_another_module_gets_the_lazy_view_checks(tensor_kernels, path):
    Outside = type("Outside", (torch.Tensor,), {"__module__": "somewhere.else"})
    z = torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64).as_subclass(Outside)
    with pytest.raises(ValueError, match="lazy conjugate view"):
        tensor_kernels.describe(z.conj())
    with pytest.raises(ValueError, match="lazy negative view"):
        tensor_kernels.sum(torch.ones(2).as_subclass(Outside)._neg_view())
    assert tensor_kernels.sum(torch.ones(2).as_subclass(Outside)) == 2.0


# ---- Python code that changes other arguments while they convert --------------------------------

# Each scenario prints "name: ok" (the kernel saw the arguments as they are when it runs) or
# "name: refused <exception>"; a wrong sum prints "WRONG". A victim tensor is converted first
# (its view taken), then an attacker argument's conversion runs Python code that replaces the
# victim's memory. The victim is big enough (1 MiB) that its freed memory is unmapped: reading a
# stale view then crashes, or reads other values.
_HOSTILE = r"""
import sys
import numpy as np
import torch
import kffi
from torch.overrides import TorchFunctionMode

lib, path = sys.argv[1], sys.argv[2]
if path == "fast":
    import kffi.torch
    assert kffi.torch.fast_tensor_import()
k = kffi.load_module(lib)
N = 1 << 18


def total(*values):
    out = 0.0
    with torch._C.DisableTorchFunction():
        for v in values:
            if isinstance(v, torch.Tensor):
                out += float(torch._C.TensorBase.sum(v))
            elif isinstance(v, np.ndarray):
                out += float(v.sum())
    return out


def mutations(victim, holder):
    # Every change writes new values, so that a view of the memory before it sums differently.
    count = [1.0]

    def value():
        count[0] += 1.0
        return count[0]

    def set_():
        victim.set_(torch.full((N // 2,), value()))

    def resize_():
        victim.resize_(victim.numel() + N).fill_(value())

    def resize_0():
        victim.resize_(0)

    def del_base():
        holder.clear()  # the last reference to the victim's base goes
        victim.set_(torch.full((N,), value()))

    return {"set_": set_, "resize_": resize_, "resize_(0)": resize_0, "del": del_base}


def once(f):
    done = []

    def run(*a, **kw):
        if not done:
            done.append(1)
            f()

    return run


def always(f):
    return f


class IndexAttacker:
    def __init__(self, f):
        self.f = f

    def __index__(self):
        self.f()
        return 7


def class_attacker(f):
    # An object of a class kffi has not seen, whose metaclass runs f when kffi classifies it.

    class Meta(type):
        def __getattr__(cls, name):
            f()
            raise AttributeError(name)

    return Meta("Fresh", (), {})()


class FloatAttacker:
    def __init__(self, f):
        self.f = f

    def __float__(self):
        self.f()
        return 1.5


def torch_attackers(f, base):
    class TorchFunction(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            f()
            return super().__torch_function__(func, types, args, kwargs or {})

    class MethodOverrides(torch.Tensor):
        def is_neg(self):
            f()
            return False

        def is_conj(self):
            f()
            return False

    class Properties(torch.Tensor):
        @property
        def requires_grad(self):
            f()
            return False

        @property
        def is_meta(self):
            f()
            return False

    class DLPack(torch.Tensor):
        __dlpack_c_exchange_api__ = None

        def __dlpack__(self, *args, **kwargs):
            f()
            return torch.Tensor.__dlpack__(self.as_subclass(torch.Tensor), *args, **kwargs)

        def __dlpack_device__(self):
            f()
            return torch.Tensor.__dlpack_device__(self.as_subclass(torch.Tensor))

    return {
        "__torch_function__": base.as_subclass(TorchFunction),
        "is_neg/is_conj overrides": base.as_subclass(MethodOverrides),
        "properties": base.as_subclass(Properties),
        "__dlpack__/__dlpack_device__": base.as_subclass(DLPack),
    }


def run(name, call, values, may_refuse=False):
    print(name, end=": ", flush=True)
    try:
        got = call()
    except (ValueError, TypeError, RuntimeError) as e:
        print(("refused " if may_refuse else "WRONG refused ") + type(e).__name__, str(e)[:120])
        return
    want = total(*values())
    print("ok" if abs(got - want) < 1e-6 * max(1.0, abs(want)) else f"WRONG {got} != {want}")


def scenarios(when):
    # when: once, or always (the hook changes the victim every time it runs: also while kffi
    # takes views again, if it ran the hook then).
    for mname in ("set_", "resize_", "resize_(0)", "del"):
        # A torch victim, then an attacker whose conversion runs Python code.
        for aname in ("__index__", "__float__", "list of __index__", "metaclass __getattr__"):
            holder = {"base": torch.ones(2 * N)}
            victim = holder["base"][::2]
            f = when(mutations(victim, holder)[mname])
            if aname == "metaclass __getattr__":
                attacker = class_attacker(f)
            else:
                attacker = IndexAttacker(f) if aname != "__float__" else FloatAttacker(f)
            arg = [attacker] if aname.startswith("list") else attacker
            run(f"{aname} {mname} {when.__name__}", lambda: k.sum_first(victim, arg),
                lambda: (victim,))
        # Torch attackers: real ones laid out like x.conj().imag (one element into pairs), which
        # kffi once asked torch about through their methods, and complex ones.
        for order in ("victim first", "attacker first", "complex attacker"):
            for aname in ("__torch_function__", "is_neg/is_conj overrides", "properties",
                          "__dlpack__/__dlpack_device__", "mode"):
                holder = {"base": torch.ones(2 * N)}
                victim = holder["base"][::2]
                f = when(mutations(victim, holder)[mname])
                if order == "complex attacker":
                    base = torch.ones(4, dtype=torch.complex64)
                else:
                    base = torch.ones(8)[1::2]
                if aname == "mode":
                    class Mode(TorchFunctionMode):
                        def __torch_function__(self, func, types, args=(), kwargs=None):
                            f()
                            return func(*args, **(kwargs or {}))

                    attacker, mode = base, Mode()
                else:
                    attacker, mode = torch_attackers(f, base)[aname], None
                if order == "complex attacker":  # sum_first: the attacker is converted, not read
                    kernel, args, summed = k.sum_first, (victim, attacker), (victim,)
                elif order == "victim first":
                    kernel, args, summed = k.sum_two, (victim, attacker), (victim, attacker)
                else:
                    kernel, args, summed = k.sum_two, (attacker, victim), (attacker, victim)

                def call(kernel=kernel, args=args, mode=mode):
                    if mode is None:
                        return kernel(*args)
                    with mode:
                        return kernel(*args)

                run(f"{aname} {mname} ({order}) {when.__name__}", call,
                    lambda summed=summed: summed)
    if when is always:
        return
    # A NumPy victim (its fields read directly), resized by an attacker: its memory moves.
    a = np.ones(N)

    def grow():
        a.resize(2 * N, refcheck=False)
        a[:] = 2.0

    run("numpy victim, __index__ resize", lambda: k.sum_first(a, IndexAttacker(once(grow))),
        lambda: (a,))
    # An attacker that turns the victim into a class kffi has not seen: refused.
    victim = torch.ones(N)
    New = type("New", (torch.Tensor,), {})

    def swap():
        victim.__class__ = New

    run("__class__ swap", lambda: k.sum_first(victim, IndexAttacker(once(swap))), lambda: (victim,),
        may_refuse=True)


scenarios(once)
scenarios(always)
print("done")
"""


@pytest.mark.parametrize("which", ["fast", "exchange"])
def test_python_code_changing_other_arguments_leaves_the_call_correct_or_refused(
    library_paths, tmp_path, which
):
    if which == "fast" and _fast_import_parts() is None:
        pytest.skip("kffi.torch's C library does not build here")
    script = tmp_path / "hostile.py"
    script.write_text(_HOSTILE)
    out = subprocess.run(
        [sys.executable, str(script), str(library_paths["tensor_kernels"]), which],
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = out.stdout.splitlines()
    report = textwrap.indent(out.stdout[-4000:] + out.stderr[-4000:], "  ")
    assert out.returncode == 0 and lines and lines[-1] == "done", f"crashed:\n{report}"
    assert not [line for line in lines if "WRONG" in line], report
    results = [line for line in lines if line.endswith(": ok") or ": refused " in line]
    assert len(results) == 2 * 4 * (4 + 3 * 5) + 2, report  # every scenario ran
