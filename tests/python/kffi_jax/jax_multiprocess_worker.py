"""tests/python/kffi_jax/jax_multiprocess_worker.py: one process of a multi-process JAX job that
calls kffi kernels (test_jax_multiprocess.py starts the processes).

X
    python jax_multiprocess_worker.py PROCESS_ID NUM_PROCESSES PORT OUT_DIR

Each process has 2 virtual CPU devices, joins the job with jax.distributed.initialize (gloo
collectives on the CPU), compiles the kernels itself (the processes share one empty kffi cache,
so they build at the same time), and calls them under jax.jit over the global mesh. It writes
OUT_DIR/process<ID>.json with what it saw; a failure is written there too.
"""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"

import jax
from ranks import report_rank

COLLECTIVES = ("all-gather", "all-to-all", "collective-permute", "all-reduce", "reduce-scatter")

SOURCE = r"""
// Normalises each row by its sum; a row that does not sum to a positive number is refused.
void rownorm(kffi::ConstTensorView x, kffi::TensorView y) {
  const int64_t n = x.size(0), m = x.size(1);
  const float* a = x.data<float>();
  float* b = y.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    float s = 0;
    for (int64_t j = 0; j < m; ++j) s += a[i * m + j];
    KFFI_CHECK(s > 0, ValueError) << "row " << i << " of " << n << " sums to " << s;
    for (int64_t j = 0; j < m; ++j) b[i * m + j] = a[i * m + j] / s;
  }
}
"""


def collectives(text: str) -> list[str]:
    return [c for c in COLLECTIVES if c in text]


def run(report: dict, pid: int, nproc: int, port: int) -> None:
    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=nproc, process_id=pid)

    import kffi
    import kffi.jax
    import numpy as np
    from jax.experimental import multihost_utils
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    report["devices"] = len(jax.devices())
    report["local_devices"] = len(jax.local_devices())
    fake = kffi.fake_tensor
    n, m = kffi.sym_int("n", parallel=True), kffi.sym_int("m")
    rows = kffi.compile(
        SOURCE, "rownorm", fake("float32", (n, m)), fake("float32", (n, m), mut=True)
    )
    a, b = kffi.sym_int(), kffi.sym_int()
    plain = kffi.compile(
        SOURCE, "rownorm", fake("float32", (a, b)), fake("float32", (a, b), mut=True)
    )

    mesh = Mesh(np.array(jax.devices()), ("d",))
    rows_split = NamedSharding(mesh, P("d", None))
    x = np.random.default_rng(0).random((8 * nproc, 6), dtype=np.float32) + 0.5
    xs = jax.make_array_from_callback(x.shape, rows_split, lambda index: x[index])

    # The first calls of both kernels happen on two threads at once, each tracing its own jit:
    # the kffi.jax handler and the targets are registered lazily, once.
    f = jax.jit(lambda v: kffi.jax.call(rows, v))
    g = jax.jit(lambda v: kffi.jax.call(plain, v))
    results: dict = {}

    def first_call(key, fun):
        try:
            results[key] = fun(xs)
        except BaseException as e:  # reported below, in the main thread
            results[key] = e

    threads = [threading.Thread(target=first_call, args=kv) for kv in (("f", f), ("g", g))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for key in ("f", "g"):
        if isinstance(results[key], BaseException):
            raise results[key]

    # The same call in one process, on one device, with the whole input.
    whole = np.asarray(
        jax.jit(lambda v: kffi.jax.call(rows, v))(jax.device_put(x, jax.local_devices()[0]))
    )
    sharded = multihost_utils.process_allgather(results["f"], tiled=True)
    report["sharded_equals_one_process"] = bool(np.array_equal(sharded, whole))
    report["sharded_error"] = float(np.abs(sharded - x / x.sum(1, keepdims=True)).max())
    report["sharded_collectives"] = collectives(f.lower(xs).compile().as_text())
    report["local_shard_shapes"] = [list(s.data.shape) for s in results["f"].addressable_shards]
    report["output_sharding_kept"] = bool(results["f"].sharding.is_equivalent_to(rows_split, 2))
    gathered = multihost_utils.process_allgather(results["g"], tiled=True)
    report["plain_error"] = float(np.abs(gathered - whole).max())
    report["plain_collectives"] = collectives(g.lower(xs).compile().as_text())

    # A row that the kernel refuses, in the last process's part of the input only.
    bad = x.copy()
    bad[x.shape[0] - 3] = -1.0
    bs = jax.make_array_from_callback(x.shape, rows_split, lambda index: bad[index])
    try:
        f(bs).block_until_ready()
        report["bad_input"] = "ran"
    except jax.errors.JaxRuntimeError as e:
        report["bad_input"] = str(e)

    # Every process is still healthy: one more sharded call, then a clean shutdown.
    again = multihost_utils.process_allgather(f(xs), tiled=True)
    report["after_error_ok"] = bool(np.array_equal(again, whole))
    jax.distributed.shutdown()


def main(argv: list[str]) -> None:
    pid, nproc, port, out = int(argv[1]), int(argv[2]), int(argv[3]), Path(argv[4])
    report_rank(out / f"process{pid}.json", lambda r: run(r, pid, nproc, port), process=pid)


if __name__ == "__main__":
    main(sys.argv)
