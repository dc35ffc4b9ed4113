"""tests/python/hostile/test_hostile_content.py: content addresses name the content that runs.

What is hashed, what is checked and what is run must be the same bytes:
- kffi.jax's target names hash a library file only while it is the file this process loaded
  code from: a file replaced (or rewritten) after loading is refused, since a blob of the new
  file would have run the old code;
- kffi.cuda.load_cubin refuses two spellings of one arch (`{"sm_90": A, "90": B}` held B in
  `.images` and the digest, and handed the driver A), for every pair of spellings;
- an NVRTC cache bundle carries its own key: a bundle copied under another key's name, with its
  record, is a miss for that key.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

import kffi
import pytest

HERE = Path(__file__).resolve().parent

LIB = r"""
#include <kffi/kffi.h>
int64_t Answer() { return ANSWER; }
KFFI_EXPORT(answer, Answer);
"""


def _build(tmp_path: Path, answer: int) -> Path:
    src = tmp_path / f"answer_{answer}.cc"
    src.write_text(LIB.replace("ANSWER", str(answer)))
    return Path(kffi.cpp.build(f"hostile_content_{answer}", [str(src)], quiet=True))


def test_a_library_replaced_after_loading_names_no_targets(tmp_path):
    pytest.importorskip("jax")
    import kffi.jax

    loaded = tmp_path / "libanswer.so"
    shutil.copy(_build(tmp_path, 1), loaded)
    mod = kffi.load_module(loaded)
    assert mod.answer() == 1
    kffi.jax.register_module(mod)  # the file is the one loaded: fine
    # Replaced by another build (a rename over it, as a deploy does), then rewritten in place.
    other = tmp_path / "other.so"
    shutil.copy(_build(tmp_path, 2), other)
    other.replace(loaded)
    assert mod.answer() == 1  # the code that runs is still the first file's
    for call in (
        lambda: kffi.jax.register_module(mod),
        lambda: kffi.jax.register_module(mod.answer),
    ):
        with pytest.raises(
            RuntimeError, match=r"was replaced or changed after this process loaded"
        ):
            call()


def test_a_library_rewritten_in_place_after_loading_names_no_targets(tmp_path):
    pytest.importorskip("jax")
    import kffi.jax

    loaded = tmp_path / "librewritten.so"
    shutil.copy(_build(tmp_path, 3), loaded)
    mod = kffi.load_module(loaded)
    with open(loaded, "ab") as f:  # same inode, other bytes (appended: the mapped pages stay)
        f.write(b"\0")
    with pytest.raises(RuntimeError, match=r"was replaced or changed after this process loaded"):
        kffi.jax.register_module(mod)


SPELLINGS = {
    "sm_90": ["sm_90", "90", "9.0", "SM_90", " sm_90 ", 90],
    "sm_80": ["sm_80", "80", "8.0"],
}


@pytest.mark.parametrize("arch", sorted(SPELLINGS))
def test_two_spellings_of_one_arch_are_refused(arch):
    import kffi.cuda

    for a, b in itertools.combinations(SPELLINGS[arch], 2):
        with pytest.raises(ValueError, match=rf"both name the arch {arch}; give each arch one"):
            kffi.cuda.load_cubin({a: b"A" * 8, b: b"B" * 8})
    # Different archs stay different.
    both = kffi.cuda.load_cubin({"sm_90": b"A" * 8, "sm_80": b"B" * 8, "sm_90a": b"C" * 8})
    assert both.archs == ["sm_90", "sm_80", "sm_90a"]


def test_an_nvrtc_bundle_under_another_keys_name_is_a_miss(tmp_path, monkeypatch):
    from kffi.cuda import _cache

    monkeypatch.setenv("KFFI_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("KFFI_CUDA_PREBUILT", raising=False)
    _cache.clear_memory_cache()
    made = []

    def compile_as(tag):
        def run():
            made.append(tag)
            return {"images": {"sm_90": tag.encode() * 4}, "lowered": {}, "log": tag}

        return run

    key_a, key_b = "a" * 64, "b" * 64
    res_a, path_a = _cache.lookup_or_compile("k", key_a, compile_as("A"))
    assert res_a["log"] == "A" and made == ["A"]
    # Copy A's bundle and its record under B's file name, as a cache copied by hand would be.
    path_b = Path(path_a).with_name(_cache._file_name("k", key_b))
    shutil.copy(path_a, path_b)
    shutil.copy(path_a + ".sha256", str(path_b) + ".sha256")
    _cache.clear_memory_cache()
    res_b, _ = _cache.lookup_or_compile("k", key_b, compile_as("B"))
    assert res_b["log"] == "B" and made == ["A", "B"]  # compiled: A's bundle is not B's
    _cache.clear_memory_cache()
    again, _ = _cache.lookup_or_compile("k", key_a, compile_as("A2"))
    assert again["log"] == "A" and made == ["A", "B"]  # A's own bundle still serves A
    _cache.clear_memory_cache()
