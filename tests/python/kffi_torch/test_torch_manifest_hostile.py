"""tests/python/kffi_torch/test_torch_manifest_hostile.py: a torch op manifest (kffi.torch.save_ops)
is untrusted input to kffi::torch::RegisterOps: its records are named (type keys, field names),
never process-local indices, and everything in them is checked against the live type registry and
the function's metadata, so a manifest naming another type's field (which once wrote one type's
field into another type's smaller object) is refused with a message naming the file, the line and
the op. A sweep damages every record name and every number of the records' section in turn; each
damaged manifest is refused cleanly (a ValueError) or, where the damage is harmless, still computes
what the op computes. A manifest written in one process registers in another that loaded other types
first (so every type index differs)."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import kffi
import kffi.torch
from conftest import KERNELS, LibraryBuilder

_ns = itertools.count()


@pytest.fixture(scope="module")
def rk():
    return kffi.load_module(
        LibraryBuilder().build("record_op_kernels", KERNELS / "record_op_kernels.cc")
    )


@pytest.fixture(scope="module")
def manifest(rk, tmp_path_factory) -> Path:
    """small_add(s: flat.Small, x) and blended(b: flat.Blend, x): a 4-byte record and a larger
    one, saved with their plans."""
    ops = {
        "small_add": kffi.torch.register_op(
            rk.small_add,
            "kffi_hm::small_add",
            mutates_args=(),
            fake=lambda *a: torch.empty_like(a[-1]),
        ),
        "blended": kffi.torch.register_op(
            rk.blended, "kffi_hm::blended", mutates_args=(), fake=lambda *a: torch.empty_like(a[-1])
        ),
    }
    return Path(kffi.torch.save_ops(tmp_path_factory.mktemp("hm") / "ops.kffi_ops", ops))


def lines_of(manifest: Path) -> list[list[str]]:
    return [line.split("\t") for line in manifest.read_text().splitlines()]


def write(tmp_path: Path, rows: list[list[str]], ns: str) -> Path:
    text = "\n".join(
        "\t".join(r) if i == 0 else "\t".join([r[0].replace("kffi_hm::", f"{ns}::"), *r[1:]])
        for i, r in enumerate(rows)
    )
    path = tmp_path / f"{ns}.kffi_ops"
    path.write_text(text + "\n")
    return path


def register(path: Path) -> int:
    from kffi.torch import _glue

    return _glue.glue().register_ops(str(path))


def test_records_are_named_in_the_manifest(manifest):
    rows = lines_of(manifest)
    assert rows[0] == ["kffi-torch-ops 2"]
    by_op = {r[0]: r for r in rows[1:]}
    assert by_op["kffi_hm::small_add"][8] == "flat.Small k"
    assert by_op["kffi_hm::blended"][8] == "flat.Blend alpha n flag tag"
    # The plan's record section holds schema positions only: no type index of this process.
    plan = [int(v) for v in by_op["kffi_hm::small_add"][7].split()]
    assert plan[-2:] == [1, 0]  # one record, one field; the field is schema argument 0


def test_another_types_field_is_refused(manifest, tmp_path):
    """The once heap-overflowing case: flat.Small (4 bytes) given flat.Blend's fields."""
    rows = lines_of(manifest)
    i = next(k for k, r in enumerate(rows) if r[0] == "kffi_hm::small_add")
    rows[i][8] = "flat.Small alpha"
    path = write(tmp_path, rows, f"kffi_hm{next(_ns)}")
    with pytest.raises(ValueError) as e:
        register(path)
    assert str(e.value).startswith(f"kffi::torch::RegisterOps: {path} line {i + 1}: ")
    assert (
        "the call plan's record field flat.Small.alpha is not a writable field of flat.Small"
        in (str(e.value))
    )
    rows[i][8] = "flat.Blend alpha"  # a type the function does not declare for the parameter
    path = write(tmp_path, rows, f"kffi_hm{next(_ns)}")
    with pytest.raises(
        ValueError,
        match=r"builds a flat\.Blend for parameter #0, which the "
        r"function declares as flat\.Small",
    ):
        register(path)


def _damaged(rows: list[list[str]]):
    """Every damage to the records' names and the plans' record sections, one at a time."""
    for i, row in enumerate(rows[1:], start=1):
        names = row[8].split()
        for k in range(len(names)):
            for other in (
                "flat.Knobs",
                "flat.Blend",
                "flat.Small",
                "no.Such",
                "version",
                "k",
                "alpha",
                "tag",
                "",
            ):
                if other == names[k]:
                    continue
                damaged = [list(r) for r in rows]
                damaged[i][8] = " ".join(names[:k] + ([other] if other else []) + names[k + 1 :])
                yield f"line {i + 1} name {k} -> {other!r}", damaged
        extra = [list(r) for r in rows]
        extra[i][8] = row[8] + " alpha"
        yield f"line {i + 1} one name more", extra
        plan = row[7].split()
        n_params = int(plan[0])
        # The record section starts after the fixed part; damage every number from there on,
        # and every source/value pair of the parameters.
        targets = list(range(1, 1 + 2 * n_params)) + list(range(len(plan) - 4, len(plan)))
        for at in sorted(set(t for t in targets if 0 <= t < len(plan))):
            for value in ("0", "1", "2", "4", "-1", "1023", "99999"):
                if value == plan[at]:
                    continue
                damaged = [list(r) for r in rows]
                damaged[i][7] = " ".join(plan[:at] + [value] + plan[at + 1 :])
                yield f"line {i + 1} plan[{at}] -> {value}", damaged


def test_every_damage_to_the_records_is_refused_or_harmless(manifest, tmp_path):
    rows = lines_of(manifest)
    x = torch.arange(4, dtype=torch.float32)
    refused = 0
    for what, damaged in _damaged(rows):
        ns = f"kffi_hm{next(_ns)}"
        path = write(tmp_path, damaged, ns)
        try:
            register(path)
        except (ValueError, TypeError, RuntimeError) as e:
            assert str(e).startswith(f"kffi::torch::RegisterOps: {path} line "), (what, str(e))
            refused += 1
            continue
        # Registered: the damage did not change what the ops are (their calls still compute).
        ops = getattr(torch.ops, ns)
        try:
            out = ops.small_add(3, x)
        except (ValueError, TypeError, RuntimeError, IndexError):
            continue  # a damaged plan caught per call, with an exception
        assert torch.equal(out, x + 3), what
    assert refused > 50


CROSS = r"""
import sys
import torch, kffi, kffi.torch
from kffi.torch import _glue
# Types registered before the manifest's: every type index differs from the writer's.
kffi.load_module(sys.argv[2])
kffi.load_module(sys.argv[1])
assert _glue.glue().register_ops(sys.argv[3]) == 2
x = torch.arange(4, dtype=torch.float32)
assert torch.equal(torch.ops.kffi_hm.small_add(5, x), x + 5)
y = torch.ops.kffi_hm.blended(0.5, 4, True, "ab", x)
assert torch.equal(y, x * (0.5 * 4 + 1 + 2)), y
print("ok")
"""


def test_a_manifest_means_the_same_in_another_process(manifest, rk, tmp_path):
    other = tmp_path / "other_types.cc"
    other.write_text(
        "#include <kffi/export.h>\n#include <kffi/reflection.h>\n#include <cstdint>\n"
        "int64_t Five() { return 5; }\nKFFI_EXPORT(five, Five);\n"
        + "".join(
            f'struct T{i} {{ int64_t a = 0; }};\nKFFI_RECORD(T{i}, "other.T{i}", a);\n'
            for i in range(5)
        )
    )
    other_lib = LibraryBuilder().build("hm_other_types", other)
    lib = LibraryBuilder().build("record_op_kernels", KERNELS / "record_op_kernels.cc")  # cached
    proc = subprocess.run(
        [sys.executable, "-c", CROSS, str(lib), str(other_lib), str(manifest)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "ok"


PACKAGE = r"""
import json, sys
import torch
from kffi.torch import _glue
n = int(sys.argv[2])
w = torch._C.PyTorchFileWriter(sys.argv[1])
nodes = [{"node": {"target": f"kffi_hm_missing::op{i % (n // 2)}.default"}} for i in range(n)]
text = json.dumps({"nodes": nodes}).encode()
w.write_record("data/aotinductor/model/extern.json", text, len(text))
w.write_end_of_file()
try:
    _glue.glue().check_package(sys.argv[1])
except ValueError as e:
    print(str(e))
"""


def test_check_package_is_linear_in_its_targets(tmp_path):
    """300 000 extern-kernel nodes naming 150 000 ops (each twice): one pass (the list of targets
    was searched once per node: 3.3 s for 40 000 targets, past 30 s for 300 000), and a message
    listing the first missing ops and how many more, not all of them. The child has a time limit:
    quadratic work is a hang here, a failure."""
    proc = subprocess.run(
        [sys.executable, "-c", PACKAGE, str(tmp_path / "many.pt2"), "300000"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = proc.stdout.strip()
    assert "calls ops this process has not registered: kffi_hm_missing::op0.default, " in text
    assert "kffi_hm_missing::op19.default and 149980 more. Register kffi ops" in text
    assert len(text) < 2000
