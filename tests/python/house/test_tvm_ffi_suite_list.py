"""tests/python/house/test_tvm_ffi_suite_list.py: the list CI holds apache-tvm-ffi's tests to, and
the check that compares a run with it.

CI runs scripts/tvm_ffi_suite.py --expect tests/abi/tvm_ffi_suite_expected.json; the run itself
(their sources, a build) is CI's step, not this test's. Here: the list is consistent, and the
checker reports every kind of difference, from reports made up to the list's shape, so that a
checker that passed everything would fail here.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import json
from pathlib import Path

from script_module import load_script

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "tvm_ffi_suite.py"
LIST = ROOT / "tests" / "abi" / "tvm_ffi_suite_expected.json"


def _suite():
    return load_script(SCRIPT)


def _expect():
    return json.loads(LIST.read_text())


def test_the_list_is_consistent():
    e = _expect()
    suite = _suite()
    assert e["version"] == suite.DEFAULT_VERSION
    assert not set(e["links"]) & set(e["cannot_link"])
    assert e["tests"]["tvm_ffi"] == e["tests"]["kffi"] >= e["tests"]["tvm_ffi_same_files"]
    assert len(e["not_passing"]) < e["tests"]["tvm_ffi_same_files"]
    for name, entry in e["not_passing"].items():
        assert "." in name and isinstance(entry["also_on_tvm_ffi"], bool) and entry["why"]


def _run_as_listed(e):
    """Reports and the linked files of a run that matches the list exactly."""
    passed = {"outcome": "passed", "detail": "", "file": "test_any"}
    failed = {"outcome": "failed", "detail": "boom", "file": "test_any"}
    names = [f"Made.Up{i}" for i in range(e["tests"]["tvm_ffi_same_files"] - len(e["not_passing"]))]
    kffi = {n: dict(passed) for n in names}
    kffi.update({n: dict(failed) for n in e["not_passing"]})
    same = {n: dict(passed) for n in names}
    for n, entry in e["not_passing"].items():
        same[n] = dict(failed if entry["also_on_tvm_ffi"] else passed)
    unlinkable = e["tests"]["kffi"] - len(kffi)
    stem = next(iter(e["cannot_link"]))
    for i in range(unlinkable):
        kffi[f"Gone.T{i}"] = {"outcome": "could not link", "detail": "sym", "file": stem}
    ref = {n: dict(passed) for n in kffi}
    report = {"tvm_ffi": ref, "kffi": kffi, "tvm_ffi_same_files": same}
    return report, set(e["links"])


def test_a_run_that_matches_the_list_has_no_differences():
    e = _expect()
    report, linked = _run_as_listed(e)
    assert _suite().check_expected(e, report, linked) == []


def test_every_kind_of_difference_is_reported():
    e = _expect()
    check = _suite().check_expected
    listed = next(iter(e["not_passing"]))

    report, linked = _run_as_listed(e)
    report["kffi"]["Made.Up0"].update(outcome="failed", detail="boom")
    assert check(e, report, linked) == ["kffi: Made.Up0 failed: boom"]

    report, linked = _run_as_listed(e)
    report["kffi"][listed]["outcome"] = "passed"
    assert f"kffi: {listed} passes now; take it off the list" in check(e, report, linked)

    report, linked = _run_as_listed(e)
    report["kffi"]["Made.Up1"].update(outcome="crashed", detail="SIGSEGV")
    assert any(p.startswith("kffi: Made.Up1 crashed") for p in check(e, report, linked))

    report, linked = _run_as_listed(e)
    report["tvm_ffi"]["Made.Up2"].update(outcome="timed out")
    assert any(p.startswith("tvm_ffi: Made.Up2 timed out") for p in check(e, report, linked))

    report, linked = _run_as_listed(e)
    gone = e["links"][0]
    assert any(p.startswith(f"{gone} no longer links") for p in check(e, report, linked - {gone}))

    report, linked = _run_as_listed(e)
    now = next(iter(e["cannot_link"]))
    assert f"{now} links on kffi now; move it to the files that link" in check(
        e, report, linked | {now}
    )

    report, linked = _run_as_listed(e)
    del report["tvm_ffi_same_files"]["Made.Up3"]
    assert check(e, report, linked) == [
        f"tvm_ffi_same_files: {e['tests']['tvm_ffi_same_files'] - 1} tests where the list has "
        f"{e['tests']['tvm_ffi_same_files']}"
    ]
