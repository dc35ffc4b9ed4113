"""tests/python/hostile/test_hostile_depth.py: kffi.with_contract nests without limit (issue 29,
class 9). A wrapper of a wrapper is checked and called in one loop and released one wrapper at a
time, so 20000 (and 100000) nested wrappers cost no more C stack than one: called and released on a
thread whose whole stack is 256 KB. Every contract of the chain is still checked, the outermost
first. In a subprocess with a timeout: before the guard, the call overflowed the C stack."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

_SCRIPT = textwrap.dedent("""
    import sys, threading
    import kffi

    depth = int(sys.argv[1])
    innermost = kffi.with_contract(kffi.Function(lambda x: x + 1), "x: int64[0, 10]")
    w = innermost
    for i in range(depth):
        w = kffi.with_contract(w, "x: int64" if i % 2 else "x: int64[-5, 100]")
    del innermost
    out = {}

    def run():
        global w
        out["ok"] = w(3)
        for bad, cls in ((11, ValueError), (101, ValueError), ("a", TypeError)):
            try:
                w(bad)
            except cls as e:
                out.setdefault("errors", []).append(str(e))
        w = None  # the last reference: the whole chain is released here, on this thread
        out["released"] = True

    threading.stack_size(256 * 1024)
    t = threading.Thread(target=run)
    t.start()
    t.join()
    print(out["ok"], out["released"])
    for e in out["errors"]:
        print(e)
""")


@pytest.mark.parametrize("depth", [1, 2, 20000, 100000])
def test_deeply_nested_contract_wrappers(depth):
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(depth)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[-3000:]}"
    lines = proc.stdout.splitlines()
    assert lines[0] == "4 True"
    # 11 passes every outer contract but the innermost's range; 101 the outermost's (depth 1:
    # the only outer one is [-5, 100]); "a" fails the outermost type check.
    assert "x: expected a value in range [0, 10], got 11" in lines[1]
    assert "x: expected a value in range [-5, 100], got 101" in lines[2]
    assert lines[3].startswith("x: expected int64, got str")
