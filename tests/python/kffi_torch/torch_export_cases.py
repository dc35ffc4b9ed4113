"""tests/python/kffi_torch/torch_export_cases.py: the processes of test_torch_export.py (a .pt2
package made by AOTInductor from a model with kffi ops, loaded in fresh Python processes).

    python torch_export_cases.py package PATH            # exports and packages the model
    python torch_export_cases.py run PATH [register|none] # loads PATH, runs it on n = 5

Each prints one JSON line (the model's results on arange(n), and eager PyTorch's).
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import json
import sys
from pathlib import Path

import kffi
import torch

HERE = Path(__file__).resolve().parent
SUPPORT = HERE.parent / "support"  # deploy_kernels.cc/.cu, shared with kffi_jax
NAMESPACE = "kffi_deploy_test"


def library() -> str:
    return kffi.cpp.build(
        "kffi_test_deploy_kernels", [str(SUPPORT / "deploy_kernels.cc")], quiet=True
    )


class Model(torch.nn.Module):
    """sin(x), each element twice (a kffi op whose output shape is 2 n), times 3 (a kffi op
    writing a mut output), plus 1."""

    def forward(self, x):
        ops = getattr(torch.ops, NAMESPACE)
        y = ops.repeat2(torch.sin(x))
        out = torch.empty_like(y)
        ops.scale(out, y, 3.0)
        return out + 1


def eager(x):
    return (torch.sin(x).repeat_interleave(2) * 3 + 1).tolist()


def main(argv) -> int:
    what, path = argv[1], argv[2]
    mod = kffi.load_module(library())
    if what == "package":
        mod.torch_ops(NAMESPACE)
        x = torch.arange(4, dtype=torch.float32)
        ep = torch.export.export(Model(), (x,), dynamic_shapes={"x": {0: torch.export.Dim("n")}})
        torch._inductor.aoti_compile_and_package(ep, package_path=path)
        print(json.dumps({"model": Model()(x).tolist(), "eager": eager(x)}))
        return 0
    if argv[3] == "register":
        mod.torch_ops(NAMESPACE)
    runner = torch._inductor.aoti_load_package(path)
    x = torch.arange(5, dtype=torch.float32)
    print(json.dumps({"model": runner(x).tolist(), "eager": eager(x)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
