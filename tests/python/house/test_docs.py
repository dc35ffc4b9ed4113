"""tests/python/house/test_docs.py: every code block of docs/*.md and README.md runs, so docs cannot
rot.

Pages are found by themselves (docs/*.md, then README.md). A page's blocks run in order, in one
fresh Python process per page, in a fresh temporary folder, with ``kffi-config`` on PATH and
``KFFI_REPO`` naming the repository root. By the fence's info string:

- ``python``: run in one namespace per page; ``python gpu``: only where a CUDA GPU is present.
- ``cpp file=NAME`` / ``c file=NAME`` / ``cmake file=NAME`` (any language with ``file=``): written to
  NAME for later blocks to build or load. ``cpp`` / ``c`` without ``file=``: compiled alone as one
  translation unit (``-c``, flags from ``kffi-config --cxxflags`` / ``--cflags``).
- ``bash``: run with ``bash -euo pipefail``.
- ``text`` / ``console``: shown output, not run; ``{directive}``: a MyST directive for Sphinx
  (``{eval-rst}`` holding autodoc), not code.

A page whose next block needs an optional package that is missing (``import torch``, or a command
such as ``tvm-ffi-config``) stops there and is reported as skipped; everything before it has run.
README.md's first block (the demo and the whole test suite) is not run here; its other blocks run
beside a link to examples/, as from the repository root.

A block that starts with ``// examples/PATH`` (``# examples/PATH`` in Python, bash or CMake) quotes
that file: verbatim, or in pieces separated by ``// ...`` lines, in order.

The module also checks that docs/contracts.md shows every message the contract code can emit,
and runs the examples the docs point to (examples/python_demo.py, examples/jax,
examples/tvm_ffi).
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import ast
import ctypes
import importlib.util
import itertools
import json
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
DOCS = REPO / "docs"
README = REPO / "README.md"

RUN_LANGS = {"python", "bash", "cpp", "c"}
SHOWN_LANGS = {"text", "console"}
FILE_ONLY_LANGS = {"cmake"}
TAGS = {"gpu"}
# Packages a page may need that kffi does not: a page stops (skipped) at a block needing one
# that is not installed. Commands map to the package that provides them.
OPTIONAL_MODULES = {
    "torch",
    "jax",
    "jaxlib",
    "tvm_ffi",
    "jax_tvm_ffi",
    "cutlass",
    "cupy",
    "flatbuffers",  # jax.export serialization (docs/deploy.md)
    "ml_dtypes",  # NumPy arrays of bfloat16 and fp8 (docs/kernel_library.md)
}
OPTIONAL_COMMANDS = {"tvm-ffi-config": "tvm_ffi"}
SKIP_EXIT = 77  # the page process's exit status for "stopped at a block needing a missing package"


@dataclass
class Block:
    page: str  # path relative to the repository root
    line: int  # 1-based line of the block's first code line
    lang: str
    tags: list = field(default_factory=list)
    file: str | None = None
    code: str = ""


FENCE = re.compile(r"^```(.*)$")


def parse_blocks(path: Path, root: Path = REPO) -> list[Block]:
    """The fenced blocks of a Markdown page, in order. Fences start at column 0."""
    rel = str(path.relative_to(root))
    lines = path.read_text().splitlines()
    blocks, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        info = m.group(1).split()
        if not info:
            raise AssertionError(f"{rel}:{i + 1}: a code block without a language")
        lang, words = info[0], info[1:]
        block = Block(rel, i + 2, lang)
        for w in words:
            if w.startswith("file="):
                block.file = w[len("file=") :]
            else:
                block.tags.append(w)
        j = i + 1
        while j < len(lines) and lines[j] != "```":
            j += 1
        if j == len(lines):
            raise AssertionError(f"{rel}:{i + 1}: the code block is not closed")
        block.code = "\n".join(lines[i + 1 : j]) + "\n"
        blocks.append(block)
        i = j + 1
    return blocks


def pages() -> list[Path]:
    return sorted(DOCS.glob("*.md")) + [README]


def runnable(path: Path) -> list[Block]:
    blocks = [b for b in parse_blocks(path) if not b.lang.startswith("{")]
    if path == README:
        blocks = blocks[1:]  # the demo and scripts/test.sh: run by CI and by hand, not here
    return blocks


def block_needs(block: Block) -> list[str]:
    """Optional packages the block needs (top-level imports; commands it runs)."""
    needs = []
    if block.lang == "python":
        try:
            tree = ast.parse(block.code)
        except SyntaxError:
            return []  # reported when the block runs
        for node in tree.body:
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            needs += [n.split(".")[0] for n in names if n.split(".")[0] in OPTIONAL_MODULES]
            # kffi.cuda's compiler is NVRTC, an optional library (the nvidia-cuda-nvrtc wheel).
            needs += ["nvrtc"] if any(n.startswith("kffi.cuda") for n in names) else []
    elif block.lang == "bash":
        needs += [pkg for cmd, pkg in OPTIONAL_COMMANDS.items() if cmd in block.code]
    return needs


def nvrtc_present() -> bool:
    """kffi.cuda finds NVRTC (it loads the library only when asked)."""
    try:
        from kffi.cuda import _nvrtc

        _nvrtc.nvrtc_library()
    except (ImportError, RuntimeError, OSError):
        return False
    return True


def cuda_gpu_present() -> bool:
    """A CUDA device is usable (asks the driver; imports no framework)."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    count = ctypes.c_int(0)
    if cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return False
    return count.value > 0


def kffi_config_dir(tmp: Path) -> Path:
    """A folder holding a `kffi-config` of the kffi this interpreter imports (another one may
    come first on PATH)."""
    shim = tmp / "bin" / "kffi-config"
    shim.parent.mkdir(parents=True, exist_ok=True)
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m kffi.config "$@"\n')
    shim.chmod(0o755)
    return shim.parent


# ---- the page process ---------------------------------------------------------------------------
# Runs in a fresh interpreter (python -c), so that pages cannot see each other's state or the test
# process's (loaded libraries, imported modules).

PAGE_RUNNER = r"""
import json, os, subprocess, sys, traceback

blocks, gpu, missing = json.load(open(sys.argv[1]))
import types
# A real module, so that tools which import a function's module by name (dynamo) find it.
page_module = types.ModuleType("__docs__")
sys.modules["__docs__"] = page_module
namespace = page_module.__dict__
sys.path.insert(0, os.getcwd())
ran = 0
# The page's Python as a source file (by line), so that tools reading a function's source find it
# as they would in the user's file (inspect.getsource: Triton's @jit, torch.compile's messages).
import linecache
page_lines = {}
for b in blocks:
    if b["lang"] == "python" and not b["file"]:
        lines = page_lines.setdefault(b["page"], [])
        code = b["code"].splitlines(True)
        lines.extend(["\n"] * max(0, b["line"] - 1 + len(code) - len(lines)))
        lines[b["line"] - 1 : b["line"] - 1 + len(code)] = code
for page, lines in page_lines.items():
    linecache.cache[page] = (sum(map(len, lines)), None, lines, page)

def config(flag):
    out = subprocess.run(["kffi-config", flag], check=True, capture_output=True, text=True)
    return out.stdout.split()

for b in blocks:
    where = f"{b['page']}:{b['line']}"
    needs = [m for m in b["needs"] if m in missing]
    if "gpu" in b["tags"] and not gpu:
        continue
    if needs:
        print(f"SKIP: ran {ran} blocks; the {b['lang']} block at {where} needs {', '.join(needs)}")
        sys.exit(77)
    sys.stdout.flush()
    if b["file"]:
        os.makedirs(os.path.dirname(b["file"]) or ".", exist_ok=True)
        with open(b["file"], "w") as f:
            f.write(b["code"])
    elif b["lang"] == "python":
        code = compile("\n" * (b["line"] - 1) + b["code"], b["page"], "exec")
        try:
            exec(code, namespace)
        except BaseException:
            traceback.print_exc()
            print(f"FAILED: the python block at {where}")
            sys.exit(1)
    elif b["lang"] == "bash":
        if subprocess.run(["bash", "-euo", "pipefail", "-c", b["code"]]).returncode != 0:
            print(f"FAILED: the bash block at {where}")
            sys.exit(1)
    elif b["lang"] in ("cpp", "c"):
        src = f"_block_{b['line']}.{'cc' if b['lang'] == 'cpp' else 'c'}"
        with open(src, "w") as f:
            f.write(b["code"])
        if b["lang"] == "cpp":
            cmd = [os.environ.get("CXX", "c++"), *config("--cxxflags"), "-c", src, "-o", src + ".o"]
        else:
            cmd = [os.environ.get("CC", "cc"), "-std=c99", *config("--cflags"), "-c", src, "-o", src + ".o"]
        if subprocess.run(cmd).returncode != 0:
            print(f"FAILED: the {b['lang']} block at {where} does not compile alone: {' '.join(cmd)}")
            sys.exit(1)
    ran += 1
print(f"ran {ran} blocks")
"""


def run_page(path: Path, tmp: Path) -> subprocess.CompletedProcess:
    blocks = [b for b in runnable(path) if b.lang not in SHOWN_LANGS]
    missing = sorted(m for m in OPTIONAL_MODULES if importlib.util.find_spec(m) is None)
    if not nvrtc_present():
        missing.append("nvrtc")
    spec = [dict(asdict(b), needs=block_needs(b)) for b in blocks]
    work = tmp / "page"
    work.mkdir()
    if path == README:  # the README's commands run from the repository root
        (work / "examples").symlink_to(REPO / "examples")
    (tmp / "blocks.json").write_text(json.dumps([spec, cuda_gpu_present(), missing]))
    env = dict(os.environ)
    env["KFFI_REPO"] = str(REPO)
    env["PATH"] = f"{kffi_config_dir(tmp)}{os.pathsep}{env.get('PATH', '')}"
    env.pop("PYTHONPATH", None)
    return subprocess.run(
        [sys.executable, "-c", PAGE_RUNNER, str(tmp / "blocks.json")],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_page_runs(page, tmp_path):
    proc = run_page(page, tmp_path)
    out = proc.stdout + proc.stderr
    if proc.returncode == SKIP_EXIT:
        pytest.skip(proc.stdout.strip().splitlines()[-1])
    assert proc.returncode == 0, out[-12000:]


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_blocks_follow_the_convention(page):
    for b in runnable(page):
        where = f"{b.page}:{b.line}"
        known = RUN_LANGS | SHOWN_LANGS | FILE_ONLY_LANGS
        assert b.lang in known, f"{where}: unknown block language {b.lang!r} (one of {known})"
        assert set(b.tags) <= TAGS, f"{where}: unknown tags {b.tags} (known: {TAGS}, file=NAME)"
        if b.lang in FILE_ONLY_LANGS:
            assert b.file, f"{where}: a {b.lang} block needs file=NAME"
        if b.file:
            assert not os.path.isabs(b.file) and ".." not in Path(b.file).parts, where
        if "gpu" in b.tags:
            assert b.lang == "python", f"{where}: only python blocks take `gpu`"


def test_docs_pages_are_found():
    names = {p.name for p in pages()}
    assert {"index.md", "quickstart.md", "kernel_library.md", "contracts.md", "jax.md"} <= names
    assert "README.md" in names


# ---- quotes of examples/ ------------------------------------------------------------------------

QUOTE = re.compile(r"^\s*(?://|#) (examples/[\w./-]+?)(?=[: ]|$)")
ELISION = re.compile(r"^\s*(?://|#) \.\.\.$")


def quoted_blocks():
    out = []
    for page in pages():
        for b in parse_blocks(page):
            m = QUOTE.match(b.code.splitlines()[0]) if b.code.strip() else None
            if m:
                out.append((b, m.group(1)))
    return out


def test_quotes_of_examples_are_verbatim():
    quotes = quoted_blocks()
    assert any(b.page == "README.md" for b, _ in quotes), "the README quotes examples/"
    for b, rel in quotes:
        source = (REPO / rel).read_text()
        lines = b.code.splitlines()
        # The first line names the file; it is the file's own first line, or a label.
        if source.splitlines()[0] != lines[0]:
            lines = lines[1:]
        pieces, piece = [], []
        for line in lines:
            if ELISION.match(line):
                pieces.append(piece)
                piece = []
            else:
                piece.append(line)
        pieces.append(piece)
        at = 0
        for piece in pieces:
            text = "\n".join(piece).strip("\n")
            if not text:
                continue
            found = source.find(text, at)
            assert found >= 0, f"{b.page}:{b.line}: not a quote of {rel}:\n{text}"
            at = found + len(text)


# ---- the contract message catalogue ---------------------------------------------------------------

# Where contract messages are built: the inline check's headers and the runtime's contract sources.
CONTRACT_SOURCES = sorted((REPO / "include" / "kffi").glob("contract*.h")) + sorted(
    (REPO / "src" / "contract").glob("contract*.*")
)
CATALOGUE = DOCS / "contracts.md"
# Messages the code can emit only through a bug in kffi (with why), so the page does not show them.
NOT_SHOWN = {
    "malformed expression": "the parser never builds a malformed RPN (contract.h EvalRpn)",
    # The shape evaluator (kffi.contract._abstract.eval_shape_rpn) on metadata a library could forge.
    ": shape_rpn must be a list of tokens, got ": "the parser writes lists",
    ": expression has ": "the parser writes short expressions (at most 1024 tokens)",
    " needs two operands in ": "the parser never builds a malformed RPN",
    ": operator 'neg' needs an operand in ": "the same",
    " values instead of one": "the same",
    ": cannot read token ": "the same",
    "The contract check of `": "'no check explains why': fast and explaining runs disagree (a bug)",
    "the contract is too large": "65536 dimensions or dtypes: the 64 KiB limit on the text comes first",
    # The contract C API (c_api.h) refuses misuse that kffi's own headers never commit.
    "KFFIContractCheckSignature: invalid parameter types": "C API misuse (a NULL type list)",
    "KFFIContractExpandArgs: frames and out must not be NULL": "C API misuse",
    "KFFIContractExplain: args is NULL or num_args is negative": "C API misuse",
    "KFFIContractGetOutputShape: values must not be NULL": "C API misuse",
    "KFFIContractGetText: index ": "C API misuse (an index past the contract's texts)",
    "KFFIContractGetText: unknown text ": "C API misuse (a text kind c_api.h does not name)",
    "kffi.compile needs KFFI_EXPORT_CONTRACT (kffi/contract_export.h), which this kffi installation "
    "does not have": "installations older than contracts",
}


def _cpp_literal(text: str) -> str:
    return bytes(text, "utf-8").decode("unicode_escape")


def cpp_contract_messages() -> set[str]:
    """The fixed text of each message the contract code builds (its longest literal)."""
    call = re.compile(
        r"(?:SyntaxError\{[^,{}]*,|\bFail\(|\bfail\(|ExpectName\(|ParseInt\([a-z]+,|"
        r"KFFI_THROW\(\w+\)\s*<<|Error\(\"\w+\",|DepthGuard\s+guard\([^\"]*)\s*"
        r"((?:(?:std::string\()?\"(?:[^\"\\]|\\.)*\"\)?\s*)+)"
    )
    literal = re.compile(r"\"((?:[^\"\\]|\\.)*)\"")
    found = set()
    for path in CONTRACT_SOURCES:
        text = path.read_text()
        for m in call.finditer(text):
            parts = [_cpp_literal(s) for s in literal.findall(m.group(1))]
            best = max(parts, key=len)
            if len(best.strip()) >= 6:
                found.add(best)
    return found


def python_contract_messages() -> set[str]:
    """The longest fixed piece of each message python/kffi/contract/ raises (_fakes.py, _render.py,
    _compile.py), and those of the shape evaluator it re-exports (kffi.contract._abstract.eval_shape_rpn, whose messages
    _core's PyRpnDomain builds in python/src/py_shape_rpn.cc)."""
    contract = REPO / "python" / "kffi" / "contract"
    trees = [
        ast.parse((contract / f).read_text()) for f in ("_fakes.py", "_render.py", "_compile.py")
    ]
    found = set()
    for node in (n for tree in trees for n in ast.walk(tree)):
        if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args):
            continue
        arg = node.exc.args[0]
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            parts = [arg.value]
        elif isinstance(arg, ast.JoinedStr):
            parts = [v.value for v in arg.values if isinstance(v, ast.Constant)]
        else:
            continue
        best = max(parts, key=len, default="")
        if len(best.strip()) >= 6:
            found.add(best)
    core = (REPO / "python" / "src" / "py_shape_rpn.cc").read_text()
    start = core.index("class PyRpnDomain")
    region = core[start : core.index("PyMethodDef kShapeRpnMethods", start)]
    literal = re.compile(r"\"((?:[^\"\\]|\\.)*)\"")
    evaluator = set()
    for m in re.finditer(r"\bFail\(", region):
        statement = region[m.end() : region.index(";", m.end())]
        parts = [_cpp_literal(s) for s in literal.findall(statement)]
        best = max(parts, key=len, default="")
        if len(best.strip()) >= 6:
            evaluator.add(best)
    assert len(evaluator) >= 8, f"py_shape_rpn.cc's PyRpnDomain has no messages: {evaluator}"
    return found | evaluator


def runtime_checks() -> list[str]:
    """The check kinds of contract/plan.h (enum class Check), kNone left out."""
    text = (REPO / "include" / "kffi" / "contract" / "plan.h").read_text()
    body = re.search(r"enum class Check : \w+ \{(.*?)\};", text, re.DOTALL).group(1)
    names = re.findall(r"^\s*k(\w+),", body, re.MULTILINE)
    return [n for n in names if n != "None"]


def test_catalogue_finds_the_messages():
    # The scanners see the messages they must see (guards against a regex that finds nothing).
    cpp, py = cpp_contract_messages(), python_contract_messages()
    assert "unknown dtype `" in cpp and "duplicate parameter `" in cpp and len(cpp) >= 40
    assert "kffi.sym_int: width must be 32 or 64, got " in py and len(py) >= 30
    assert {"Count", "Type", "Writable", "Dtype", "Shape", "Range"} <= set(runtime_checks())


def test_catalogue_shows_every_message():
    # The page's code splits long messages into adjacent string literals: join them.
    page = re.sub(r'"\s*\n\s*"', "", CATALOGUE.read_text())
    missing = sorted(
        m
        for m in cpp_contract_messages() | python_contract_messages()
        if m not in NOT_SHOWN and m not in page
    )
    assert not missing, "docs/contracts.md does not show these messages:\n" + "\n".join(missing)
    stale = set(NOT_SHOWN) - cpp_contract_messages() - python_contract_messages()
    assert not stale, f"NOT_SHOWN names messages the code no longer has: {stale}"
    # Each runtime check kind has a row in the catalogue table: "| <kind> |".
    rows = set(re.findall(r"^\| `(\w+)` \|", page, re.MULTILINE))
    kinds = {k.lower() for k in runtime_checks()}
    assert kinds <= rows, f"check kinds without a catalogue row: {sorted(kinds - rows)}"


# ---- examples the docs point to ------------------------------------------------------------------


def _run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=900, **kw)


def test_the_package_docstring_example_runs(tmp_path):
    """help(kffi) shows the README's scale(y, x, factor); its example runs as written."""
    import kffi

    doc = kffi.__doc__
    lines = doc[doc.index("::\n") + 3 :].strip("\n").splitlines()
    block = itertools.takewhile(lambda line: not line or line.startswith("    "), lines)
    code = textwrap.dedent("\n".join(block))
    assert "mod.scale(y, x, 2.0)" in code
    env = dict(os.environ, PATH=f"{kffi_config_dir(tmp_path)}{os.pathsep}{os.environ['PATH']}")
    build = _run(
        ["make", "-s", "-C", str(REPO / "examples" / "kernel_library"), f"OUT={tmp_path}", "NVCC="],
        env=env,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    code = code.replace("help(mod.scale)", "assert mod.scale.__doc__")
    code += "\nassert y.tolist() == [0.0, 2.0, 4.0, 6.0]\n"
    proc = _run([sys.executable, "-c", code], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_python_demo_runs(tmp_path):
    """examples/python_demo.py, which examples/demo.sh runs, on the example library."""
    env = dict(os.environ, PATH=f"{kffi_config_dir(tmp_path)}{os.pathsep}{os.environ['PATH']}")
    build = _run(
        ["make", "-s", "-C", str(REPO / "examples" / "kernel_library"), f"OUT={tmp_path}", "NVCC="],
        env=env,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    proc = _run(
        [
            sys.executable,
            str(REPO / "examples" / "python_demo.py"),
            str(tmp_path / "libscale_cpu.so"),
        ]
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "signature: scale(y: Tensor(mut), x: Tensor, factor: float) -> None" in out
    assert "scale([0.0, 1.0, 2.0, 3.0, 4.0, 5.0], 2.5) -> [0.0, 2.5, 5.0, 7.5, 10.0, 12.5]" in out
    assert "expected n0 divisible by 16, got 30" in out
    assert re.search(r"read-only out +ValueError: .*y", out), out  # CheckWritable names y
    assert re.search(r"kffi scale, 2 NumPy arrays of 6 +\d+ ns", out)


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed")
def test_jax_example_runs():
    proc = _run([sys.executable, str(REPO / "examples" / "jax" / "jax_demo.py")])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "d/dx sum(square(x))   [-4. -2.  0.  2.  4.]" in proc.stdout
    assert proc.stdout.rstrip().endswith("ok")


@pytest.mark.skipif(importlib.util.find_spec("tvm_ffi") is None, reason="apache-tvm-ffi is missing")
def test_tvm_ffi_example_runs(tmp_path):
    proc = _run([sys.executable, str(REPO / "examples" / "tvm_ffi" / "run.py"), str(tmp_path)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "scale: [0.0, 2.5, 5.0, 7.5, 10.0]"
    assert lines[1] == "signature: scale(arg0: Tensor, arg1: Tensor, arg2: float) -> None"
    assert lines[2].startswith("TypeError: ") and "x must be float32, got float64" in lines[2]
    assert lines[3] == "apache-tvm-ffi loaded: False"


def _run_fake_page(tmp_path, text, missing=()):
    fake = tmp_path / "docs" / "x.md"
    fake.parent.mkdir(exist_ok=True)
    fake.write_text(textwrap.dedent(text))
    blocks = parse_blocks(fake, tmp_path)
    spec = [dict(asdict(b), needs=block_needs(b)) for b in blocks]
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (tmp_path / "b.json").write_text(json.dumps([spec, False, list(missing)]))
    env = dict(os.environ, KFFI_REPO=str(REPO))
    env["PATH"] = f"{kffi_config_dir(tmp_path)}{os.pathsep}{env['PATH']}"
    proc = _run([sys.executable, "-c", PAGE_RUNNER, str(tmp_path / "b.json")], cwd=work, env=env)
    return blocks, proc


def test_runner_reports_the_failing_block(tmp_path):
    """Blocks share a namespace and a folder; a failing block names its line; later ones don't run."""
    blocks, proc = _run_fake_page(
        tmp_path,
        """\
        # x
        ```python
        a = 1
        ```
        ```bash
        test -f "$KFFI_REPO/README.md"; kffi-config --version > version.txt
        ```
        ```python gpu
        raise SystemExit("a gpu block, skipped without a GPU")
        ```
        ```python
        assert open("version.txt").read().strip() == __import__("kffi").__version__
        assert a == 2, "the second block sees the first one's names"
        ```
        ```python
        raise SystemExit("not reached")
        ```
        """,
    )
    assert [b.line for b in blocks] == [3, 6, 9, 12, 16]
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAILED: the python block at docs/x.md:12" in proc.stdout
    assert 'File "docs/x.md", line 13' in proc.stderr
    assert "the second block sees the first one's names" in proc.stderr
    assert "not reached" not in proc.stdout + proc.stderr
    assert "skipped without a GPU" not in proc.stdout + proc.stderr


def test_runner_stops_at_a_missing_package(tmp_path):
    _, proc = _run_fake_page(
        tmp_path,
        """\
        ```python
        x = 1
        ```
        ```python
        import torch
        ```
        ```cpp
        #error not reached
        ```
        """,
        missing=["torch"],
    )
    assert proc.returncode == SKIP_EXIT, proc.stdout + proc.stderr
    assert "SKIP: ran 1 blocks; the python block at docs/x.md:5 needs torch" in proc.stdout


def test_runner_compiles_cpp_blocks_alone(tmp_path):
    _, proc = _run_fake_page(
        tmp_path,
        """\
        ```cpp
        #include <kffi/kffi.h>
        int f(int a) { return a + 1; }
        KFFI_EXPORT(f, f);
        ```
        ```cpp
        int g() { return undefined_name; }
        ```
        """,
    )
    assert proc.returncode == 1
    assert "FAILED: the cpp block at docs/x.md:7 does not compile alone" in proc.stdout
    assert "undefined_name" in proc.stderr
