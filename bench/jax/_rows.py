"""bench/jax/_rows.py: the report of the row-parallel benches (shard_rows.py, multiprocess_rows.py):
table cells, the goal's verdict, and the JSON file."""
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

HEADER = f"{'median ms':>10} {'/ single':>9}"  # after a left-aligned case column


def row(median_s: float, ratio: float) -> str:
    """The cells of HEADER: a case's median time and its ratio to the single-device case."""
    return f"{median_s * 1e3:>10.3f} {ratio:>8.2f}x"


def collectives_text(counts: dict) -> str:
    """'3 (all-gather 2, all-reduce 1)', or '0 (none)', from collectives()' counts of a HLO."""
    detail = ", ".join(f"{k} {v}" for k, v in counts.items() if v) or "none"
    return f"{sum(counts.values())} ({detail})"


def goal_text(ratio: float, goal: float) -> str:
    return f"goal: sharded <= {goal}x single: {ratio:.2f}x ({'met' if ratio <= goal else 'missed'})"


def write(out: str, result: dict) -> None:
    """Writes result, then the versions and host it ran on, to out as JSON, and says so."""
    import jax

    result = {
        **result,
        "jax": jax.__version__,
        "python": sys.version.split()[0],
        "host": platform.node(),
    }
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    print(f"wrote {path}")
