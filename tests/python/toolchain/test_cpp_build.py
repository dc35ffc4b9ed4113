"""tests/python/toolchain/test_cpp_build.py: kffi.cpp.build / load_inline: JIT builds, the on-disk
cache, locking between processes, compiler errors and CUDA sources."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import kffi
import kffi.cpp
import numpy as np
import pytest

SCALE_SRC = r"""
#include <cstdint>
double add(double a, double b) { return a + b; }
int64_t value() { return VALUE; }
void scale(kffi::TensorView y, kffi::ConstTensorView x, double factor) {
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) yp[i] = static_cast<float>(xp[i] * factor);
}
"""


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """A private build cache (KFFI_CACHE_DIR) for the test."""
    root = tmp_path / "cache"
    monkeypatch.setenv("KFFI_CACHE_DIR", str(root))
    monkeypatch.delenv("KFFI_BUILD_QUIET", raising=False)
    return root


@pytest.fixture
def counting_cxx(tmp_path, monkeypatch) -> Path:
    """CXX set to a wrapper that appends each invocation's arguments to a log, then runs c++."""
    real = os.environ.get("CXX") or "c++"
    log = tmp_path / "cxx.log"
    wrapper = tmp_path / "bin" / "counting-c++"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\necho "$*" >> "{log}"\nexec {real} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("CXX", str(wrapper))
    log.touch()
    return log


def _compiles(log: Path) -> list[str]:
    """Compile (-c) invocations in the wrapper's log."""
    return [line for line in log.read_text().splitlines() if " -c " in f" {line} "]


def _run_child(code: str, **env) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **{k: str(v) for k, v in env.items()}}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_load_inline_exports_listed_functions_and_calls_them(cache):
    mod = kffi.cpp.load_inline(
        "scale_lib",
        cpp_sources=SCALE_SRC,
        functions=["add", "scale", "value"],
        extra_cflags=["-DVALUE=7"],
    )
    assert isinstance(mod, kffi.Module)
    assert sorted(mod.functions()) == ["add", "scale", "value"]
    assert mod.add(1.5, 2.0) == 3.5
    assert mod.value() == 7
    x = np.arange(5, dtype=np.float32)
    y = np.zeros_like(x)
    mod.scale(y, x, 3.0)
    np.testing.assert_array_equal(y, x * 3)


def test_load_inline_functions_dict_gives_docstrings(cache):
    mod = kffi.cpp.load_inline(
        "doc_lib",
        cpp_sources=SCALE_SRC,
        functions={"add": "Returns a + b.", "value": ""},
        extra_cflags=["-DVALUE=1"],
    )
    assert mod.metadata("add")["doc"] == "Returns a + b."
    assert "Returns a + b." in mod.add.__doc__
    assert mod.value() == 1


def test_load_inline_sources_can_export_themselves(cache):
    src = "int triple(int x) { return 3 * x; }\nKFFI_EXPORT(triple, triple);\n"
    mod = kffi.cpp.load_inline("self_export", cpp_sources=[src])
    assert mod.triple(5) == 15


def test_cache_layout_is_name_and_hash_under_cache_dir(cache):
    kffi.cpp.load_inline("layout_lib", cpp_sources="int one() { return 1; }", functions=["one"])
    dirs = [p for p in cache.iterdir() if not p.name.startswith(".")]
    assert len(dirs) == 1 and dirs[0].name.startswith("layout_lib_")
    digest = dirs[0].name[len("layout_lib_") :]
    assert len(digest) == 16
    assert (dirs[0] / f"layout_lib_{digest}.so").is_file()
    assert (dirs[0] / "layout_lib.cpp").read_text().startswith("int one()")


def test_cache_dir_follows_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("KFFI_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert kffi.cpp.cache_dir() == str(tmp_path / "xdg" / "kffi")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert kffi.cpp.cache_dir() == str(tmp_path / "home" / ".cache" / "kffi")
    monkeypatch.setenv("KFFI_CACHE_DIR", str(tmp_path / "mine"))
    assert kffi.cpp.cache_dir() == str(tmp_path / "mine")


def test_cache_hit_starts_no_compiler_in_this_process(cache, counting_cxx):
    src = "int forty_two() { return 42; }"
    first = kffi.cpp.load_inline("hit_lib", cpp_sources=src, functions=["forty_two"])
    assert first.forty_two() == 42
    assert len(_compiles(counting_cxx)) == 1
    lines_after_build = counting_cxx.read_text()
    invocations = kffi.cpp.get_compiler_invocations()

    start = time.perf_counter()
    again = kffi.cpp.load_inline("hit_lib", cpp_sources=src, functions=["forty_two"])
    elapsed_ms = (time.perf_counter() - start) * 1e3
    print(f"\nin-process cache hit of load_inline: {elapsed_ms:.2f} ms")
    assert again.forty_two() == 42
    assert counting_cxx.read_text() == lines_after_build  # no compiler, not even --version
    assert kffi.cpp.get_compiler_invocations() == invocations


def test_cache_hit_starts_no_compiler_in_a_fresh_process(cache, counting_cxx):
    code = """
        import json, sys, time
        import kffi, kffi.cpp
        start = time.perf_counter()
        mod = kffi.cpp.load_inline("fresh_lib", cpp_sources="int seven() { return 7; }",
                                   functions=["seven"])
        ms = (time.perf_counter() - start) * 1e3
        print(json.dumps({"value": mod.seven(), "ms": ms,
                          "invocations": kffi.cpp.get_compiler_invocations()}))
    """
    built = _run_child(code)
    assert built.returncode == 0, built.stderr
    assert json.loads(built.stdout)["value"] == 7
    assert len(_compiles(counting_cxx)) == 1
    log_after_build = counting_cxx.read_text()

    hit = _run_child(code)
    assert hit.returncode == 0, hit.stderr
    result = json.loads(hit.stdout)
    print(f"\nfresh-process cache hit of load_inline: {result['ms']:.2f} ms")
    assert result == {"value": 7, "ms": result["ms"], "invocations": 0}
    assert counting_cxx.read_text() == log_after_build
    assert "building" not in hit.stderr


def test_changed_flags_or_source_rebuild(cache, counting_cxx):
    src = "int value() { return VALUE; }"
    one = kffi.cpp.load_inline(
        "flags_lib", cpp_sources=src, functions=["value"], extra_cflags=["-DVALUE=1"]
    )
    two = kffi.cpp.load_inline(
        "flags_lib", cpp_sources=src, functions=["value"], extra_cflags=["-DVALUE=2"]
    )
    assert (one.value(), two.value()) == (1, 2)
    assert len(_compiles(counting_cxx)) == 2
    three = kffi.cpp.load_inline(
        "flags_lib",
        cpp_sources=src + "\n",
        functions=["value"],
        extra_cflags=["-DVALUE=3"],
        extra_ldflags=["-Wl,-O1"],
    )
    assert three.value() == 3
    assert len(_compiles(counting_cxx)) == 3
    assert len([p for p in cache.iterdir() if p.name.startswith("flags_lib_")]) == 3


def test_headers_digest_reads_names_and_bytes(tmp_path):
    # The one digest of headers in build keys (kffi's own, kffi.jax's XLA FFI headers): a
    # header's bytes, its name and the set of headers each change it.
    (tmp_path / "a.h").write_text("int a;")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.h").write_text("int b;")
    digest = kffi.cpp._headers_digest
    whole = digest(str(tmp_path))
    assert whole == digest(str(tmp_path), ["a.h", os.path.join("sub", "b.h")])
    assert digest(str(tmp_path), ["a.h"]) != whole
    (tmp_path / "sub" / "b.h").write_text("int b2;")
    assert digest(str(tmp_path)) != whole
    (tmp_path / "c.h").write_text("int a;")
    assert digest(str(tmp_path), ["c.h"]) != digest(str(tmp_path), ["a.h"])
    with pytest.raises(FileNotFoundError):
        digest(str(tmp_path), ["missing.h"])


def test_changed_compiler_rebuilds(cache, counting_cxx, tmp_path, monkeypatch):
    src = "int nine() { return 9; }"
    kffi.cpp.load_inline("compiler_lib", cpp_sources=src, functions=["nine"])
    other = tmp_path / "bin" / "other-c++"
    shutil.copy(os.environ["CXX"], other)
    monkeypatch.setenv("CXX", str(other))
    mod = kffi.cpp.load_inline("compiler_lib", cpp_sources=src, functions=["nine"])
    assert mod.nine() == 9
    assert len(_compiles(counting_cxx)) == 2
    assert len([p for p in cache.iterdir() if p.name.startswith("compiler_lib_")]) == 2


def test_compiler_error_raises_build_error_with_command_and_output(cache):
    with pytest.raises(kffi.cpp.BuildError) as info:
        kffi.cpp.load_inline(
            "broken_lib", cpp_sources="int f() { return undeclared_name; }", functions=["f"]
        )
    err = info.value
    assert isinstance(err, RuntimeError)
    assert "undeclared_name" in err.output
    assert "undeclared_name" in str(err)
    assert "broken_lib.cpp:1:" in str(err)  # the caller's own line numbers
    assert err.returncode != 0
    assert "-c" in err.command and any(a.endswith("broken_lib.cpp") for a in err.command)
    assert " ".join(err.command[:1]) in str(err)
    # a failed build leaves no library behind, so the next call tries again
    assert not list(cache.rglob("*.so"))


def test_link_error_is_a_build_error_too(cache):
    src = "int missing(); int g() { return missing(); }"
    with pytest.raises(kffi.cpp.BuildError, match="missing") as info:
        kffi.cpp.load_inline(
            "link_lib", cpp_sources=src, functions=["g"], extra_ldflags=["-Wl,--no-undefined"]
        )
    assert "-shared" in info.value.command


def test_unknown_function_to_export_is_a_build_error(cache):
    with pytest.raises(kffi.cpp.BuildError, match="not_there"):
        kffi.cpp.load_inline(
            "noexport_lib", cpp_sources="int f() { return 1; }", functions=["not_there"]
        )


def test_bad_arguments(cache):
    with pytest.raises(ValueError, match="cpp_sources or cuda_sources"):
        kffi.cpp.load_inline("empty_lib", cpp_sources="  ")
    with pytest.raises(ValueError, match="build name"):
        kffi.cpp.load_inline("bad/name", cpp_sources="int f();")
    with pytest.raises(ValueError, match="C\\+\\+ identifiers"):
        kffi.cpp.load_inline("lib", cpp_sources="int f();", functions=["_f"])
    with pytest.raises(TypeError, match="extra_cflags must be a str or a list"):
        kffi.cpp.load_inline("lib", cpp_sources="int f();", extra_cflags=3)
    with pytest.raises(FileNotFoundError, match="nope.cc"):
        kffi.cpp.build("lib", ["nope.cc"])
    with pytest.raises(ValueError, match="at least one source"):
        kffi.cpp.build("lib", [])


def test_missing_compiler_is_named(cache, monkeypatch):
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    expected = "cannot find the C++ compiler '/nonexistent/c++' (set CXX)"
    with pytest.raises(RuntimeError, match=re.escape(expected)):
        kffi.cpp.load_inline("nocxx_lib", cpp_sources="int f() { return 1; }", functions=["f"])


def test_progress_lines_on_stderr_unless_quiet(cache, capfd):
    kffi.cpp.load_inline("progress_lib", cpp_sources="int p() { return 1; }", functions=["p"])
    err = capfd.readouterr().err
    assert "kffi.cpp: building 'progress_lib' (1 source)" in err
    assert "kffi.cpp: built 'progress_lib' in " in err and " s\n" in err
    kffi.cpp.load_inline(
        "quiet_lib", cpp_sources="int q() { return 1; }", functions=["q"], quiet=True
    )
    kffi.cpp.load_inline("progress_lib", cpp_sources="int p() { return 1; }", functions=["p"])
    assert capfd.readouterr().err == ""  # quiet build, then a cache hit


def test_verbose_prints_commands_and_output(cache, capfd):
    kffi.cpp.load_inline(
        "verbose_lib",
        cpp_sources="int v() { return 1; }",
        functions=["v"],
        verbose=True,
        extra_cflags=["-Wall"],
    )
    err = capfd.readouterr().err
    assert "kffi.cpp: " in err and " -c " in err and "-shared" in err and "-Wall" in err


def test_build_from_files_with_include_paths_and_build_directory(cache, tmp_path):
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "answer.h").write_text("#pragma once\ninline int Answer() { return 41; }\n")
    a = tmp_path / "a.cc"
    b = tmp_path / "b.cc"
    a.write_text(
        '#include <kffi/export.h>\n#include "answer.h"\n'
        "int Plus(int x);\nint Answer1() { return Plus(Answer()); }\n"
        "KFFI_EXPORT(answer, Answer1);\n"
    )
    b.write_text("int Plus(int x) { return x + ONE; }\n")
    out = tmp_path / "out"
    path = kffi.cpp.build(
        "answer_lib",
        [a, str(b)],
        extra_cflags=["-DONE=1"],
        extra_include_paths=[str(inc)],
        build_directory=out,
    )
    assert Path(path).parent == out and Path(path).name.startswith("answer_lib_")
    assert kffi.load_module(path).answer() == 42
    assert (
        kffi.cpp.build(
            "answer_lib",
            [a, b],
            extra_cflags=["-DONE=1"],
            extra_include_paths=[inc],
            build_directory=out,
        )
        == path
    )
    b.write_text("int Plus(int x) { return x + 2 * ONE; }\n")
    path2 = kffi.cpp.build(
        "answer_lib",
        [a, b],
        extra_cflags=["-DONE=1"],
        extra_include_paths=[inc],
        build_directory=out,
    )
    assert path2 != path  # a new file name, so the dynamic loader does not hand back the old one
    assert kffi.load_module(path2).answer() == 43
    assert not list(cache.glob("answer_lib_*"))  # build_directory replaces the cache folder


def test_depends_files_enter_the_build_key(cache, tmp_path):
    """A header the source includes is keyed only when listed in depends=: then changing it
    rebuilds, in build() and load_inline() alike; an unreadable one is named."""
    inc = tmp_path / "inc"
    inc.mkdir()
    header = inc / "answer.h"
    header.write_text("#pragma once\ninline int Answer() { return 41; }\n")
    src = tmp_path / "a.cc"
    src.write_text(
        '#include <kffi/export.h>\n#include "answer.h"\n'
        "int Answer1() { return Answer() + 1; }\nKFFI_EXPORT(answer, Answer1);\n"
    )
    path = kffi.cpp.build("dep_lib", [src], extra_include_paths=[inc], depends=[header])
    assert kffi.load_module(path).answer() == 42
    assert kffi.cpp.build("dep_lib", [src], extra_include_paths=[inc], depends=[header]) == path
    # Without depends=, the header is not part of the key: a different key from the one above.
    plain = kffi.cpp.build("dep_lib", [src], extra_include_paths=[inc])
    assert plain != path
    header.write_text("#pragma once\ninline int Answer() { return 42; }\n")
    path2 = kffi.cpp.build("dep_lib", [src], extra_include_paths=[inc], depends=[str(header)])
    assert path2 != path and kffi.load_module(path2).answer() == 43
    assert kffi.cpp.build("dep_lib", [src], extra_include_paths=[inc]) == plain  # stale, unkeyed
    inline = "int Two() { return Answer() * 2; }"
    kw = {"functions": ["Two"], "extra_cflags": [f"-include{header}"], "depends": [header]}
    assert kffi.cpp.load_inline("dep_inline", cpp_sources=inline, **kw).Two() == 84
    header.write_text("#pragma once\ninline int Answer() { return 5; }\n")
    assert kffi.cpp.load_inline("dep_inline", cpp_sources=inline, **kw).Two() == 10
    missing = tmp_path / "missing.h"
    with pytest.raises(FileNotFoundError, match="cannot read depends file .*missing.h"):
        kffi.cpp.build("dep_lib", [src], depends=[missing])


def test_concurrent_builds_of_one_key_build_once(cache, counting_cxx, tmp_path):
    go = tmp_path / "go"
    code = f"""
        import os, time, kffi.cpp
        while not os.path.exists({str(go)!r}):
            time.sleep(0.005)
        mod = kffi.cpp.load_inline("race_lib", cpp_sources="int r() {{ return 5; }}",
                                   functions=["r"])
        print(mod.r())
    """
    env = {**os.environ}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(code)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    time.sleep(0.5)  # both children are importing kffi and waiting for the signal
    go.touch()
    results = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, results):
        assert p.returncode == 0, err
        assert out.strip() == "5"
    assert len(_compiles(counting_cxx)) == 1  # the other process waited on the lock
    libs = list(cache.glob("race_lib_*/*.so"))
    assert len(libs) == 1
    assert not list(cache.glob("race_lib_*/.build-*"))  # no temporary left behind


def test_cuda_arch_flags_from_environment(monkeypatch):
    monkeypatch.setenv("KFFI_CUDA_ARCH", "8.0; sm_90a, 100+PTX")
    assert kffi.cpp._cuda_arch_flags() == [
        "-gencode=arch=compute_80,code=sm_80",
        "-gencode=arch=compute_90a,code=sm_90a",
        "-gencode=arch=compute_100,code=sm_100",
        "-gencode=arch=compute_100,code=compute_100",
    ]
    monkeypatch.setenv("KFFI_CUDA_ARCH", "volta")
    with pytest.raises(ValueError, match="KFFI_CUDA_ARCH: cannot read 'volta'"):
        kffi.cpp._cuda_arch_flags()
    monkeypatch.delenv("KFFI_CUDA_ARCH")
    monkeypatch.setattr(kffi.cpp, "_machine_gpu_archs", lambda: ())
    assert kffi.cpp._cuda_arch_flags() == []  # no GPU: nvcc's default


def test_cuda_arch_defaults_to_the_machines_gpus(monkeypatch):
    """Without KFFI_CUDA_ARCH, CUDA code is built for the GPUs present (an H100 ran kernels built
    for nvcc's default sm_75 from JIT-compiled PTX, measurably slower per launch in CUDA graphs),
    each architecture once, PTX added only for a GPU newer than nvcc."""
    monkeypatch.delenv("KFFI_CUDA_ARCH", raising=False)
    nvcc = kffi.cpp._Compiler(("nvcc",), "/usr/bin/nvcc", "release 13.0")
    monkeypatch.setattr(kffi.cpp, "_nvcc_gpu_codes", lambda c: ("75", "80", "90", "100", "120"))
    monkeypatch.setattr(kffi.cpp, "_machine_gpu_archs", lambda: ("80", "90"))
    assert kffi.cpp._cuda_arch_flags(nvcc) == [
        "-gencode=arch=compute_80,code=sm_80",
        "-gencode=arch=compute_90,code=sm_90",
    ]
    monkeypatch.setattr(kffi.cpp, "_machine_gpu_archs", lambda: ("90", "130"))
    assert kffi.cpp._cuda_arch_flags(nvcc) == [
        "-gencode=arch=compute_90,code=sm_90",
        "-gencode=arch=compute_120,code=compute_120",
    ]
    monkeypatch.setattr(kffi.cpp, "_nvcc_gpu_codes", lambda c: ())  # an nvcc that cannot say
    assert kffi.cpp._cuda_arch_flags(nvcc) == []
    monkeypatch.setenv("KFFI_CUDA_ARCH", "86")  # the variable still decides
    assert kffi.cpp._cuda_arch_flags(nvcc) == ["-gencode=arch=compute_86,code=sm_86"]


def test_gpu_codes_of_the_nvcc_in_use(tmp_path, monkeypatch):
    """nvcc --list-gpu-code is read once per compiler file, and remembered on disk."""
    monkeypatch.setenv("KFFI_CACHE_DIR", str(tmp_path / "cache"))
    calls = tmp_path / "calls"
    fake = tmp_path / "nvcc"
    fake.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> {calls}\n'
        'if [ "$1" = --list-gpu-code ]; then printf "sm_90\\nsm_100\\nsm_75\\n"; exit 0; fi\n'
        "exit 1\n"
    )
    fake.chmod(0o755)
    nvcc = kffi.cpp._Compiler((str(fake),), str(fake), "fake")
    assert kffi.cpp._nvcc_gpu_codes(nvcc) == ("75", "90", "100")
    assert kffi.cpp._nvcc_gpu_codes(nvcc) == ("75", "90", "100")
    assert calls.read_text().splitlines() == ["--list-gpu-code"]


def test_machine_gpu_archs_without_a_driver_is_empty_or_real():
    archs = kffi.cpp._machine_gpu_archs()
    assert isinstance(archs, tuple)
    assert all(a.isdigit() and int(a) >= 30 for a in archs)
    assert list(archs) == sorted(archs, key=int)


CUDA_SRC = r"""
__global__ void AddOneKernel(float* x, int64_t n) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) x[i] += 1.0f;
}
void add_one(kffi::TensorView x) {
  int64_t n = x.numel();
  AddOneKernel<<<static_cast<unsigned>((n + 255) / 256), 256>>>(x.data<float>(), n);
}
"""

needs_nvcc = pytest.mark.skipif(not kffi.cpp.nvcc_available(), reason="no nvcc found")


def _has_gpu() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


@needs_nvcc
def test_cuda_source_compiles_with_nvcc(cache, monkeypatch):
    # SASS for two architectures and PTX that newer GPUs compile at load time
    monkeypatch.setenv("KFFI_CUDA_ARCH", "80;90+PTX")
    mod = kffi.cpp.load_inline(
        "cuda_lib", cuda_sources=CUDA_SRC, functions=["add_one"], extra_cuda_cflags=["-lineinfo"]
    )
    assert mod.functions() == ["add_one"]
    if not _has_gpu():
        pytest.skip("built and loaded; no GPU to run the kernel on")
    import torch

    x = torch.zeros(1000, device="cuda")
    mod.add_one(x)
    torch.cuda.synchronize()
    assert torch.equal(x.cpu(), torch.ones(1000))


@needs_nvcc
def test_cuda_and_cpp_sources_together(cache):
    cpp = "void add_one(kffi::TensorView x);  // in the CUDA source\nint host() { return 3; }"
    mod = kffi.cpp.load_inline(
        "mixed_lib", cpp_sources=cpp, cuda_sources=CUDA_SRC, functions=["add_one", "host"]
    )
    assert mod.host() == 3
    assert sorted(mod.functions()) == ["add_one", "host"]


@needs_nvcc
def test_cuda_compiler_error_names_nvcc(cache):
    with pytest.raises(kffi.cpp.BuildError) as info:
        kffi.cpp.load_inline("cuda_broken", cuda_sources="__global__ void k() { nope(); }")
    assert "nvcc" in info.value.command[0]
    assert "nope" in str(info.value)
