"""tests/cute_dsl/build_kernels.py: CuTe DSL kernels exported for the TVM-FFI ABI, as shared libraries.

    python tests/cute_dsl/build_kernels.py OUT_DIR [--copy-runtime]

Compiles (no GPU needed; CUTE_DSL_ARCH defaults to sm_90a) the add_one kernel of the CuTe DSL
guide in three variants and exports each with ``export_to_c``:

- ``add_one``: ``add_one(a, b)`` on the TVM-FFI environment stream (``use_tvm_ffi_env_stream``);
- ``add_one_div``: the same with ``n`` divisible by 16 and 16-byte aligned data;
- ``add_one_stream``: an explicit stream argument, ``add_one_stream(a, b, stream)``.

Each object is linked twice, as the guide's two ways of linking allow: ``<name>.so`` with the
DSL's runtime only (its TVM-FFI imports left for the loader: kffi provides them), and
``<name>_tvm.so`` with ``find_runtime_libraries(enable_tvm_ffi=True)`` (DT_NEEDED libtvm_ffi.so).
With ``--copy-runtime`` libcute_dsl_runtime.so is copied into OUT_DIR and found through
``$ORIGIN``, so the folder can be carried to a machine without the DSL (the GPU checks).
Writes OUT_DIR/manifest.json.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys


def export_objects(out_dir: str) -> dict[str, str]:
    """Compiles the three variants; returns {name: object file}."""
    os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from cutlass import cute
    from kernels import add_one

    n = cute.sym_int()
    a = cute.runtime.make_fake_compact_tensor(cute.Float32, (n,))
    b = cute.runtime.make_fake_compact_tensor(cute.Float32, (n,))
    env_stream = cute.runtime.make_fake_stream(use_tvm_ffi_env_stream=True)
    n16 = cute.sym_int(divisibility=16)
    a16 = cute.runtime.make_fake_compact_tensor(cute.Float32, (n16,), assumed_align=16)
    b16 = cute.runtime.make_fake_compact_tensor(cute.Float32, (n16,), assumed_align=16)
    variants = {
        "add_one": (a, b, env_stream),
        "add_one_div": (a16, b16, env_stream),
        "add_one_stream": (a, b, cute.runtime.make_fake_stream()),
    }
    objects = {}
    for name, args in variants.items():
        compiled = cute.compile(add_one, *args, options="--enable-tvm-ffi")
        path = os.path.join(out_dir, f"{name}.o")
        compiled.export_to_c(path, function_name=name)
        objects[name] = path
    return objects


def link(objects: dict[str, str], out_dir: str, copy_runtime: bool) -> dict[str, str]:
    from cutlass import cute

    runtime_libs = cute.runtime.find_runtime_libraries(enable_tvm_ffi=True)
    dsl_runtime = next(p for p in runtime_libs if "cute_dsl_runtime" in os.path.basename(p))
    tvm_runtime = [p for p in runtime_libs if p != dsl_runtime]
    if copy_runtime:
        shutil.copy2(dsl_runtime, os.path.join(out_dir, os.path.basename(dsl_runtime)))
        rpath = "$ORIGIN"
        dsl_link = [os.path.join(out_dir, os.path.basename(dsl_runtime))]
    else:
        rpath = os.path.dirname(dsl_runtime)
        dsl_link = [dsl_runtime]
    libs = {}
    for name, obj in objects.items():
        for flavour, extra in (("", []), ("_tvm", tvm_runtime)):
            out = os.path.join(out_dir, f"{name}{flavour}.so")
            rpaths = [rpath] + [os.path.dirname(p) for p in extra]
            cmd = ["gcc", "-shared", "-o", out, obj, *dsl_link, *extra]
            cmd += [f"-Wl,-rpath,{r}" for r in rpaths]
            subprocess.run(cmd, check=True)
            libs[f"{name}{flavour}"] = out
    return libs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--copy-runtime", action="store_true")
    args = parser.parse_args(argv)
    os.makedirs(args.out_dir, exist_ok=True)
    out_dir = os.path.abspath(args.out_dir)
    objects = export_objects(out_dir)
    libs = link(objects, out_dir, args.copy_runtime)
    import cutlass

    manifest = {
        "libraries": {k: os.path.basename(v) for k, v in libs.items()},
        "cutlass_dsl": getattr(cutlass, "__version__", "unknown"),
        "arch": os.environ.get("CUTE_DSL_ARCH", ""),
    }
    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
    print(json.dumps(manifest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
