"""tests/python/kffi_torch/torch_aoti_cases.py: packages torch_export_cases.py's model for the C++
runner of test_torch_aoti_cpp.py on a device, with the manifest of its kffi ops.

    python torch_aoti_cases.py PATH.pt2 MANIFEST DEVICE   # DEVICE: cpu or cuda

The kernels are deploy_kernels.cc (cpu) or deploy_kernels.cu (cuda); prints one JSON line (the
model's results on arange(4) and eager PyTorch's).
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import json
import sys
from pathlib import Path

import kffi
import kffi.cpp
import kffi.torch
import torch
from torch_export_cases import NAMESPACE, Model, eager
from torch_export_cases import library as cpu_library

HERE = Path(__file__).resolve().parent
SUPPORT = HERE.parent / "support"  # deploy_kernels.cc/.cu, shared with kffi_jax


def library(device: str) -> str:
    if device == "cpu":
        return cpu_library()
    return kffi.cpp.build(
        "kffi_test_deploy_kernels_cu", [str(SUPPORT / "deploy_kernels.cu")], quiet=True
    )


def main(argv) -> int:
    path, manifest, device = argv[1], argv[2], argv[3]
    ops = kffi.load_module(library(device)).torch_ops(NAMESPACE)
    kffi.torch.save_ops(manifest, ops)
    x = torch.arange(4, dtype=torch.float32, device=device)
    ep = torch.export.export(Model(), (x,), dynamic_shapes={"x": {0: torch.export.Dim("n")}})
    torch._inductor.aoti_compile_and_package(ep, package_path=path)
    print(json.dumps({"model": Model()(x).tolist(), "eager": eager(x.cpu())}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
