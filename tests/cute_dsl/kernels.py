"""tests/cute_dsl/kernels.py: the add_one kernel of the CuTe DSL guide (seed 000).

Imported by build_kernels.py after it sets CUTE_DSL_ARCH. The DSL resolves annotations from
module globals, so the kernels live at module level.
"""
# SPDX-License-Identifier: Apache-2.0

from cuda.bindings.driver import CUstream
from cutlass import cute


@cute.kernel
def device_add_one(a: cute.Tensor, b: cute.Tensor):
    threads_per_block = 128
    bx, _, _ = cute.arch.block_idx()
    tx, _, _ = cute.arch.thread_idx()
    tid = bx * threads_per_block + tx
    if tid < a.shape[0]:
        b[tid] = a[tid] + 1.0


@cute.jit
def add_one(a: cute.Tensor, b: cute.Tensor, stream: CUstream):
    n = a.shape[0]
    blocks = (n + 127) // 128
    device_add_one(a, b).launch(grid=(blocks, 1, 1), block=(128, 1, 1), stream=stream)
