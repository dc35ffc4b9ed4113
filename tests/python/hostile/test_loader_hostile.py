"""tests/python/hostile/test_loader_hostile.py: kffi.load_module opens only what it should (issue
15)."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import os
import resource
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import kffi
import pytest
from conftest import REPO, LibraryBuilder

LOADER_LIBS = REPO / "tests" / "loader_libs"


@pytest.fixture(scope="module")
def loader_libs() -> dict[str, Path]:
    return LibraryBuilder().build_all({p.stem: p for p in LOADER_LIBS.glob("*.cc")})


def _elf_with_tables(dynsym_size: int, strtab_size: int) -> bytes:
    """A 15 KB ELF64 shared object whose section headers claim tables far past its end."""
    f = bytearray(15 * 1024)
    f[0:8] = b"\x7fELF\x02\x01\x01\x00"
    machine = {"x86_64": 62, "aarch64": 183}.get(os.uname().machine, 62)
    struct.pack_into("<HHI", f, 16, 3, machine, 1)
    struct.pack_into("<Q", f, 40, 1024)  # e_shoff
    struct.pack_into("<H", f, 52, 64)  # e_ehsize
    struct.pack_into("<HH", f, 58, 64, 3)  # e_shentsize, e_shnum
    struct.pack_into("<IIQQQQIIQQ", f, 1024 + 64, 0, 11, 0, 0, 4096, dynsym_size, 2, 0, 8, 24)
    struct.pack_into("<IIQQQQIIQQ", f, 1024 + 128, 0, 3, 0, 0, 8192, strtab_size, 0, 0, 1, 0)
    return bytes(f)


def test_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "pipe.so"
    os.mkfifo(fifo)
    code = textwrap.dedent(f"""
        import kffi
        try:
            kffi.load_module({str(fifo)!r})
        except RuntimeError as e:
            print(e)
    """)
    # A loader that opens the FIFO blocks until a writer comes: the timeout turns that into a
    # failure instead of a hung test run.
    proc = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == (
        f"Cannot load module `{fifo}`: not a loadable shared library: "
        "it is a FIFO (named pipe), not a regular file"
    )


def test_directory_is_refused(tmp_path):
    d = tmp_path / "libdir.so"
    d.mkdir()
    with pytest.raises(RuntimeError, match="it is a directory, not a regular file"):
        kffi.load_module(d)


def test_data_symbols_are_not_functions(loader_libs):
    mod = kffi.load_module(loader_libs["datasym"])
    assert mod.functions() == ["real"]
    assert mod.real(4) == 8
    assert "x" not in mod and "table" not in mod
    with pytest.raises(AttributeError, match="has no function 'x'"):
        getattr(mod, "x")  # noqa: B009 (the attribute access is what is tested)


def test_abi_record_of_unexpected_size_is_refused_before_it_runs(loader_libs):
    path = loader_libs["abi_size"]
    for _ in range(2):
        with pytest.raises(RuntimeError) as info:
            kffi.load_module(path)
        assert str(info.value) == (
            f"Cannot load module `{path}`: its `__kffi__abi_version` "
            "record is 8 bytes, expected 4 (a uint32_t); it was not built "
            "with <kffi/export.h>"
        )
    assert "KFFI_TEST_ABI_SIZE_INITIALISED" not in os.environ


def test_path_with_embedded_nul_is_a_value_error(loader_libs):
    with pytest.raises(ValueError, match="contains a NUL byte"):
        kffi.load_module(str(loader_libs["datasym"]) + "\0.other")


@pytest.mark.parametrize(
    "dynsym,strtab",
    [((500 << 20) // 24 * 24, 64), (240, 500 << 20), ((1 << 62) // 24 * 24, 1 << 62)],
)
def test_huge_tables_in_a_small_file_are_refused_without_allocating(tmp_path, dynsym, strtab):
    path = tmp_path / "huge.so"
    path.write_bytes(_elf_with_tables(dynsym, strtab))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(RuntimeError) as info:
        kffi.load_module(path)
    assert str(info.value).endswith(
        "not a loadable shared library: malformed ELF file: the "
        "dynamic symbol table lies outside the file"
    )
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 64 * 1024  # KiB


def test_truncated_library_is_refused(tmp_path, loader_libs):
    data = Path(loader_libs["datasym"]).read_bytes()
    path = tmp_path / "cut.so"
    path.write_bytes(data[:2048])
    with pytest.raises(RuntimeError, match="malformed ELF file: section headers lie outside"):
        kffi.load_module(path)
