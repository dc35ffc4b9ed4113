"""tests/python/hostile/test_hostile_symbols.py: kffi calls only code (issue 29, class 1).

Every symbol the loader calls (`__kffi_<f>`, `__tvm_ffi_<f>`, and the metadata symbols
`__kffi__meta_<f>`, `__tvm_ffi__metadata_<f>`, `__tvm_ffi__doc_<f>`) and the one it writes
(`__tvm_ffi__library_ctx`) is generated here in every form a toolchain or a hand can give it: a
function in .text (the control), a function placed in .data or .rodata by a section attribute or
by assembly, an absolute function symbol, an indirect function resolving to code or to data, a
`const char[]`, a `char[]`, an untyped label over a string, a pointer, an integer, zeroed storage
and a thread-local variable. The guard: the ELF reader classifies each symbol from the file
(type and section) before dlopen, so a function symbol outside every executable section refuses
the load naming it, a metadata symbol that is a string is read as that text, and any other data
is an error naming the symbol; and every address kffi calls through passes one check that it
lies in an executable segment (src/core/code_symbol.h), which catches what the dynamic loader
resolved at run time (an indirect function).

Each role loads its libraries in a fresh process with a timeout: before the guard, reading the
metadata of `g` called a `const char[]` (SIGSEGV), and an export placed in .data was listed and
called.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

# Loads each library given and reports what kffi makes of it: the load, its functions, f(3),
# g(3) and the metadata of g, each ["ok", value] or [exception type, message].
_PROBE = textwrap.dedent("""
    import json, sys
    import kffi

    def attempt(fn):
        try:
            return ["ok", fn()]
        except Exception as e:
            return [type(e).__name__, str(e)]

    def call(mod, name):
        f = mod.get_function(name)
        return None if f is None else f(3)

    out = {}
    for name, path in json.loads(sys.argv[1]):
        loaded = attempt(lambda: kffi.load_module(path))
        if loaded[0] != "ok":
            out[name] = {"load": loaded}
            continue
        mod = loaded[1]
        out[name] = {
            "load": ["ok", None],
            "functions": mod.functions(),
            "f": attempt(lambda: call(mod, "f")),
            "g": attempt(lambda: call(mod, "g")),
            "meta_g": attempt(lambda: mod.metadata("g")),
        }
    print(json.dumps(out))
""")

_HEAD = textwrap.dedent("""
    #include <kffi/c_api.h>
    #include <cstdint>
    #include <cstring>
    #define API extern "C" __attribute__((visibility("default"), used))
    static int Str(const char* s, KFFIAny* r) {
      KFFIByteArray b{s, std::strlen(s)};
      return KFFIStringFromByteArray(&b, r);
    }
    static char kData[16];  // what an indirect function resolves to when it resolves to data
""")

# The good export g (x + 1), in every library.
_GOOD = (
    "API int {p}g(void*, const KFFIAny* a, int32_t, KFFIAny* r) {{\n"
    "  r->type_index = kKFFIInt; r->zero_padding = 0; r->v_int64 = a[0].v_int64 + 1; return 0;\n"
    "}}\n"
)

_KFFI_META = (
    '{{"name": "g", "params": [{{"name": "x", "type": "int"}}], "return": "int", "doc": "{}"}}'
)
_TVM_META = (
    '{{"type_schema": {{"type": "ffi.Function", "args": [{{"type": "int"}}, {{"type": "{}"}}]}}}}'
)

# role -> (export prefix, symbol, body of its code (a safe call), its text as data, extra code).
# The code form of each metadata role says "code" where the data form says "data".
ROLES = {
    "kffi_export": (
        "__kffi_",
        "__kffi_f",
        "r->type_index = kKFFIInt; r->zero_padding = 0; r->v_int64 = a[0].v_int64 * 10; return 0;",
        "not code",
        "",
    ),
    "kffi_meta": (
        "__kffi_",
        "__kffi__meta_g",
        '(void)a; return Str(R"({})", r);'.format(_KFFI_META.format("from code")),
        _KFFI_META.format("from data"),
        "",
    ),
    "tvm_export": (
        "__tvm_ffi_",
        "__tvm_ffi_f",
        "r->type_index = kKFFIInt; r->zero_padding = 0; r->v_int64 = a[0].v_int64 * 10; return 0;",
        "not code",
        "",
    ),
    "tvm_metadata": (
        "__tvm_ffi_",
        "__tvm_ffi__metadata_g",
        '(void)a; return Str(R"({})", r);'.format(_TVM_META.format("int")),
        _TVM_META.format("float"),
        "",
    ),
    "tvm_doc": (
        "__tvm_ffi_",
        "__tvm_ffi__doc_g",
        '(void)a; return Str("from code", r);',
        "from data",
        # A doc only shows with a signature: g always has one (in code).
        "API int __tvm_ffi__metadata_g(void*, const KFFIAny*, int32_t, KFFIAny* r) {\n"
        '  return Str(R"(' + _TVM_META.format("int") + ')", r);\n}\n',
    ),
}

_SIG = "(void*, const KFFIAny* a, int32_t, KFFIAny* r)"


def _asm_bytes(text: str) -> str:
    return ",".join(str(b) for b in text.encode() + b"\0")


def _form(form: str, sym: str, body: str, text: str) -> str:
    """The C++ defining sym in that form."""
    if form == "text":
        return f"API int {sym}{_SIG} {{ {body} }}\n"
    if form == "data_func":  # the assembler keeps .data writable and not executable
        return f'API __attribute__((section(".data"))) int {sym}{_SIG} {{ {body} }}\n'
    if form == "rodata_func":  # gcc marks the section executable ("ax"): this is code
        return f'API __attribute__((section(".rodata"))) int {sym}{_SIG} {{ {body} }}\n'
    if form in ("asm_func_data", "asm_func_rodata"):
        section = '.data, \\"aw\\"' if form == "asm_func_data" else '.rodata, \\"a\\"'
        return (
            f'asm(".pushsection {section}\\n.globl {sym}\\n.type {sym},@function\\n{sym}:\\n'
            f'.byte 0xc3,0,0,0,0,0,0,0\\n.size {sym},8\\n.popsection\\n");\n'
        )
    if form == "absolute":
        return f'asm(".globl {sym}\\n.type {sym},@function\\n.set {sym}, 0x40\\n");\n'
    if form in ("ifunc_code", "ifunc_data"):
        target = f"(void*)&{sym}_impl" if form == "ifunc_code" else "(void*)kData"
        return (
            f"static int {sym}_impl{_SIG} {{ {body} }}\n"
            f'extern "C" void* {sym}_resolve() {{ (void)&{sym}_impl; return {target}; }}\n'
            f'API int {sym}{_SIG} __attribute__((ifunc("{sym}_resolve")));\n'
        )
    if form == "const_char":
        return f'API const char {sym}[] = R"({text})";\n'
    if form == "char_data":
        return f'API char {sym}[] = R"({text})";\n'
    if form == "notype_data":  # an assembly label without .type, over a NUL-terminated string
        return (
            f'asm(".pushsection .data\\n.globl {sym}\\n{sym}:\\n.byte {_asm_bytes(text)}\\n'
            f'.size {sym},{len(text.encode()) + 1}\\n.popsection\\n");\n'
        )
    if form == "pointer":
        return f'API const char* const {sym} = R"({text})";\n'
    if form == "integer":
        return f"API const int64_t {sym} = 5;\n"
    if form == "zeroed":
        return f"API char {sym}[16] = {{}};\n"
    if form == "thread_local":
        return f'API __thread char {sym}[8] = "abc";\n'
    raise AssertionError(form)


FORMS = [
    "text",
    "data_func",
    "rodata_func",
    "asm_func_data",
    "asm_func_rodata",
    "absolute",
    "ifunc_code",
    "ifunc_data",
    "const_char",
    "char_data",
    "notype_data",
    "pointer",
    "integer",
    "zeroed",
    "thread_local",
]
CODE_FORMS = {"text", "rodata_func", "ifunc_code"}
MISPLACED = {  # form -> where the refusal says the function symbol lies
    "data_func": "in section `.data`, which is not executable",
    "asm_func_data": "in section `.data`, which is not executable",
    "asm_func_rodata": "in section `.rodata`, which is not executable",
    "absolute": "in no section (an absolute address)",
}
TEXT_FORMS = {"const_char", "char_data", "notype_data"}
NOT_TEXT = {  # form -> what the metadata error says the symbol is
    "pointer": "a data object (STT_OBJECT) in section `.data.rel.ro`: its 8 bytes are not a "
    "NUL-terminated string",
    "integer": "a data object (STT_OBJECT) in section `.rodata`: its 8 bytes are not a "
    "NUL-terminated string",
    "zeroed": "a data object (STT_OBJECT) in section `.bss`: its 16 bytes are not a "
    "NUL-terminated string",
    "thread_local": "a thread-local variable (STT_TLS) in section `.tdata`, neither code nor a "
    "string",
}
assert set(FORMS) == CODE_FORMS | set(MISPLACED) | TEXT_FORMS | set(NOT_TEXT) | {"ifunc_data"}


def _kffi_flags() -> list:
    out = subprocess.run(
        [sys.executable, "-m", "kffi.config", "--cxxflags", "--ldflags", "--libs"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return out.split()


def _compile(args) -> None:
    src, out, flags = args
    cmd = ["c++", "-shared", "-O1", "-w", str(src), "-o", str(out), *flags]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stderr}"


def _build(d: Path, sources: dict) -> dict:
    flags = _kffi_flags()
    jobs = []
    for name, code in sources.items():
        src = d / f"{name}.cc"
        src.write_text(_HEAD + code)
        jobs.append((src, d / f"lib{name}.so", flags))
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        list(pool.map(_compile, jobs))
    return {name: str(d / f"lib{name}.so") for name in sources}


def _probe(libs: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "KFFI_TVM_RUNTIME"}
    env["KFFI_TVM_RUNTIME"] = "shim"  # no apache-tvm-ffi needed: the shim runs TVM-FFI exports
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(list(libs.items()))],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    # Before the guard, calling data ended the process (SIGSEGV): the probe must exit cleanly.
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[-3000:]}"
    return json.loads(proc.stdout)


@pytest.mark.parametrize("role", list(ROLES))
def test_every_form_of_every_symbol_kffi_calls(role, tmp_path):
    prefix, sym, body, text, extra = ROLES[role]
    good = _GOOD.format(p=prefix)
    libs = _build(tmp_path, {form: good + extra + _form(form, sym, body, text) for form in FORMS})
    results = _probe(libs)
    is_meta = "_export" not in role
    for form in FORMS:
        r, path = results[form], libs[form]
        where = f"{role}/{form}: {r}"
        if form in MISPLACED:
            # Refused before dlopen, naming the symbol and where it lies.
            assert r["load"][0] == "RuntimeError", where
            assert r["load"][1] == (
                f"Cannot load module `{path}`: `{sym}` is a function (STT_FUNC) "
                f"{MISPLACED[form]}. kffi calls only code in executable sections, and this "
                "library says otherwise"
            ), where
            continue
        assert r["load"] == ["ok", None], where
        if not is_meta:
            assert r["g"] == ["ok", 4], where
            if form in CODE_FORMS:
                assert r["functions"] == ["f", "g"] and r["f"] == ["ok", 30], where
            elif form == "ifunc_data":
                # Listed (the file says code), refused at lookup: it resolved to data.
                assert r["functions"] == ["f", "g"], where
                assert r["f"][0] == "RuntimeError", where
                assert r["f"][1].startswith(
                    f"Cannot use module `{path}`: the symbol `{sym}` resolves to 0x"
                ), where
                assert r["f"][1].endswith(
                    f", in a segment of `{path}` that is not executable: it is not code, and "
                    "kffi calls only code"
                ), where
            else:  # data named like an export is not a function
                assert r["functions"] == ["g"] and r["f"] == ["ok", None], where
            continue
        # A metadata role: g itself is always fine; what its metadata reads depends on the form.
        assert r["functions"] == ["g"], where
        if form in CODE_FORMS or form in TEXT_FORMS:
            assert r["g"] == ["ok", 4], where
            meta = r["meta_g"]
            assert meta[0] == "ok", where
            said = "code" if form in CODE_FORMS else "data"
            if role == "tvm_metadata":
                assert [p["type"] for p in meta[1]["params"]] == [
                    "int" if said == "code" else "float"
                ], where
            else:
                assert meta[1]["doc"] == f"from {said}", where
            continue
        if form == "ifunc_data":
            expected = (
                f"Cannot use module `{path}`: the symbol `{sym}` resolves to 0x",
                f", in a segment of `{path}` that is not executable: it is not code, and kffi "
                "calls only code",
            )
        else:
            expected = (
                f"The metadata symbol `{sym}` of `{path}` cannot be read: it is {NOT_TEXT[form]}",
                "",
            )
        # Read through mod.metadata and through a lookup (which reads it for the signature).
        for got in (r["meta_g"], r["g"]):
            assert got[0] == "RuntimeError", where
            assert got[1].startswith(expected[0]) and got[1].endswith(expected[1]), where


# __tvm_ffi__library_ctx: form -> what the refusal says it is (None: a writable pointer, kept).
CTX_FORMS = {
    "writable": ("API void* __tvm_ffi__library_ctx = nullptr;\n", None),
    "zeroed_array": ("API void* __tvm_ffi__library_ctx[2] = {};\n", None),
    "const": (
        "API void* const __tvm_ffi__library_ctx = nullptr;\n",
        "a data object (STT_OBJECT) in section `.rodata`, which is not writable",
    ),
    "relro": (
        "API void* const __tvm_ffi__library_ctx = (void*)&kData;\n",
        "a data object (STT_OBJECT) in section `.data.rel.ro`, which is read-only once "
        "relocated (PT_GNU_RELRO)",
    ),
    "function": (
        "API int __tvm_ffi__library_ctx() { return 0; }\n",
        "a function (STT_FUNC) in section `.text`",
    ),
    "too_small": (
        "API char __tvm_ffi__library_ctx[4] = {};\n",
        "a data object (STT_OBJECT) in section `.bss` of 4 bytes, not an aligned pointer-sized "
        "variable",
    ),
    "thread_local": (
        "API __thread void* __tvm_ffi__library_ctx = nullptr;\n",
        "a thread-local variable (STT_TLS) in section `.tbss`",
    ),
}


def test_every_form_of_the_symbol_kffi_writes(tmp_path):
    """`__tvm_ffi__library_ctx` is written by the loader (bound to kffi's shim): anything but a
    writable pointer variable is refused before dlopen (before the guard, a read-only one ended
    the process with SIGSEGV)."""
    good = _GOOD.format(p="__tvm_ffi_")
    libs = _build(tmp_path, {form: good + code for form, (code, _) in CTX_FORMS.items()})
    results = _probe(libs)
    for form, (_, what) in CTX_FORMS.items():
        r, where = results[form], f"{form}: {results[form]}"
        if what is None:
            assert r["load"] == ["ok", None] and r["g"] == ["ok", 4], where
            continue
        assert r["load"] == [
            "RuntimeError",
            f"Cannot load module `{libs[form]}`: its `__tvm_ffi__library_ctx` is {what}; the "
            "loader stores the library's context there, so it must be a writable pointer "
            "variable",
        ], where
