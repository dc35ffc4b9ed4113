"""examples/aot/export_add_one.py: compile a kernel with a contract and export it ahead of time.

    python examples/aot/export_add_one.py OUT_DIR

writes OUT_DIR/add_one.o (the object), OUT_DIR/add_one.h (its C and C++ interface),
OUT_DIR/libadd_one.so (the same function as a shared library) and OUT_DIR/add_one.pyi (stubs).
"""
# SPDX-License-Identifier: Apache-2.0

import os
import sys

import kffi

SOURCE = r"""
void add_one(kffi::ConstTensorView x, kffi::TensorView y) {
  const float* in = x.data<float>();
  float* out = y.data<float>();
  for (int64_t i = 0; i < x.shape()[0]; ++i) out[i] = in[i] + 1.0f;
}
"""


def main(out_dir: str) -> None:
    os.makedirs(out_dir, exist_ok=True)
    n = kffi.sym_int("n")
    add_one = kffi.compile(
        SOURCE,
        "add_one",
        kffi.fake_tensor("float32", (n,)),
        kffi.fake_tensor("float32", (n,), mut=True),
        options={"doc": "y = x + 1", "quiet": True},
    )
    obj = add_one.export(os.path.join(out_dir, "add_one.o"))
    lib = add_one.export(os.path.join(out_dir, "libadd_one.so"))
    kffi.stubgen(kffi.load_module(lib), os.path.join(out_dir, "add_one.pyi"))
    print(f"exported {os.path.basename(obj)} + add_one.h, {os.path.basename(lib)}, add_one.pyi")
    print(f"contract: {add_one.contract}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "aot_out")
