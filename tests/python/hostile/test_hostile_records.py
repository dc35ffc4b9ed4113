"""tests/python/hostile/test_hostile_records.py: records as hostile input.

- Nesting: a record whose field holds a record (kernels/record_hostile_kernels.cc, a type with a
  field of its own type) is converted one level of kffi's container limit deeper, as a list in a
  list is: a record that holds itself, or 5000 records nested in each other (which ran the C stack
  out, SIGSEGV), raise kffi's RecursionError naming the argument's field; 511 levels convert, on
  a thread with a 1 MiB stack too. The sweep mixes records and lists, and runs each case in a
  child process with a time limit, so a crash or a hang is a failure, not a lost run. The torch
  and JAX paths flatten records into scalar fields: a field that holds the record itself is a
  TypeError naming the field there.
- Reads while Python runs: a field's __index__ that gives the record another __dict__ makes the
  fields after it read from the new one (they were read from the old one).
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import subprocess
import sys
import textwrap

import kffi
import pytest
from conftest import KERNELS, LibraryBuilder
from record_support import Blend, record_kernels


@pytest.fixture(scope="module")
def hostile_lib() -> str:
    return str(
        LibraryBuilder().build("record_hostile_kernels", KERNELS / "record_hostile_kernels.cc")
    )


@pytest.fixture(scope="module")
def record_lib() -> str:
    return record_kernels()


PRELUDE = """
import dataclasses, sys, threading
import kffi
m = kffi.load_module(sys.argv[1])

@kffi.register_record("hostile.Node")
@dataclasses.dataclass
class Node:
    v: int
    next: "Node | None" = None

def chain(n, tail=None):
    for i in range(n):
        tail = Node(i, tail)
    return tail

def refused(call):
    try:
        call()
    except RecursionError as e:
        return str(e)
    raise AssertionError("accepted")
"""

# (what, code run after PRELUDE: prints what the test checks)
NESTING = {
    "holds itself": """
n = Node(1); n.next = n
print(refused(lambda: m.depth(n)))
""",
    "5000 nested": """
print(refused(lambda: m.depth(chain(5000))))
""",
    "a cycle of two": """
a = Node(1); b = Node(2, a); a.next = b
print(refused(lambda: m.depth(a)))
""",
    "in a list that holds itself": """
xs = [chain(3)]; xs.append(xs)
print(refused(lambda: m.total_depth(xs)))
""",
    "deep under a list": """
print(refused(lambda: m.total_depth([chain(2), chain(600)])))
""",
    "511 nested convert": """
print(m.depth(chain(511)))
""",
    "511 nested on a 1 MiB thread": """
threading.stack_size(1 << 20)
out = []
t = threading.Thread(target=lambda: out.append(m.depth(chain(511))))
t.start(); t.join()
print(out[0])
""",
    "healthy after refusals": """
refused(lambda: m.depth(chain(5000)))
n = Node(1); n.next = n
refused(lambda: m.depth(n))
print(m.depth(chain(3)), m.total_depth([chain(2), chain(4)]))
""",
}
EXPECTED = {
    "511 nested convert": "511",
    "511 nested on a 1 MiB thread": "511",
    "healthy after refusals": "3 6",
}


@pytest.mark.parametrize("case", sorted(NESTING))
def test_nesting_is_limited_on_every_path(hostile_lib, case):
    code = PRELUDE + textwrap.dedent(NESTING[case])
    proc = subprocess.run(
        [sys.executable, "-c", code, hostile_lib], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, f"{case}: rc={proc.returncode} {proc.stderr[-2000:]}"
    out = proc.stdout.strip()
    if case in EXPECTED:
        assert out == EXPECTED[case], out
        return
    assert "nest deeper than kffi's limit of 512 levels (or hold themselves)" in out, out
    where = "chains" if "list" in case else "n"
    assert out.startswith(f"{where}"), out
    assert "(argument #0 of `" in out, out


def test_flattened_record_field_holding_the_record_is_a_type_error(record_lib):
    """kffi.torch and kffi.jax pass a record as its scalar fields: a field that holds the record
    itself is refused there by kind, naming the field."""
    torch = pytest.importorskip("torch")
    import kffi.torch

    rk = kffi.load_module(record_lib)

    b = Blend(0.5, 2, False, "")
    b.alpha = b
    op = kffi.torch.register_op(
        rk.blended,
        "kffi_hostile_rec::blended",
        mutates_args=(),
        fake=lambda *a: torch.empty_like(a[-1]),
    )
    x = torch.ones(2)
    with pytest.raises(TypeError, match=r"^b\.alpha: expected float, got Blend"):
        op(b, x)
    with pytest.raises(TypeError, match=r"b\.alpha"):
        rk.blended(b, x)  # the direct call: the field's conversion names it too
    jax = pytest.importorskip("jax")
    import kffi.jax

    with pytest.raises(TypeError, match=r"b\.alpha: expected float, got Blend"):
        kffi.jax.call(
            rk.blended,
            b,
            jax.numpy.ones(2, jax.numpy.float32),
            out_shapes=jax.ShapeDtypeStruct((2,), jax.numpy.float32),
        )


def test_fields_after_python_replaced_the_dict_are_read_again(record_lib):
    rk = kffi.load_module(record_lib)

    b = Blend(1.0, 0, False, "")

    class SwapsTheDict:
        def __index__(self):
            b.__dict__ = {"alpha": 1.0, "n": 0, "flag": True, "tag": "abcd"}
            return 2

    b.n = SwapsTheDict()
    # alpha * n + flag + len(tag): n from __index__, flag and tag from the dict the record has
    # once __index__ ran (the old dict gave 2.0).
    assert rk.blend_factor(b) == 7.0
    b2 = Blend(1.0, 0, False, "")

    class DropsFields:
        def __index__(self):
            b2.__dict__ = {"alpha": 1.0}
            return 2

    b2.n = DropsFields()
    with pytest.raises((TypeError, AttributeError), match=r"flag"):
        rk.blend_factor(b2)
    assert rk.blend_factor(Blend(1.0, 3, True, "x")) == 5.0  # the plan is healthy afterwards
