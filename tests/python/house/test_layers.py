"""tests/python/house/test_layers.py: python/kffi is in layers, and no import runs up a layer.

Reads the package's source with ``ast`` (every import, function-local ones included) and fails on
an import from a lower layer into a higher one, on one framework integration importing another,
and on a package face that does more than re-export. The layer order is written down here, lowest
first; python/kffi/__init__.py describes the same order.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from kffi.runtime._frameworks import INTEGRATIONS as INTEGRATION_ENTRY_POINTS

PKG = Path(__file__).resolve().parents[3] / "python" / "kffi"

# Lowest first. A top-level name of the package (a module or a subpackage) belongs to one layer;
# a module may import from its own layer and those below it.
LAYERS = [
    ("base", {"_core", "_lazy", "_type_text", "libinfo", "config", "typing"}),
    # _reflection: at the top level because the extension imports it by that name.
    ("runtime", {"runtime", "_reflection"}),
    # kffi.cpp and kffi.aot are the public names of toolchain/cpp.py and toolchain/aot.py;
    # kffi.build is the toolchain's former name (build.py, an alias).
    ("toolchain", {"toolchain", "build", "cpp", "aot"}),
    ("contract", {"contract"}),
    ("tvm", {"tvm"}),
    # The framework integrations: one layer, none importing another; their names are the
    # runtime's registry of entry points (adding one is its subpackage and a line there).
    ("integrations", set(INTEGRATION_ENTRY_POINTS)),
    ("face", {"__init__"}),
]
RANK = {unit: i for i, (_, units) in enumerate(LAYERS) for unit in units}
INTEGRATIONS = LAYERS[-2][1]


def _unit_of_file(path: Path) -> str:
    rel = path.relative_to(PKG)
    return rel.parts[0].removesuffix(".py").removesuffix(".pyi")


def _package_of_file(path: Path) -> list[str]:
    """The dotted package a file's relative imports start from."""
    rel = path.relative_to(PKG).with_suffix("")
    parts = ["kffi", *rel.parts]
    return parts[:-1]  # a module's package; __init__'s package is its folder


def _targets(path: Path, node: ast.AST) -> list[tuple[str, int]]:
    """The top-level units of kffi an import node reaches, with its line."""
    out = []
    if isinstance(node, ast.Import):
        for alias in node.names:
            parts = alias.name.split(".")
            if parts[0] == "kffi":
                out.append((parts[1] if len(parts) > 1 else "__init__", node.lineno))
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            base = _package_of_file(path)
            base = base[: len(base) - (node.level - 1)]
            parts = base + (node.module.split(".") if node.module else [])
        elif node.module and node.module.split(".")[0] == "kffi":
            parts = node.module.split(".")
        else:
            return out
        if len(parts) > 1:
            out.append((parts[1], node.lineno))
        else:  # `from kffi import x`, `from .. import x`: a submodule, or a name of the face
            for alias in node.names:
                unit = alias.name
                is_sub = (PKG / unit).is_dir() or (PKG / f"{unit}.py").exists()
                is_sub = is_sub or unit == "_core"
                out.append((unit if is_sub else "__init__", node.lineno))
    return out


def _sources() -> list[Path]:
    return sorted(p for p in PKG.rglob("*.py") if "__pycache__" not in p.parts)


def test_every_file_is_in_a_layer():
    units = {_unit_of_file(p) for p in _sources()}
    assert units <= set(RANK), f"files in no layer: {sorted(units - set(RANK))}"


def test_no_import_runs_up_a_layer():
    bad = []
    for path in _sources():
        unit = _unit_of_file(path)
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            for target, line in _targets(path, node):
                where = f"{path.relative_to(PKG.parent)}:{line} imports kffi.{target}"
                if target not in RANK:
                    bad.append(f"{where}, which is in no layer")
                elif RANK[target] > RANK[unit]:
                    bad.append(
                        f"{where}: layer {LAYERS[RANK[target]][0]} is above {LAYERS[RANK[unit]][0]}"
                    )
                elif unit in INTEGRATIONS and target in INTEGRATIONS and target != unit:
                    bad.append(f"{where}: one framework integration imports another")
    assert not bad, "imports running up a layer:\n" + "\n".join(bad)


def test_the_face_only_re_exports():
    path = PKG / "__init__.py"
    text = path.read_text()
    assert "noqa: E402" not in text, "the face's imports come first: no `# noqa: E402`"
    tree = ast.parse(text)
    for i, node in enumerate(tree.body):
        if i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the docstring
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        is_all = (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id == "__all__"
        )
        assert is_all, f"python/kffi/__init__.py:{node.lineno}: the face holds only imports"


@pytest.mark.parametrize("name", ["cpp", "aot", "contract", "compile", "stubgen"])
def test_public_names_of_the_build_and_contract_layers(name):
    import kffi

    assert getattr(kffi, name) is not None


def test_public_module_names_are_the_layer_modules():
    import kffi
    import kffi.aot
    import kffi.cpp
    import kffi.toolchain.aot
    import kffi.toolchain.cpp
    import kffi.toolchain.stubgen

    # One module object behind each public name (what is set on one is seen through the other).
    assert kffi.cpp is kffi.toolchain.cpp and kffi.aot is kffi.toolchain.aot
    # kffi.stubgen is the function; its module is kffi.toolchain.stubgen (no name shadowed).
    assert kffi.stubgen is kffi.toolchain.stubgen.stubgen


def test_the_former_name_kffi_build_is_the_toolchain():
    import kffi.build.cpp
    import kffi.toolchain
    from kffi.build.stubgen import stubgen

    assert kffi.build.cpp is kffi.toolchain.cpp and kffi.build.aot is kffi.toolchain.aot
    assert stubgen is kffi.stubgen


def test_import_star_shadows_no_builtin():
    import builtins

    import kffi

    shadowed = [n for n in kffi.__all__ if hasattr(builtins, n)]
    assert not shadowed, f"`from kffi import *` would shadow the builtins {shadowed}"
    assert "Optional" not in kffi.__all__  # typing.Optional, in every annotated module
    for name in ("compile", "Optional", "bool"):  # still kffi's attributes
        assert getattr(kffi, name) is not None


def test_lazy_singletons_are_made_one_way():
    """A value made once on first use is a kffi._lazy.lazy, not a functools.cache of a function
    without parameters (one way of everything: lazy also retries a failed make and says whether
    the value exists). functools.cache stays for memos keyed by arguments."""
    found = []
    for path in sorted(PKG.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef) or node.args.args or node.args.kwonlyargs:
                continue
            for d in node.decorator_list:
                target = d.func if isinstance(d, ast.Call) else d
                if isinstance(target, ast.Attribute) and target.attr in ("cache", "lru_cache"):
                    found.append(f"{path.relative_to(PKG)}: {node.name}")
    assert not found, f"zero-argument functools caches (use kffi._lazy.lazy): {found}"
